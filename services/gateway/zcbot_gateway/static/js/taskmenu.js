/* A task's menu (issue 37), a dialog opened from the task list's "⋯" or the chat head: rename,
 * the task's model (PATCH model_profile; the profiles of GET /v1/models), export to Word (GET …/export
 * in the page's language and the browser's time zone), and delete. Delete is the server's soft
 * delete; a toast offers Undo (restore), and the "已删除" view of the list restores later too. */

import { api, blobOf, enc } from "./api.js";
import { $, el, saveBlob } from "./dom.js";
import { openModal } from "./focustrap.js";
import { lang, t } from "./i18n.js";
import { emit, state } from "./state.js";
import { toast } from "./toast.js";

let task = null; // the task the dialog is about
let profiles = null; // {items, default} of GET /v1/models, read once

function status(text, kind = "") {
  const line = $("task-dialog-status");
  line.textContent = text;
  line.className = kind === "error" ? "error" : "muted";
}

export async function loadProfiles() {
  if (!profiles) profiles = await api("/v1/models");
  return profiles;
}

/** The model a task runs on, for the chat head and the picker: its own profile or the default. */
export function modelLabel(x) {
  if (x.model_profile) return x.model_profile;
  return profiles ? t("taskmenu.model_default", { name: profiles.default }) : t("taskmenu.model_default_short");
}

async function fillModels() {
  const select = $("model-select");
  select.replaceChildren(el("option", { value: "" }, t("taskmenu.model_default_short")));
  try {
    const out = await loadProfiles();
    select.replaceChildren(el("option", { value: "" }, t("taskmenu.model_default", { name: out.default })),
      ...out.items.map((p) => el("option", { value: p.name }, p.name + (p.thinking ? " · " + t("taskmenu.thinking") : ""))));
  } catch (err) {
    status(t("taskmenu.models_failed", { msg: err.message }), "error");
  }
  // A profile no longer configured stays shown (as it is), so the picker does not lie about the task.
  if (task.model_profile && ![...select.options].some((o) => o.value === task.model_profile)) {
    select.append(el("option", { value: task.model_profile }, task.model_profile));
  }
  select.value = task.model_profile || "";
}

function changed(updated) {
  task = updated;
  $("task-dialog-title").textContent = updated.name;
  emit("task-updated", updated);
}

async function rename(e) {
  e.preventDefault();
  const name = e.target.name.value.trim();
  if (!name || name === task.name) return;
  try {
    changed(await api("/v1/tasks/" + enc(task.task_id), { method: "PATCH", json: { name } }));
    status(t("taskmenu.renamed"));
  } catch (err) {
    status(t("taskmenu.rename_failed", { msg: err.message }), "error");
  }
}

async function pickModel(e) {
  const value = e.target.value;
  try {
    changed(await api("/v1/tasks/" + enc(task.task_id), { method: "PATCH", json: { model_profile: value || null } }));
    status(t("taskmenu.model_set", { name: modelLabel(task) }));
  } catch (err) {
    e.target.value = task.model_profile || "";
    status(t("taskmenu.model_failed", { msg: err.message }), "error");
  }
}

async function exportWord() {
  const button = $("export-task");
  button.disabled = true;
  status(t("taskmenu.exporting"));
  try {
    const tz = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    const { blob } = await blobOf("/v1/tasks/" + enc(task.task_id) + "/export?lang=" + lang + (tz ? "&tz=" + enc(tz) : ""));
    saveBlob(blob, task.name + ".docx");
    status(t("taskmenu.exported", { name: task.name + ".docx" }));
  } catch (err) {
    status(t("taskmenu.export_failed", { msg: err.message }), "error");
  } finally {
    button.disabled = false;
  }
}

/** Restore a deleted task (the toast's Undo, the trash's Restore); `reopen`: open it again. */
export async function restoreTask(deleted, { reopen }) {
  try {
    await api("/v1/tasks/" + enc(deleted.task_id) + "/restore", { method: "POST" });
    toast(t("tasks.restored", { name: deleted.name }), "ok", "restore-toast");
    emit("tasks-changed");
    if (reopen) emit("task-reopen", deleted.task_id);
  } catch (err) {
    toast(t("tasks.restore_failed", { msg: err.message }), "error", "restore-toast");
  }
}

async function remove() {
  const gone = task;
  const wasOpen = Boolean(state.current && state.current.task_id === gone.task_id);
  try {
    await api("/v1/tasks/" + enc(gone.task_id), { method: "DELETE" });
  } catch (err) {
    status(t("taskmenu.delete_failed", { msg: err.message }), "error");
    return;
  }
  $("task-dialog").close();
  emit("task-deleted", gone.task_id);
  toast(t("tasks.deleted", { name: gone.name }), "info", "delete-toast",
    { label: t("tasks.undo"), testid: "undo-delete", run: () => restoreTask(gone, { reopen: wasOpen }) });
}

/** Open the menu of `x` (a task object); `opener` gets focus back when it closes. */
export function openTaskMenu(x, opener) {
  task = x;
  $("task-dialog-title").textContent = x.name;
  const form = $("rename-form");
  form.name.value = x.name;
  const readOnly = Boolean(x.read_only);
  for (const node of [form.name, $("rename-submit"), $("model-select"), $("delete-task")]) node.disabled = readOnly;
  status(readOnly ? t("chat.read_only", { channel: x.channel }) : "");
  openModal($("task-dialog"), opener);
  fillModels();
}

export function setupTaskMenu() {
  $("rename-form").addEventListener("submit", rename);
  $("model-select").addEventListener("change", pickModel);
  $("export-task").addEventListener("click", exportWord);
  $("delete-task").addEventListener("click", remove);
  $("task-dialog-close").addEventListener("click", () => $("task-dialog").close());
  $("task-menu-open").addEventListener("click", (e) => { if (state.current) openTaskMenu(state.current, e.currentTarget); });
}
