/* The page's theme: 跟随系统 (the OS's light/dark, followed live), 浅色 or 深色, remembered in
 * localStorage. It sets <html data-theme> (style.css) and which highlight.js stylesheet applies.
 * Applied when this module loads, before the first paint of the page's own content. */

const THEME_KEY = "zcbot.theme";
export const THEMES = ["system", "light", "dark"];
const dark = window.matchMedia("(prefers-color-scheme: dark)");

export function themePref() {
  const value = localStorage.getItem(THEME_KEY);
  return THEMES.includes(value) ? value : "system";
}

export function applyTheme() {
  const pref = themePref();
  const theme = pref === "system" ? (dark.matches ? "dark" : "light") : pref;
  document.documentElement.dataset.theme = theme;
  for (const link of document.querySelectorAll("link[data-hljs]")) link.media = link.dataset.hljs === theme ? "all" : "not all";
}

export function setTheme(pref) {
  if (!THEMES.includes(pref)) return;
  localStorage.setItem(THEME_KEY, pref);
  applyTheme();
}

dark.addEventListener("change", applyTheme);
applyTheme();
