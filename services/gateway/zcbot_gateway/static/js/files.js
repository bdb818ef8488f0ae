/* The files pane: the open task's folder (crumbs up to the user's root), upload (only with a
 * task open), download through the auth header, and Preview for the types the server previews. */

import { api, blobOf, enc } from "./api.js";
import { $, el, formatBytes, formatTime, itemsOf, saveBlob } from "./dom.js";
import { t } from "./i18n.js";
import { on, state } from "./state.js";
import { canPreview, openPreview } from "./preview.js";
import { openVersions } from "./versions.js";

function joinPath(dir, name) { return dir ? dir.replace(/\/+$/, "") + "/" + name : name; }
const isDir = (entry) => entry.type === "dir" || entry.type === "directory";

function renderCrumbs(path) {
  const nav = $("file-crumbs");
  nav.replaceChildren();
  const parts = (path || "").split("/").filter(Boolean);
  const crumb = (label, target, current) => current
    ? el("span", { class: "crumb", "aria-current": "page" }, label)
    : el("button", { type: "button", class: "crumb link-button", onclick: () => loadFiles(target) }, label);
  nav.append(crumb("~", "", parts.length === 0));
  parts.forEach((part, i) => {
    nav.append(el("span", { class: "sep", "aria-hidden": "true" }, "/"));
    nav.append(crumb(part, parts.slice(0, i + 1).join("/"), i === parts.length - 1));
  });
}

async function download(path, name) {
  const { blob } = await blobOf("/v1/files/download?path=" + enc(path));
  saveBlob(blob, name);
}

function fileRow(entry, path, status) {
  const dir = isDir(entry);
  const meta = dir ? t("files.folder") : formatBytes(entry.size) + (entry.mtime ? " · " + formatTime(entry.mtime) : "");
  const actions = dir ? [] : [
    canPreview(entry.name) ? el("button", { type: "button", class: "small", "data-testid": "file-preview",
      "aria-label": t("files.preview_named", { name: entry.name }), onclick: () => openPreview(path, entry.name) },
    t("files.preview")) : null,
    el("button", { type: "button", class: "small", "data-testid": "file-download",
      "aria-label": t("files.download_named", { name: entry.name }), onclick: async (e) => {
        e.target.disabled = true;
        try {
          await download(path, entry.name);
          status.textContent = "";
        } catch (err) {
          status.textContent = t("files.download_failed", { msg: err.message });
        } finally {
          e.target.disabled = false;
        }
      } }, t("files.download")),
    el("button", { type: "button", class: "small", "data-testid": "file-history",
      "aria-label": t("files.history_named", { name: entry.name }),
      onclick: (e) => openVersions(path, entry.name, e.currentTarget) }, t("files.history")),
  ];
  return el("li", { class: "file-entry", "data-testid": "file-entry", "data-name": entry.name, "data-path": path,
    "data-type": dir ? "dir" : "file" },
    dir ? el("button", { type: "button", class: "link-button file-name", "data-testid": "open-folder",
      onclick: () => loadFiles(path) }, entry.name + "/")
      : el("span", { class: "file-name" }, entry.name),
    el("span", { class: "muted file-meta" }, meta),
    el("span", { class: "file-actions" }, actions));
}

export async function loadFiles(path) {
  state.filesPath = path || "";
  const list = $("file-list");
  const status = $("files-status");
  renderCrumbs(state.filesPath);
  let out;
  try {
    out = await api("/v1/files?path=" + enc(state.filesPath));
  } catch (err) {
    list.replaceChildren();
    status.textContent = t("files.load_failed", { msg: err.message });
    return;
  }
  if (typeof out.current === "string") {
    state.filesPath = out.current.replace(/^\/+/, "");
    renderCrumbs(state.filesPath);
  }
  const entries = itemsOf(out, "entries");
  list.replaceChildren();
  status.textContent = out.exists === false ? t("files.missing_folder") : entries.length ? "" : t("files.empty");
  for (const entry of [...entries.filter(isDir), ...entries.filter((e) => !isDir(e))]) {
    list.append(fileRow(entry, entry.path || joinPath(state.filesPath, entry.name), status));
  }
}

/** The page's own "no file chosen / a.txt" next to the styled picker (the native one is hidden). */
function showChosen() {
  const files = Array.from($("file-input").files || [], (f) => f.name);
  $("file-chosen").textContent = !files.length ? t("files.none_chosen")
    : files.length === 1 ? files[0] : t("files.chosen", { n: files.length, names: files.join(", ") });
}

function setUploadEnabled() {
  const on_ = Boolean(state.current);
  $("file-input").disabled = !on_;
  $("upload-button").disabled = !on_;
  $("upload-hint").hidden = on_;
}

export function setupFiles() {
  setUploadEnabled();
  on("task-selected", ({ task }) => { setUploadEnabled(); loadFiles(task.working_dir); });
  on("task-cleared", setUploadEnabled);
  on("run-ended", () => { if (state.current) loadFiles(state.filesPath); });
  on("files-changed", () => loadFiles(state.filesPath)); // a restore or an undone run (versions.js, run_undo.js)
  $("file-input").addEventListener("change", showChosen);
  $("upload-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const input = $("file-input");
    const status = $("files-status");
    if (!state.current) return;
    if (!input.files || !input.files.length) {
      status.textContent = t("files.choose_first");
      return;
    }
    const button = $("upload-button");
    button.disabled = true;
    try {
      // One request: the server writes all the files or none of them.
      const form = new FormData();
      form.append("path", state.filesPath);
      for (const file of input.files) form.append("file", file, file.name);
      status.textContent = t("files.uploading", { names: Array.from(input.files, (f) => f.name).join(", ") });
      await api("/v1/files/upload?path=" + enc(state.filesPath), { method: "POST", body: form });
      input.value = "";
      showChosen();
      await loadFiles(state.filesPath);
      status.textContent = t("files.uploaded");
    } catch (err) {
      status.textContent = t("files.upload_failed", { msg: err.message });
    } finally {
      button.disabled = false;
    }
  });
}
