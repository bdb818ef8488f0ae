/* The dev page (`/`): wiring only. Each concept is its own module; they talk through state.js. */

import { api, auth, ApiError, enc, onUnauthorized } from "./api.js";
import { $ } from "./dom.js";
import { applyI18n, statusLabel, t } from "./i18n.js";
import { emit, on, state, ACTIVE_RUN } from "./state.js";
import { setupAccount } from "./account.js";
import { setupConnection } from "./connection.js";
import { setupComposer, sendMessage, updateComposer } from "./composer.js";
import { loadFiles, setupFiles } from "./files.js";
import { loadHistory } from "./history.js";
import { setupLayout } from "./layout.js";
import { setupLogin, showLogin } from "./login.js";
import { setupPreview } from "./preview.js";
import { setupVersions } from "./versions.js";
import { loadProcs, setupProcs, startProcs, stopProcs } from "./procs.js";
import { follow, setRunStatus, setupCancel, stopRun } from "./run.js";
import { setupSideTabs } from "./sidetabs.js";
import { loadTasks, refreshCurrentTask, selectTask, setupTasks, startTaskPoll, stopTaskPoll } from "./tasks.js";

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
  await loadTasks();
}

/** A task was opened: its header, history, and its live run if one is active. */
async function onTaskSelected({ task, seq }) {
  stopRun();
  $("chat-title").textContent = task.name;
  $("chat-folder").textContent = t("chat.folder", { folder: task.working_dir });
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
  setupLogin(enterApp, leave);
  setupAccount((message) => { leave(); showLogin(message); });
  setupLayout();
  setupTasks();
  setupProcs();
  setupSideTabs();
  setupComposer();
  setupCancel();
  setupFiles();
  setupPreview();
  setupVersions();
  setupConnection(onReconnected);
  on("task-selected", onTaskSelected);
  on("run-ended", onRunEnded);
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
