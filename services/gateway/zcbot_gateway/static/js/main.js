/* The dev page (`/`): wiring only. Each concept is its own module; they talk through state.js. */

import { api, auth, ApiError, enc, onUnauthorized } from "./api.js";
import { $, el, notice } from "./dom.js";
import { applyI18n, statusLabel, t } from "./i18n.js";
import { emit, on, state, ACTIVE_RUN } from "./state.js";
import { setupAccount } from "./account.js";
import { setupConnection } from "./connection.js";
import { setupComposer, sendMessage, updateComposer } from "./composer.js";
import { loadFiles, setupFiles } from "./files.js";
import { loadHistory } from "./history.js";
import { setupLayout } from "./layout.js";
import { setupLogin, showLogin } from "./login.js";
import { previewFromAddress, setupPreview } from "./preview.js";
import { setupVersions } from "./versions.js";
import { loadProcs, setupProcs, startProcs, stopProcs } from "./procs.js";
import { follow, setRunStatus, setupCancel, stopRun } from "./run.js";
import { setupSideTabs } from "./sidetabs.js";
import {
  loadTasks, refreshCurrentTask, renderTasks, selectTask, setupTasks, startTaskPoll, stopTaskPoll, updateTask,
} from "./tasks.js";
import { setRoute, taskIdFromPath } from "./route.js";
import { startClock } from "./when.js";
import { loadProfiles, modelLabel, setupTaskMenu } from "./taskmenu.js";
import { setupResend } from "./resend.js";
import { setupPrefs } from "./prefs.js";
import "./theme.js";
import { setupAttach } from "./attach.js";
import { wecomOutcomeFromAddress } from "./wecom.js";

// Named by run: a run that ends between reading the task and this request is still replayed from
// its first event (without the id the server, seeing no active run, answers "idle" at once, and a
// queued message that ran in 90 ms showed an empty answer).
function eventsUrl(task) {
  return "/v1/tasks/" + enc(task.task_id) + "/events" + (task.run_id ? "?run_id=" + enc(task.run_id) : "");
}

function leave() {
  stopRun();
  stopProcs();
  stopTaskPoll();
  state.me = null;
  state.current = null;
}

/** No task open (the address is `/`): the empty chat, as after sign-in. */
function clearTask() {
  state.selectSeq += 1;
  stopRun();
  state.current = null;
  $("chat-title").textContent = t("chat.no_task_title");
  $("chat-folder").textContent = "";
  $("task-menu-open").hidden = true;
  setRunStatus("");
  $("messages").replaceChildren(el("p", { class: "empty muted" }, t("chat.select_hint")));
  renderTasks();
  emit("task-cleared");
}

/** Open what the address names (after sign-in, on back/forward): the task, then the file's
 * preview (`?file=`); the address is left as it is. */
async function openFromAddress() {
  const taskId = taskIdFromPath();
  if (!taskId) { if (state.current) clearTask(); } else if (!state.current || state.current.task_id !== taskId) {
    await selectTask(taskId, { route: "none" });
  }
  previewFromAddress();
}

/** A task named by the address that cannot be opened (deleted, someone else's, a typo): say so in the chat. */
function onTaskOpenFailed({ err }) {
  if (state.current) return; // a click on another task failed: the open one stays
  $("chat-title").textContent = t("chat.no_task_title");
  $("messages").replaceChildren(notice("error", t("tasks.open_failed", { msg: err.message }), "task-open-error"),
    el("p", { class: "empty muted" }, t("chat.select_hint")));
}

async function enterApp() {
  const me = await api("/v1/me");
  state.me = me;
  document.body.dataset.view = "app";
  $("login-view").hidden = true;
  $("app-view").hidden = false;
  $("logout").hidden = false;
  $("account-button").hidden = !me.email; // a platform-key user has no password to change
  $("whoami").textContent = me.name || me.email || me.user_id;
  $("whoami").title = t("header.signed_in_as", { id: me.user_id });
  $("admin-link").hidden = me.role !== "admin";
  startTaskPoll();
  startProcs();
  loadProfiles().then(() => { if (state.current) showTaskHead(state.current); }).catch(() => {});
  await loadTasks();
  await openFromAddress();
  wecomOutcomeFromAddress();
}

/** The chat head of the open task: its name, folder and model, and its menu button. */
function showTaskHead(task) {
  $("chat-title").textContent = task.name;
  $("chat-folder").textContent = t("chat.folder", { folder: task.working_dir }) + " · "
    + t("chat.model", { model: modelLabel(task) });
  $("task-menu-open").hidden = false;
}

/** The task menu changed a task (rename, model): the list and, if it is open, the head follow. */
function onTaskUpdated(task) {
  updateTask(task);
  if (state.current && state.current.task_id === task.task_id) showTaskHead(task);
}

/** A task was deleted (task menu): it leaves the list; if it was open, the page shows no task. */
function onTaskDeleted(taskId) {
  if (state.current && state.current.task_id === taskId) {
    clearTask();
    setRoute(null, "push");
  }
  loadTasks();
}

/** A task was opened: its header, history, and its live run if one is active. */
async function onTaskSelected({ task, seq }) {
  stopRun();
  showTaskHead(task);
  setRunStatus(task.run_status === "idle" ? "" : statusLabel(task.run_status));
  updateComposer();
  await loadHistory(task, seq, sendMessage);
  if (seq !== state.selectSeq) return;
  if (ACTIVE_RUN.has(task.run_status)) follow(eventsUrl(task), task.run_id, task.run_status, sendMessage);
}

/** A run ended: a message queued behind it starts now; follow it. */
async function onRunEnded({ taskId }) {
  if (!state.current || state.current.task_id !== taskId) return;
  const task = await refreshCurrentTask();
  if (task && ACTIVE_RUN.has(task.run_status) && !state.run) {
    document.querySelectorAll("[data-testid=queued-note]").forEach((n) => n.remove());
    follow(eventsUrl(task), task.run_id, task.run_status, sendMessage);
  }
}

/** The connection came back: reload what the page shows (the run reader resumes by itself). */
function onReconnected() {
  if (!state.me) return;
  loadTasks();
  loadProcs();
  if (state.current && !state.run) selectTask(state.current.task_id);
  else if (state.current) loadFiles(state.filesPath);
}

function boot() {
  applyI18n(document);
  onUnauthorized(() => {
    auth.clear();
    leave();
    showLogin(t("login.expired"));
  });
  // Signing out forgets the address's task (the next person here starts from none); an expired
  // sign-in keeps it, so a shared link opens its task once signed in.
  setupLogin(enterApp, () => { leave(); setRoute(null, "replace"); });
  setupAccount((message) => { leave(); showLogin(message); });
  setupLayout();
  setupPrefs();
  setupTasks();
  setupTaskMenu();
  setupProcs();
  setupSideTabs();
  setupComposer();
  setupResend();
  setupAttach();
  setupCancel();
  setupFiles();
  setupPreview();
  setupVersions();
  setupConnection(onReconnected);
  startClock();
  on("task-selected", onTaskSelected);
  on("run-ended", onRunEnded);
  on("task-open-failed", onTaskOpenFailed);
  on("task-updated", onTaskUpdated);
  on("task-deleted", onTaskDeleted);
  on("task-reopen", (taskId) => selectTask(taskId));
  on("tasks-moved", async () => { // a folder rename in the files pane moved tasks' folders
    loadTasks();
    const task = await refreshCurrentTask();
    if (task) showTaskHead(task);
  });
  window.addEventListener("popstate", () => { if (state.me) openFromAddress(); });
  if (auth.token) {
    enterApp().catch((err) => {
      if (!(err instanceof ApiError && err.status === 401)) showLogin(t("login.unreachable", { msg: err.message }));
    });
  } else {
    showLogin("");
  }
  emit("booted");
}

boot();
