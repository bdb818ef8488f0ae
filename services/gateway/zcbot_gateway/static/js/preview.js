/* Previews in a dialog titled with the file's name: images as <img>, PDF and office documents
 * (converted to PDF on the host by the preview route) in an <iframe>, both from a blob URL because
 * they need the auth header. When the server cannot convert (no LibreOffice) the dialog says so and
 * offers the download. Text files are read through the download route and shown here (issue 37):
 * Markdown rendered (sanitized, markdown.js), CSV as a table, other text and code highlighted.
 * The open preview is in the address (`?file=`, route.js): a reload or back/forward keeps it. */

import { blobOf, enc } from "./api.js";
import { $, el, formatBytes } from "./dom.js";
import { openModal } from "./focustrap.js";
import { t } from "./i18n.js";
import { renderMarkdown } from "./markdown.js";
import { fileFromAddress, setFileRoute } from "./route.js";
import hljs from "../vendor/highlight.min.js";

const IMAGE = /\.(png|jpe?g|gif|webp)$/i;
const PDF_LIKE = /\.(pdf|pptx?|docx?|xlsx?|odp|odt|ods)$/i;
const MARKDOWN = /\.(md|markdown)$/i;
const CSV = /\.(csv|tsv)$/i;
const TEXT = /\.(md|markdown|csv|tsv|txt|log|json|jsonl|ya?ml|toml|ini|cfg|conf|xml|html?|css|js|mjs|ts|tsx|jsx|py|sh|bash|sql|c|h|cc|cpp|hpp|java|kt|go|rs|rb|php|r|lua|swift|tex|env)$/i;
const MAX_TEXT_BYTES = 2 * 1024 * 1024;
const MAX_ROWS = 1000;
let current = null; // the blob URL shown, revoked on close
let shownPath = null; // the file the dialog shows
let closingForAddress = false; // the address dropped the file (back): do not touch the history again

export function canPreview(name) { return IMAGE.test(name) || PDF_LIKE.test(name) || TEXT.test(name); }

/** RFC 4180 fields: quotes, doubled quotes, separators and line breaks inside quotes. */
function parseCsv(text, sep) {
  const rows = [];
  let row = [];
  let field = "";
  let quoted = false;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i += 1; } else if (c === '"') quoted = false; else field += c;
    } else if (c === '"' && field === "") quoted = true;
    else if (c === sep) { row.push(field); field = ""; }
    else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i += 1;
      row.push(field); rows.push(row); row = []; field = "";
      if (rows.length > MAX_ROWS) break;
    } else field += c;
  }
  if (field !== "" || row.length) { row.push(field); rows.push(row); }
  return rows;
}

function csvTable(text, name) {
  const rows = parseCsv(text.replace(/^\ufeff/, ""), /\.tsv$/i.test(name) ? "\t" : ",");
  const [headRow = [], ...body] = rows.slice(0, MAX_ROWS + 1);
  const table = el("table", { class: "data preview-table", "data-testid": "preview-table" },
    el("thead", {}, el("tr", {}, headRow.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, body.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))));
  const more = rows.length > MAX_ROWS ? el("p", { class: "muted" }, t("preview.rows_cut", { n: MAX_ROWS })) : null;
  return el("div", { class: "preview-text" }, el("div", { class: "md-table" }, table), more);
}

function codeView(text, name) {
  const code = el("code", { class: "hljs" });
  const ext = (/\.(\w+)$/.exec(name) || [])[1] || "";
  try {
    code.innerHTML = hljs.getLanguage(ext) ? hljs.highlight(text, { language: ext, ignoreIllegals: true }).value
      : hljs.highlightAuto(text).value;
  } catch (_) {
    code.textContent = text;
  }
  return el("div", { class: "preview-text md" }, el("pre", { "data-testid": "preview-code" }, code));
}

async function textPreview(path, name) {
  const { blob } = await blobOf("/v1/files/download?path=" + enc(path));
  if (blob.size > MAX_TEXT_BYTES) {
    return el("p", { class: "notice warn", role: "status", "data-testid": "preview-error" },
      t("preview.too_large", { size: formatBytes(blob.size), max: formatBytes(MAX_TEXT_BYTES) }));
  }
  const text = await blob.text();
  if (MARKDOWN.test(name)) {
    return el("div", { class: "preview-text md", "data-testid": "preview-markdown" }, renderMarkdown(text));
  }
  return CSV.test(name) ? csvTable(text, name) : codeView(text, name);
}

function close() {
  if (current) URL.revokeObjectURL(current);
  current = null;
  $("preview-body").replaceChildren();
}

/** Preview `path` (relative to the user's root); `route: false` when the address already names it. */
export async function openPreview(path, name = path.split("/").pop(), { route = true } = {}) {
  const dialog = $("preview-dialog");
  const body = $("preview-body");
  close();
  shownPath = path;
  dialog.dataset.path = path;
  if (route) setFileRoute(path);
  $("preview-title").textContent = name;
  body.replaceChildren(el("p", { class: "muted", "data-testid": "preview-loading" },
    IMAGE.test(name) ? t("preview.loading") : t("preview.converting")));
  openModal(dialog);
  if (TEXT.test(name)) {
    try {
      const view = await textPreview(path, name);
      if (dialog.open && shownPath === path) body.replaceChildren(view);
    } catch (err) {
      body.replaceChildren(el("p", { class: "notice warn", role: "status", "data-testid": "preview-error" },
        t("preview.failed", { msg: err.message })));
    }
    return;
  }
  let out;
  try {
    out = await blobOf("/v1/files/preview?path=" + enc(path));
  } catch (err) {
    const text = err.code === "preview_unavailable" ? t("preview.no_soffice")
      : err.code === "preview_unsupported" ? t("preview.unsupported")
        : t("preview.failed", { msg: err.message });
    body.replaceChildren(el("p", { class: "notice warn", role: "status", "data-testid": "preview-error",
      "data-code": err.code || "" }, text));
    return;
  }
  if (!dialog.open || shownPath !== path) return;
  current = URL.createObjectURL(out.blob);
  const media = out.type.startsWith("image/")
    ? el("img", { src: current, alt: name, class: "preview-image", "data-testid": "preview-image" })
    : el("iframe", { src: current, title: name, class: "preview-frame", "data-testid": "preview-frame",
      "data-type": out.type.split(";")[0] });
  body.replaceChildren(media);
}

/** Make the dialog follow the address (after sign-in, on back/forward): open or close the preview. */
export function previewFromAddress() {
  const file = fileFromAddress();
  const dialog = $("preview-dialog");
  if (file && (!dialog.open || shownPath !== file)) {
    openPreview(file, undefined, { route: false }); // an open dialog stays open with the other file
  } else if (!file && dialog.open) {
    closingForAddress = true;
    dialog.close();
  }
}

export function setupPreview() {
  const dialog = $("preview-dialog");
  $("preview-close").addEventListener("click", () => dialog.close());
  dialog.addEventListener("close", () => {
    close();
    shownPath = null;
    delete dialog.dataset.path;
    if (!closingForAddress) setFileRoute(null);
    closingForAddress = false;
  });
}
