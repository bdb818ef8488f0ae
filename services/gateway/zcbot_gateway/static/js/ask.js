/* The pages' own dialogs instead of window.prompt()/confirm() (issue 37): a prompt shows what it
 * asks in clear text (a new password too), cannot be styled or translated in its buttons, and a
 * phone shows it as a browser sheet. ask() opens a modal <dialog> with labelled fields (type
 * password masks), an error line, Cancel and a confirm button (red for a destructive action), in
 * the page's language; it resolves with the values, or null when cancelled (button, Escape). */

import { el } from "./dom.js";
import { openModal } from "./focustrap.js";
import { t } from "./i18n.js";

let seq = 0;

/**
 * ask({title, message, fields: [{name, label, type, value, hint}], confirm, danger, check})
 * check(values) returns an error text to keep the dialog open with it, or "" to accept.
 */
export function ask({ title, message = "", fields = [], confirm = t("ask.ok"), danger = false, check = null }) {
  const opener = document.activeElement;
  return new Promise((resolve) => {
    const id = "ask-title-" + ++seq;
    const inputs = fields.map((f) => el("input", {
      name: f.name, type: f.type || "text", value: f.value ?? "", "data-testid": "ask-" + f.name,
      autocomplete: f.type === "password" ? "new-password" : "off", inputmode: f.inputmode || null,
      placeholder: f.placeholder || null,
    }));
    const error = el("p", { class: "error", role: "alert", "data-testid": "ask-error" });
    const cancel = el("button", { type: "button", "data-testid": "ask-cancel" }, t("ask.cancel"));
    const ok = el("button", { type: "submit", class: danger ? "danger" : "primary", "data-testid": "ask-ok" }, confirm);
    const form = el("form", { class: "stack", novalidate: true },
      el("h2", { id }, title),
      message ? el("p", { class: "ask-message", "data-testid": "ask-message" }, message) : null,
      fields.map((f, i) => el("label", {}, el("span", {}, f.label), inputs[i],
        f.hint ? el("span", { class: "muted small-text" }, f.hint) : null)),
      error,
      el("div", { class: "row ask-buttons" }, cancel, ok));
    const dialog = el("dialog", { class: "ask-dialog", "aria-labelledby": id, "data-testid": "ask-dialog",
      "data-kind": danger ? "danger" : "ask" }, form);
    let result = null;
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const values = Object.fromEntries(fields.map((f, i) => [f.name, inputs[i].value]));
      const problem = check ? check(values) : "";
      if (problem) {
        error.textContent = problem;
        return;
      }
      result = values;
      dialog.close();
    });
    cancel.addEventListener("click", () => dialog.close());
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(result);
    }, { once: true });
    document.body.append(dialog);
    openModal(dialog, opener);
    // A confirmation starts on Cancel (Enter does not destroy by accident); a form on its first field.
    (inputs[0] || cancel).focus();
  });
}

/** A yes/no question for a destructive action: true only when the person confirms. */
export async function confirmDanger(title, message, confirm) {
  return (await ask({ title, message, confirm, danger: true })) !== null;
}
