/* The task list (polled, re-rendered only on change), creating a task, selecting one, and the
 * soft warning when another task in the same folder is running (or cancelling: its tools may still write). The list can be searched (the
 * server's `q`: name, description and message text; a task found by a message shows that message's
 * excerpt under its name) and switched to the deleted tasks, each with Restore; each
 * live task has a menu (taskmenu.js: rename, model, export, delete). */

import { api, enc } from "./api.js";
import { $, el, itemsOf } from "./dom.js";
import { t, statusLabel } from "./i18n.js";
import { ACTIVE_RUN, emit, on, state } from "./state.js";
import { setRoute } from "./route.js";
import { openTaskMenu, restoreTask } from "./taskmenu.js";

const TASK_POLL_MS = 15000;
const SEARCH_DELAY_MS = 250;
let signature = "";
let poll = null;
let jumpTo = null; // {taskId, idx}: the message a search result was opened at, shown once its history is in
const view = { deleted: false, q: "" }; // the list shown: the trash or the live tasks, filtered by q

function sig() {
  return JSON.stringify([state.current && state.current.task_id, view,
    state.tasks.map((x) => [x.task_id, x.name, x.working_dir, x.run_status, x.model_profile,
      x.match && x.match.snippet])]);
}

export async function loadTasks() {
  const params = new URLSearchParams({ page_size: "100" });
  if (view.q) params.set("q", view.q);
  if (view.deleted) params.set("deleted", "true");
  const asked = JSON.stringify(view);
  try {
    const tasks = itemsOf(await api("/v1/tasks?" + params));
    if (asked !== JSON.stringify(view)) return; // the search changed meanwhile: its own load follows
    state.tasks = tasks;
    $("tasks-error").textContent = "";
  } catch (err) {
    $("tasks-error").textContent = t("tasks.load_failed", { msg: err.message });
    return;
  }
  if (sig() !== signature) renderTasks(); // a poll must not move keyboard focus for nothing
}

export function renderTasks() {
  signature = sig();
  const list = $("task-list");
  list.replaceChildren();
  if (!state.tasks.length) {
    const key = view.q ? "tasks.no_match" : view.deleted ? "tasks.trash_empty" : "tasks.empty";
    list.append(el("li", { class: "muted empty", "data-testid": "tasks-empty" }, t(key, { q: view.q })));
    return;
  }
  if (view.deleted) {
    for (const task of state.tasks) {
      list.append(el("li", { class: "task-row", "data-testid": "deleted-task", "data-task-id": task.task_id },
        el("span", { class: "task-item deleted" }, el("span", { class: "task-name" }, task.name),
          el("span", { class: "task-meta muted" }, task.working_dir)),
        el("button", { type: "button", class: "task-restore", "data-testid": "task-restore",
          "aria-label": t("tasks.restore_named", { name: task.name }),
          onclick: () => restoreTask(task, { reopen: false }) }, t("tasks.restore"))));
    }
    return;
  }
  for (const task of state.tasks) {
    const selected = state.current && state.current.task_id === task.task_id;
    const busy = ACTIVE_RUN.has(task.run_status);
    list.append(el("li", { class: "task-row" },
      el("button", {
        type: "button", class: "task-item" + (selected ? " selected" : ""), "aria-current": selected ? "true" : null,
        "data-testid": "task-item", "data-task-id": task.task_id,
        onclick: () => selectTask(task.task_id, { jump: view.q && task.match ? task.match.idx : null }),
      },
      el("span", { class: "task-name" }, task.name),
      el("span", { class: "task-meta muted" }, task.working_dir + (busy ? " · " + statusLabel(task.run_status) : "")),
      matchLine(task)),
      el("button", { type: "button", class: "task-menu-button", "data-testid": "task-menu",
        "aria-label": t("tasks.menu_named", { name: task.name }), "aria-haspopup": "dialog",
        onclick: (e) => openTaskMenu(task, e.currentTarget) }, "⋯")));
  }
}

/** Under a task found by a message (a search): who said it and the excerpt around the words. */
function matchLine(task) {
  if (!view.q || !task.match) return null;
  const key = task.match.role === "user" ? "tasks.match_user" : "tasks.match_assistant";
  return el("span", { class: "task-match muted", "data-testid": "task-match" }, t(key, { text: task.match.snippet }));
}

/** Show the live tasks or the deleted ones (the "已删除" switch). */
export function showDeleted(on) {
  view.deleted = on;
  const toggle = $("deleted-toggle");
  toggle.setAttribute("aria-pressed", String(on));
  toggle.textContent = on ? t("tasks.back_to_list") : t("tasks.show_deleted");
  $("create-task-form").hidden = on;
  loadTasks();
}

export function updateTask(task) {
  const i = state.tasks.findIndex((x) => x.task_id === task.task_id);
  if (i >= 0) state.tasks[i] = task;
  if (state.current && state.current.task_id === task.task_id) state.current = task;
  renderTasks();
}

export async function refreshCurrentTask() {
  if (!state.current) return null;
  try {
    const task = await api("/v1/tasks/" + enc(state.current.task_id));
    updateTask(task);
    return task;
  } catch (_) {
    return state.current; // keep what we have
  }
}

/** Open a task; `route`: how the address follows ("push", "replace", or "none" when it already
 * names the task: a reload, back/forward); `jump`: a message's idx to show (a search's match).
 * Answers false when the task could not be opened. */
export async function selectTask(taskId, { route = "push", jump = null } = {}) {
  const seq = ++state.selectSeq;
  jumpTo = jump === null ? null : { taskId, idx: jump };
  let task;
  try {
    task = await api("/v1/tasks/" + enc(taskId));
  } catch (err) {
    if (seq === state.selectSeq) $("tasks-error").textContent = t("tasks.open_failed", { msg: err.message });
    if (seq === state.selectSeq) emit("task-open-failed", { taskId, err });
    return false;
  }
  if (seq !== state.selectSeq) return false;
  $("tasks-error").textContent = "";
  setRoute(task.task_id, route);
  state.current = task;
  updateTask(task);
  emit("task-selected", { task, seq });
  checkFolder();
  return true;
}

export async function checkFolder() {
  const task = state.current;
  const box = $("folder-notice");
  if (!task) { box.hidden = true; return; }
  try {
    const page = await api("/v1/tasks?page_size=20&run_status=running,cancelling&working_dir=" + enc(task.working_dir));
    if (!state.current || state.current.task_id !== task.task_id) return;
    const others = itemsOf(page).filter((x) => x.task_id !== task.task_id);
    box.textContent = others.length
      ? t("tasks.folder_busy", { folder: task.working_dir, names: others.map((x) => x.name).join("、") }) : "";
    box.hidden = !others.length;
  } catch (_) {
    box.hidden = true;
  }
}

export function stopTaskPoll() {
  clearInterval(poll);
  poll = null;
}

export function setupTasks() {
  let timer = null;
  $("task-search").addEventListener("input", (e) => {
    clearTimeout(timer);
    timer = setTimeout(() => { view.q = e.target.value.trim(); loadTasks(); }, SEARCH_DELAY_MS);
  });
  $("deleted-toggle").addEventListener("click", () => showDeleted(!view.deleted));
  on("tasks-changed", () => loadTasks());
  $("create-task-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = e.target;
    const body = { name: f.name.value.trim() };
    if (f.working_dir.value.trim()) body.working_dir = f.working_dir.value.trim();
    const button = f.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const task = await api("/v1/tasks", { method: "POST", json: body });
      $("tasks-error").textContent = "";
      f.reset();
      state.tasks.unshift(task);
      await Promise.all([selectTask(task.task_id), loadTasks()]);
    } catch (err) {
      $("tasks-error").textContent = t("tasks.create_failed", { msg: err.message });
    } finally {
      button.disabled = false;
    }
  });
  on("run-ended", () => { checkFolder(); });
  on("history-loaded", showJump);
}

/** The history is in: a task opened from a search shows the matching message (a replaced one unfolded). */
function showJump() {
  const jump = jumpTo;
  jumpTo = null;
  if (!jump || !state.current || state.current.task_id !== jump.taskId) return;
  const node = $("messages").querySelector(`[data-msg-idx="${jump.idx}"]`);
  if (!node) return; // not among the messages loaded
  const group = node.closest("details");
  if (group) group.open = true;
  node.dataset.found = "true";
  node.scrollIntoView({ block: "center" });
}

export function startTaskPoll() {
  if (poll === null) {
    // Run states of other tasks change too (other tabs, channels, schedules start runs).
    poll = setInterval(() => { if (state.me && !document.hidden) loadTasks(); }, TASK_POLL_MS);
  }
}
