/* A file's history (issue 29) in a dialog: the versions the server kept of it (what a change,
 * an overwrite or a delete replaced), newest first, each with Restore. Restoring refreshes the
 * list and the files pane; what the file held just before becomes a version itself (server side),
 * so a restore can be undone the same way. A modal <dialog>: focus moves in, Escape closes it,
 * and focus goes back to the History button that opened it. */

import { api, enc } from "./api.js";
import { $, el, formatBytes, formatTime, itemsOf, tid, totalOf } from "./dom.js";
import { openModal } from "./focustrap.js";
import { t } from "./i18n.js";
import { emit, state } from "./state.js";
import { toast } from "./toast.js";

const PAGE_SIZE = 100;
const KINDS = new Set(["modify", "delete", "rename", "restore"]);
let opened = null; // {path, name, opener}

function kindLabel(kind) {
  return KINDS.has(kind) ? t("history.kind." + kind) : t("history.kind.other", { kind });
}

function whoLabel(v) {
  if (!v.run_id) return t("history.by_you");
  const task = state.tasks.find((x) => x.task_id === v.task_id);
  return task ? t("history.by_run", { task: task.name }) : t("history.by_run_unknown");
}

function setStatus(text, kind = "") {
  const box = $("versions-status");
  box.textContent = text;
  box.className = kind ? "notice " + kind : "muted";
  box.setAttribute("role", kind === "error" ? "alert" : "status");
  box.hidden = !text;
}

function versionItem(v) {
  const when = formatTime(v.created_at);
  const button = el("button", { type: "button", class: "small", "data-testid": "version-restore",
    "aria-label": t("history.restore_named", { time: when }), disabled: !v.available,
    onclick: () => restore(v, button) }, v.available ? t("history.restore") : t("history.gone"));
  return el("li", { class: "version", "data-testid": "version-item", "data-version-id": v.id,
    "data-kind": v.replaced_by || "" },
    el("span", { class: "version-when" }, when),
    el("span", { class: "muted version-meta" },
      [v.size !== null && v.size !== undefined ? formatBytes(v.size) : null, kindLabel(v.replaced_by), whoLabel(v)]
        .filter(Boolean).join(" · ")),
    el("span", { class: "version-actions" }, button));
}

async function load() {
  const list = $("versions-list");
  const { path } = opened;
  let out;
  try {
    out = await api("/v1/files/versions?page_size=" + PAGE_SIZE + "&path=" + enc(path));
  } catch (err) {
    if (opened && opened.path === path) {
      list.replaceChildren();
      setStatus(t("history.load_failed", { msg: err.message }), "error");
    }
    return;
  }
  if (!opened || opened.path !== path) return;
  const items = itemsOf(out);
  const total = totalOf(out) ?? items.length;
  list.replaceChildren(...items.map(versionItem));
  setStatus(!items.length ? t("history.empty") : total > items.length
    ? t("history.more", { shown: items.length, total }) : "");
}

async function restore(v, button) {
  const { path, name } = opened;
  for (const b of $("versions-list").querySelectorAll("button")) b.disabled = true;
  button.textContent = t("history.restoring");
  try {
    await api("/v1/files/restore", { method: "POST", json: { path, version_id: v.id } });
  } catch (err) {
    await load(); // what is kept may have changed (retention); then the reason, which load() would clear
    if (opened && opened.path === path) setStatus(t("history.restore_failed", { msg: err.message }), "error");
    return;
  }
  toast(t("history.restored", { name }), "info", "restore-toast");
  emit("files-changed");
  await load();
  const again = $("versions-list").querySelector(tid("version-restore") + ":not([disabled])");
  if (again) again.focus(); // focus must not fall to <body> when the clicked button is replaced
}

export function openVersions(path, name, opener) {
  const dialog = $("versions-dialog");
  opened = { path, name, opener };
  $("versions-title").textContent = t("history.title", { name });
  $("versions-list").replaceChildren();
  setStatus(t("history.loading"));
  openModal(dialog, opener);
  load();
}

export function setupVersions() {
  const dialog = $("versions-dialog");
  $("versions-close").addEventListener("click", () => dialog.close());
  dialog.addEventListener("close", () => {
    const was = opened;
    opened = null;
    $("versions-list").replaceChildren();
    if (!was) return;
    // A restore re-rendered the files pane: the History button of the same file, if still listed.
    const back = was.opener && was.opener.isConnected ? was.opener
      : document.querySelector(`${tid("file-entry")}[data-path="${CSS.escape(was.path)}"] ${tid("file-history")}`);
    if (back) back.focus();
  });
}
