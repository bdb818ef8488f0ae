/* The admin page's generic renderers: groups of numbers and tables of rows, labelled from the
 * dictionary (field.<key>, a humanized key otherwise) and formatted by the key's unit, so the
 * page keeps working as the admin API grows fields. */

import { DICTIONARIES, lang, t } from "./i18n.js";
import { el, formatBytes, formatDuration, formatTime } from "./dom.js";

export function label(key) {
  const k = "field." + key;
  if (DICTIONARIES[lang][k] !== undefined) return t(k);
  const s = String(key).replace(/[._]+/g, " ").trim();
  return s.charAt(0).toUpperCase() + s.slice(1);
}

export function formatValue(key, value) {
  if (value === null || value === undefined || value === "") return "—";
  const k = String(key).toLowerCase();
  if (typeof value === "boolean") return value ? t("admin.yes") : t("admin.no");
  if (typeof value === "number") {
    if (/cost|usd|price|spend/.test(k)) return "$" + value.toFixed(value !== 0 && Math.abs(value) < 1 ? 4 : 2);
    if (/bytes/.test(k)) return formatBytes(value);
    if (/_seconds$/.test(k)) return formatDuration(value);
    if (/_ms$/.test(k)) return value.toLocaleString() + " ms";
    return Number.isInteger(value) ? value.toLocaleString() : value.toLocaleString(undefined, { maximumFractionDigits: 3 });
  }
  if (typeof value === "string" && /(_at|^at)$/.test(k)) return formatTime(value);
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

/** {a: 1, b: {c: 2}} -> [["a", 1], ["b.c", 2]]: scalars only, nested objects flattened. */
export function flatten(obj, prefix = "") {
  const out = [];
  for (const [key, value] of Object.entries(obj || {})) {
    const name = prefix ? prefix + "." + key : key;
    if (Array.isArray(value)) continue;
    if (value !== null && typeof value === "object") out.push(...flatten(value, name));
    else out.push([name, value]);
  }
  return out;
}

export function stat(fullKey, value) {
  const last = fullKey.split(".").pop();
  return el("div", { class: "stat", "data-testid": "overview-stat", "data-key": fullKey },
    el("dt", {}, label(last)), el("dd", {}, formatValue(last, value)));
}

export function table(caption, rows, testid) {
  if (!rows.length) {
    return el("div", { "data-testid": testid }, el("h3", {}, caption), el("p", { class: "muted" }, t("admin.no_data")));
  }
  const cols = [];
  for (const row of rows) for (const key of Object.keys(row)) if (!cols.includes(key)) cols.push(key);
  const numeric = new Set(cols.filter((c) => rows.some((r) => typeof r[c] === "number")));
  // "cards": below 600 px each row is a card, each cell labelled with its column (data-label).
  return el("table", { class: "data cards", "data-testid": testid },
    el("caption", {}, caption),
    el("thead", {}, el("tr", {}, cols.map((c) => el("th", { scope: "col", class: numeric.has(c) ? "num" : null }, label(c))))),
    el("tbody", {}, rows.map((r) => el("tr", { "data-testid": "table-row" },
      cols.map((c) => el("td", { class: numeric.has(c) ? "num" : null, "data-label": label(c) }, formatValue(c, r[c])))))));
}
