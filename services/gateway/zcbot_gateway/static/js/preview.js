/* Previews in a dialog: images as <img>, PDF and office documents (converted to PDF on the host
 * by the preview route) in an <iframe>, both from a blob URL because they need the auth header.
 * When the server cannot convert (no LibreOffice) the dialog says so and offers the download. */

import { blobOf, enc } from "./api.js";
import { $, el } from "./dom.js";
import { openModal } from "./focustrap.js";
import { t } from "./i18n.js";

const IMAGE = /\.(png|jpe?g|gif|webp)$/i;
const PDF_LIKE = /\.(pdf|pptx?|docx?|xlsx?|odp|odt|ods)$/i;
let current = null; // the blob URL shown, revoked on close

export function canPreview(name) { return IMAGE.test(name) || PDF_LIKE.test(name); }

function close() {
  if (current) URL.revokeObjectURL(current);
  current = null;
  $("preview-body").replaceChildren();
}

export async function openPreview(path, name) {
  const dialog = $("preview-dialog");
  const body = $("preview-body");
  close();
  $("preview-title").textContent = name;
  body.replaceChildren(el("p", { class: "muted", "data-testid": "preview-loading" },
    IMAGE.test(name) ? t("preview.loading") : t("preview.converting")));
  openModal(dialog);
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
  if (!dialog.open) return;
  current = URL.createObjectURL(out.blob);
  const media = out.type.startsWith("image/")
    ? el("img", { src: current, alt: name, class: "preview-image", "data-testid": "preview-image" })
    : el("iframe", { src: current, title: name, class: "preview-frame", "data-testid": "preview-frame",
      "data-type": out.type.split(";")[0] });
  body.replaceChildren(media);
}

export function setupPreview() {
  const dialog = $("preview-dialog");
  $("preview-close").addEventListener("click", () => dialog.close());
  dialog.addEventListener("close", close);
}
