/* DOM and formatting helpers shared by every page module. Server text is only ever inserted as
 * text nodes here; the one place that turns text into HTML is markdown.js (sanitized). */

import { lang, t } from "./i18n.js";

/** el("div", {class: "x", "data-testid": "y", onclick: fn}, "text", child, ...) */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (value === true) node.setAttribute(key, "");
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export const $ = (id) => document.getElementById(id);

export function tid(name) { return `[data-testid="${name}"]`; }

export function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    if (signal) signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

export function formatBytes(n) {
  if (n === null || n === undefined || n === "") return "";
  const v = Number(n);
  if (!Number.isFinite(v)) return String(n);
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  let x = v;
  while (x >= 1024 && i < units.length - 1) { x /= 1024; i += 1; }
  return (i === 0 ? String(x) : x.toFixed(1)) + " " + units[i];
}

export function formatTime(value) {
  if (value === null || value === undefined || value === "") return "";
  const d = typeof value === "number" ? new Date(value * (value < 1e12 ? 1000 : 1)) : new Date(value);
  return Number.isNaN(d.getTime()) ? String(value) : d.toLocaleString(lang === "zh" ? "zh-CN" : "en");
}

/** 3725 -> "1 小时 2 分 5 秒" / "1h 2m 5s": the largest unit first, zero units dropped. */
export function formatDuration(seconds) {
  let s = Math.max(0, Math.round(Number(seconds) || 0));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  const parts = [];
  if (d) parts.push(t("unit.days", { n: d }));
  if (h) parts.push(t("unit.hours", { n: h }));
  if (m) parts.push(t("unit.minutes", { n: m }));
  if (s || !parts.length) parts.push(t("unit.seconds", { n: s }));
  return parts.join(" ");
}

export function clip(text, n = 4000) {
  const s = text === null || text === undefined ? "" : String(text);
  return s.length > n ? s.slice(0, n) + "\n" + t("text.more_chars", { n: s.length - n }) : s;
}

export function parseJson(text) {
  try { return JSON.parse(text); } catch (_) { return text; }
}

/** Items of a list answer: the one envelope `{items, total, page, page_size}`; older shapes too. */
export function itemsOf(body, ...legacyKeys) {
  if (Array.isArray(body)) return body;
  if (!body || typeof body !== "object") return [];
  for (const key of ["items", ...legacyKeys, "results"]) if (Array.isArray(body[key])) return body[key];
  return [];
}

export function totalOf(body) {
  if (!body || typeof body !== "object") return null;
  for (const key of ["total", "count"]) if (typeof body[key] === "number") return body[key];
  return null;
}

/** Save `blob` as a download named `name` (a blob URL: the request needed the auth header). */
export function saveBlob(blob, name) {
  const href = URL.createObjectURL(blob);
  const a = el("a", { href, download: name || "download" });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(href), 30000);
}

export function notice(kind, text, testid) {
  return el("div", { class: "notice " + kind, role: kind === "error" ? "alert" : "status", "data-testid": testid },
    text);
}
