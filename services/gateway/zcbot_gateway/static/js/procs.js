/* Background jobs (seed §8.12): cards with a spinner, elapsed time and Stop for the open task's
 * running processes (GET /v1/procs, so they are back after a reload), a toast when a job ends in
 * any task (it says the task can go on, and opens it), and what the composer lock reads
 * (jobsOfTask). `/v1/procs` is polled every 5 s only while a job runs (the seed's rule); otherwise
 * it is read when something may have started one: sign-in, a tool result, a run's end, opening a
 * task, a reconnect. */

import { api, enc } from "./api.js";
import { $, el, formatDuration, itemsOf } from "./dom.js";
import { t } from "./i18n.js";
import { toast } from "./toast.js";
import { emit, on, state } from "./state.js";

const POLL_MS = 5000;
let poll = null; // the next poll's timer, set only while a job runs
let polling = false; // signed in: polls may be scheduled
let ticker = null;
let available = true;
let known = new Map(); // proc_id -> last seen state (to notice an end)
let seenAt = 0; // performance.now() of the last answer: elapsed ticks on from there

export function jobsOfTask(taskId) {
  return state.procs.filter((p) => p.task_id === taskId && p.state === "running");
}

function taskName(taskId) {
  const task = state.tasks.find((x) => x.task_id === taskId);
  return task ? task.name : taskId;
}

function shortCommand(cmd) {
  const s = String(cmd || "").replace(/\s+/g, " ").trim();
  return s.length > 60 ? s.slice(0, 59) + "…" : s;
}

export async function loadProcs() {
  if (!available || !state.me) return;
  let items;
  try {
    items = itemsOf(await api("/v1/procs?page_size=100"));
  } catch (err) {
    if (err.status === 404 && err.code !== "proc_not_found") available = false; // no procs API on this server
    return;
  }
  seenAt = performance.now();
  const first = known.size === 0 && !loadProcs.started;
  loadProcs.started = true;
  for (const p of items) {
    const before = known.get(p.proc_id);
    if (!first && before === "running" && p.state !== "running") {
      const here = state.current && state.current.task_id === p.task_id;
      toast(t("procs.ended_toast", { cmd: shortCommand(p.command), task: taskName(p.task_id),
        state: t("procs.state." + p.state) }), p.state === "exited" && !p.exit_code ? "ok" : "warn", "proc-toast",
      here ? null : { label: t("procs.open_task"), testid: "proc-toast-open", run: () => emit("task-reopen", p.task_id) });
    }
  }
  // A job gone from the list while running ended too (swept): no toast, it is simply gone.
  known = new Map(items.map((p) => [p.proc_id, p.state]));
  state.procs = items;
  render();
  emit("procs-changed");
  schedulePoll();
}

/** Poll again in POLL_MS while a job runs; nothing runs: no poll until something may start one. */
function schedulePoll() {
  clearTimeout(poll);
  poll = null;
  if (polling && state.procs.some((p) => p.state === "running")) {
    poll = setTimeout(() => { poll = null; if (document.hidden) schedulePoll(); else loadProcs(); }, POLL_MS);
  }
}

function elapsedOf(p) {
  const extra = p.state === "running" ? (performance.now() - seenAt) / 1000 : 0;
  return (Number(p.elapsed_seconds) || 0) + extra;
}

function render() {
  const box = $("job-cards");
  const task = state.current;
  const jobs = task ? jobsOfTask(task.task_id) : [];
  box.hidden = !jobs.length;
  box.replaceChildren(...jobs.map((p) => el("div", { class: "job-card", "data-testid": "job-card",
    "data-proc-id": p.proc_id, role: "group", "aria-label": t("procs.card_label") },
    el("span", { class: "spinner", "aria-hidden": "true" }),
    el("code", { class: "job-command", title: p.command }, shortCommand(p.command)),
    el("span", { class: "job-elapsed muted", "data-testid": "job-elapsed", "data-started": p.started_at || "" },
      formatDuration(elapsedOf(p))),
    el("button", { type: "button", class: "small danger", "data-testid": "job-stop",
      onclick: (e) => stopJob(p, e.target) }, t("procs.stop")))));
}

async function stopJob(p, button) {
  button.disabled = true;
  try {
    await api("/v1/procs/" + enc(p.proc_id) + "/kill", { method: "POST" });
  } catch (err) {
    button.disabled = false;
    toast(t("procs.stop_failed", { msg: err.message }), "error", "proc-toast");
    return;
  }
  await loadProcs();
}

function tick() {
  for (const node of document.querySelectorAll("[data-testid=job-elapsed]")) {
    const card = node.closest("[data-proc-id]");
    const p = state.procs.find((x) => x.proc_id === card.dataset.procId);
    if (p) node.textContent = formatDuration(elapsedOf(p));
  }
}

export function stopProcs() {
  polling = false;
  clearTimeout(poll);
  clearInterval(ticker);
  poll = ticker = null;
  known = new Map();
  loadProcs.started = false;
  state.procs = [];
}

export function setupProcs() {
  on("task-selected", () => { render(); loadProcs(); }); // a job started in another tab shows up here
  // A tool call may have just started a job: look at once instead of at the next poll.
  on("tool-result", () => loadProcs());
  on("run-ended", () => loadProcs());
}

export function startProcs() {
  available = true;
  polling = true;
  if (ticker === null) ticker = setInterval(tick, 1000);
  loadProcs();
}
