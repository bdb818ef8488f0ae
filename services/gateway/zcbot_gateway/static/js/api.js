/* The /v1 API client: the Bearer token in localStorage, the one error envelope
 * (problem+json: `detail` is always a string, `errors[]` on 422), and the connection state that
 * the disconnected indicator shows (connection.js). Every request names the page's language
 * (Accept-Language), so the server's messages are in the language of the labels around them. */

import { lang, t } from "./i18n.js";

const TOKEN_KEY = "zcbot.token";
const USER_KEY = "zcbot.user_id";

export const auth = {
  get token() { return localStorage.getItem(TOKEN_KEY); },
  get userId() { return localStorage.getItem(USER_KEY); },
  set(token, userId) {
    localStorage.setItem(TOKEN_KEY, token);
    localStorage.setItem(USER_KEY, userId);
  },
  clear() {
    localStorage.removeItem(TOKEN_KEY);
    localStorage.removeItem(USER_KEY);
  },
};

export class ApiError extends Error {
  constructor(status, detail, code = "", body = null) {
    super(detail || t("error.http", { status }));
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

/** A fetch that never reached the server (stack stopped, network down). */
export class NetworkError extends Error {
  constructor() {
    super(t("error.network"));
    this.status = 0;
  }
}

/** The message of an error body: the envelope's `detail` (+ the fields of a 422), older shapes too. */
export function detailText(body) {
  if (!body || typeof body !== "object") return "";
  const d = body.detail;
  let text = typeof d === "string" ? d : Array.isArray(d) ? d.map((x) => (x && x.msg) || "").join("; ") : "";
  if (Array.isArray(body.errors) && body.errors.length) {
    const fields = body.errors.map((e) => {
      const loc = Array.isArray(e.loc) ? e.loc.filter((p) => p !== "body" && p !== "query").join(".") : "";
      return (loc ? loc + ": " : "") + (e.msg || "");
    });
    text = fields.join("; ") || text;
  }
  return text || body.title || body.message || "";
}

const listeners = { unauthorized: null, online: new Set() };
let online = true;

export function onUnauthorized(fn) { listeners.unauthorized = fn; }
export function onConnectionChange(fn) { listeners.online.add(fn); }
export function isOnline() { return online; }

export function setOnline(value) {
  if (value === online) return;
  online = value;
  for (const fn of listeners.online) fn(value);
}

const CJK = /[\u3400-\u9fff]/;
// Codes some routes already answer in the request's language, with more in them than the
// dictionary's sentence (a wait in seconds, the service named): their Chinese text is kept.
const SPOKEN_BY_SERVER = new Set(["too_many_attempts", "service_unavailable", "preview_unavailable"]);

/** The refusal in the page's language: the dictionary's sentence for the envelope's `code` when
 * the page has one (a server's English detail may still echo Chinese input, so its script says
 * nothing), else the server's text as it came (422s and file-history refusals follow
 * Accept-Language already). */
export function refusalText(code, detail) {
  if (lang !== "zh" || !code) return detail;
  if (SPOKEN_BY_SERVER.has(code) && CJK.test(detail || "")) return detail;
  const key = "errcode." + code;
  return t(key) !== key ? t(key) : detail;
}

export async function errorFrom(resp) {
  let body = null;
  try { body = await resp.json(); } catch (_) { /* not JSON */ }
  const code = (body && body.code) || "";
  const err = new ApiError(resp.status, refusalText(code, detailText(body) || resp.statusText), code, body);
  err.serverDetail = detailText(body);
  if (resp.status === 401 && listeners.unauthorized) listeners.unauthorized(err);
  return err;
}

export function authHeaders(extra = {}) {
  const h = { "Accept-Language": lang, ...extra };
  if (auth.token) h.Authorization = "Bearer " + auth.token;
  return h;
}

export async function api(path, { method = "GET", json, body, headers = {}, signal, raw = false } = {}) {
  const h = authHeaders(headers);
  if (json !== undefined) {
    h["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  }
  let resp;
  try {
    resp = await fetch(path, { method, headers: h, body, signal, cache: "no-store" });
  } catch (err) {
    if (signal && signal.aborted) throw err;
    setOnline(false);
    throw new NetworkError();
  }
  setOnline(true);
  if (!resp.ok) throw await errorFrom(resp);
  if (raw) return resp;
  if (resp.status === 204) return null;
  const ct = resp.headers.get("content-type") || "";
  return ct.includes("json") ? resp.json() : resp.text();
}

export const enc = encodeURIComponent;

/** A blob URL of an authorized GET (previews, downloads: an <img>/<iframe> cannot send the header). */
export async function blobOf(path) {
  const resp = await api(path, { raw: true });
  const blob = await resp.blob();
  return { blob, type: resp.headers.get("content-type") || blob.type };
}
