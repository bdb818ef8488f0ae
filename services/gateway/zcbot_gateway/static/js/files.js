/* The files pane: the open task's folder (crumbs up to the user's root), upload (only with a
 * task open), download through the auth header, Preview for the types the server previews,
 * rename and delete of files and folders (fileops.js), and the tree of all folders (foldertree.js). */

import { api, blobOf, enc } from "./api.js";
import { $, el, formatBytes, formatTime, itemsOf, saveBlob } from "./dom.js";
import { t } from "./i18n.js";
import { on, state } from "./state.js";
import { canPreview, openPreview } from "./preview.js";
import { openVersions } from "./versions.js";
import { deleteEntry, renameEntry } from "./fileops.js";
import { markCurrentFolder, reloadTree, setupFolderTree } from "./foldertree.js";

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

/** The pane's status line; an error is red. */
function say(text, kind = "") {
  const status = $("files-status");
  status.textContent = text;
  status.classList.toggle("error", kind === "error");
  status.classList.toggle("muted", kind !== "error");
}

/** Rename and Delete, for files and folders alike; a done change redraws the list and the tree. */
function changeButtons(entry, path, dir) {
  const after = (done) => { if (done) { loadFiles(state.filesPath, { keepStatus: true }); reloadTree(); } };
  return [
    el("button", { type: "button", class: "small", "data-testid": "file-rename",
      "aria-label": t("files.rename_named", { name: entry.name }),
      onclick: async () => after(await renameEntry(path, entry.name, dir, say)) }, t("files.rename")),
    el("button", { type: "button", class: "small", "data-testid": "file-delete",
      "aria-label": t("files.delete_named", { name: entry.name }),
      onclick: async () => after(await deleteEntry(path, entry.name, dir, say)) }, t("files.delete")),
  ];
}

function fileRow(entry, path) {
  const dir = isDir(entry);
  const meta = dir ? t("files.folder") : formatBytes(entry.size) + (entry.mtime ? " · " + formatTime(entry.mtime) : "");
  const actions = dir ? changeButtons(entry, path, true) : [
    canPreview(entry.name) ? el("button", { type: "button", class: "small", "data-testid": "file-preview",
      "aria-label": t("files.preview_named", { name: entry.name }), onclick: () => openPreview(path, entry.name) },
    t("files.preview")) : null,
    el("button", { type: "button", class: "small", "data-testid": "file-download",
      "aria-label": t("files.download_named", { name: entry.name }), onclick: async (e) => {
        e.target.disabled = true;
        try {
          await download(path, entry.name);
          say("");
        } catch (err) {
          say(t("files.download_failed", { msg: err.message }), "error");
        } finally {
          e.target.disabled = false;
        }
      } }, t("files.download")),
    el("button", { type: "button", class: "small", "data-testid": "file-history",
      "aria-label": t("files.history_named", { name: entry.name }),
      onclick: (e) => openVersions(path, entry.name, e.currentTarget) }, t("files.history")),
    ...changeButtons(entry, path, false),
  ];
  return el("li", { class: "file-entry", "data-testid": "file-entry", "data-name": entry.name, "data-path": path,
    "data-type": dir ? "dir" : "file" },
    dir ? el("button", { type: "button", class: "link-button file-name", "data-testid": "open-folder",
      onclick: () => loadFiles(path) }, entry.name + "/")
      : el("span", { class: "file-name" }, entry.name),
    el("span", { class: "muted file-meta" }, meta),
    el("span", { class: "file-actions" }, actions));
}

export async function loadFiles(path, { keepStatus = false } = {}) {
  state.filesPath = path || "";
  const list = $("file-list");
  renderCrumbs(state.filesPath);
  markCurrentFolder(state.filesPath);
  let out;
  try {
    out = await api("/v1/files?path=" + enc(state.filesPath));
  } catch (err) {
    list.replaceChildren();
    say(t("files.load_failed", { msg: err.message }), "error");
    return;
  }
  if (typeof out.current === "string") {
    state.filesPath = out.current.replace(/^\/+/, "");
    renderCrumbs(state.filesPath);
  }
  const entries = itemsOf(out, "entries");
  list.replaceChildren();
  markCurrentFolder(state.filesPath);
  if (!keepStatus || out.exists === false || !entries.length) {
    say(out.exists === false ? t("files.missing_folder") : entries.length ? "" : t("files.empty"));
  }
  for (const entry of [...entries.filter(isDir), ...entries.filter((e) => !isDir(e))]) {
    list.append(fileRow(entry, entry.path || joinPath(state.filesPath, entry.name)));
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
  setupFolderTree((path) => loadFiles(path));
  on("task-selected", ({ task }) => { setUploadEnabled(); loadFiles(task.working_dir); });
  on("task-cleared", setUploadEnabled);
  on("run-ended", () => { if (state.current) loadFiles(state.filesPath); });
  on("files-changed", () => loadFiles(state.filesPath)); // a restore or an undone run (versions.js, run_undo.js)
  $("file-input").addEventListener("change", showChosen);
  $("upload-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const input = $("file-input");
    if (!state.current) return;
    if (!input.files || !input.files.length) {
      say(t("files.choose_first"), "error");
      return;
    }
    const button = $("upload-button");
    button.disabled = true;
    try {
      // One request: the server writes all the files or none of them.
      const form = new FormData();
      form.append("path", state.filesPath);
      for (const file of input.files) form.append("file", file, file.name);
      say(t("files.uploading", { names: Array.from(input.files, (f) => f.name).join(", ") }));
      await api("/v1/files/upload?path=" + enc(state.filesPath), { method: "POST", body: form });
      input.value = "";
      showChosen();
      await loadFiles(state.filesPath);
      say(t("files.uploaded"));
    } catch (err) {
      say(t("files.upload_failed", { msg: err.message }), "error");
    } finally {
      button.disabled = false;
    }
  });
}
