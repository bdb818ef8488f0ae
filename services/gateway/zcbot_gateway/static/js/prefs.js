/* The 设置 dialog (issue 37): the page's language (中文 / English: each named in its own
 * language) and theme (跟随系统 / 浅色 / 深色), both remembered in this browser; signed in, also
 * the WeCom binding (wecom.js, issue 40). */

import { $, el } from "./dom.js";
import { openModal } from "./focustrap.js";
import { lang, setLang, t } from "./i18n.js";
import { THEMES, setTheme, themePref } from "./theme.js";
import { loadWeCom } from "./wecom.js";

const LANGS = [["zh", "中文"], ["en", "English"]];

function radios(name, options, current, onPick) {
  return options.map(([value, label]) => {
    const input = el("input", { type: "radio", name, value, "data-testid": `${name}-${value}`, checked: value === current });
    input.addEventListener("change", () => { if (input.checked) onPick(value); });
    return el("label", { class: "choice" }, input, " ", label);
  });
}

export function setupPrefs() {
  const dialog = $("prefs-dialog");
  $("prefs-lang").replaceChildren(el("legend", {}, t("prefs.language")), ...radios("lang", LANGS, lang, setLang));
  $("prefs-theme").replaceChildren(el("legend", {}, t("prefs.theme")),
    ...radios("theme", THEMES.map((v) => [v, t("prefs.theme_" + v)]), themePref(), setTheme));
  $("prefs-button").addEventListener("click", (e) => {
    loadWeCom();
    openModal(dialog, e.currentTarget);
  });
  $("prefs-close").addEventListener("click", () => dialog.close());
}
