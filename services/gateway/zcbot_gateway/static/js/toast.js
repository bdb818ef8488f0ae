/* Toasts: short notes that do not depend on the open task (a background job ended elsewhere,
 * a password changed). One live region; each toast stays a few seconds and can be dismissed. */

import { el, $ } from "./dom.js";
import { t } from "./i18n.js";

const SHOW_MS = 8000;

/** `action`: {label, run, testid} — a button in the toast (Undo); using it closes the toast. */
export function toast(text, kind = "info", testid = "toast", action = null) {
  const box = $("toasts");
  if (!box) return null;
  const item = el("div", { class: "toast " + kind, role: kind === "error" ? "alert" : "status", "data-testid": testid },
    el("span", { class: "toast-text" }, text),
    action ? el("button", { type: "button", class: "small toast-action", "data-testid": action.testid || "toast-action",
      onclick: () => { item.remove(); action.run(); } }, action.label) : null,
    el("button", { type: "button", class: "link-button", "aria-label": t("action.dismiss"),
      onclick: () => item.remove() }, "×"));
  box.append(item);
  setTimeout(() => item.remove(), SHOW_MS);
  return item;
}
