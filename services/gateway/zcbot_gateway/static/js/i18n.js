/* The one dictionary of the pages: Chinese by default, English when the browser's first language
 * is English; the page's own 中文/English switch (remembered in localStorage) overrides both. Every label, message, empty state and error the pages write comes from here;
 * static HTML names its key in data-i18n (text), data-i18n-placeholder, -title, -aria-label. */

import { zh } from "./lang/zh.js";
import { en } from "./lang/en.js";

const LANG_KEY = "zcbot.lang";
const first = (navigator.languages && navigator.languages[0]) || navigator.language || "zh";
const chosen = localStorage.getItem(LANG_KEY);
export const lang = chosen === "zh" || chosen === "en" ? chosen : /^en\b/i.test(first) ? "en" : "zh";

/** The person's choice of language, remembered; the page reloads in it (every text is drawn once). */
export function setLang(value) {
  if (value !== "zh" && value !== "en") return;
  localStorage.setItem(LANG_KEY, value);
  if (value !== lang) location.reload();
}

export const DICTIONARIES = { zh, en };
const dict = DICTIONARIES[lang];

/** The text of `key` with {name} placeholders filled; an unknown key shows itself (a test finds it). */
export function t(key, params = {}) {
  const text = dict[key] !== undefined ? dict[key] : key;
  return text.replace(/\{(\w+)\}/g, (m, name) => (params[name] !== undefined ? String(params[name]) : m));
}

export function statusLabel(status) {
  const key = "status." + status;
  return dict[key] !== undefined ? dict[key] : String(status || "");
}

/** Fill the static HTML: data-i18n (text), data-i18n-placeholder, -title, -aria-label. */
export function applyI18n(root) {
  document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
  for (const node of root.querySelectorAll("[data-i18n]")) node.textContent = t(node.dataset.i18n);
  for (const attr of ["placeholder", "title", "aria-label"]) {
    for (const node of root.querySelectorAll(`[data-i18n-${attr}]`)) node.setAttribute(attr, t(node.getAttribute(`data-i18n-${attr}`)));
  }
  const title = document.querySelector("title[data-i18n]");
  if (title) document.title = t(title.dataset.i18n);
}
