/* Copy buttons (a message, a code block): the clipboard API where the page may use it, else a
 * hidden textarea and execCommand (plain http on a LAN address is not a secure context). */

import { el } from "./dom.js";
import { t } from "./i18n.js";

export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try { await navigator.clipboard.writeText(text); return true; } catch (_) { /* fall back */ }
  }
  const area = el("textarea", { class: "visually-hidden", "aria-hidden": "true", readonly: true });
  area.value = text;
  document.body.append(area);
  area.select();
  let ok = false;
  try { ok = document.execCommand("copy"); } catch (_) { ok = false; }
  area.remove();
  return ok;
}

/** A small "复制" button; `text()` is read at click time (a streaming answer keeps growing). */
export function copyButton(text, testid, labelKey = "copy.message") {
  const button = el("button", { type: "button", class: "copy-button small", "data-testid": testid,
    "aria-label": t(labelKey) }, t("copy.copy"));
  button.addEventListener("click", async () => {
    const ok = await copyText(text());
    button.textContent = ok ? t("copy.copied") : t("copy.failed");
    button.dataset.copied = ok ? "true" : "false";
    clearTimeout(button.resetTimer);
    button.resetTimer = setTimeout(() => { button.textContent = t("copy.copy"); delete button.dataset.copied; }, 1500);
  });
  return button;
}
