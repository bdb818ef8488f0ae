/* The message box: Send (one request that answers with the run's event stream), "queue after
 * this one" while a run is active, and locked while a background job runs in this task or the
 * task is read-only here. */

import { api, enc } from "./api.js";
import { $, notice } from "./dom.js";
import { t } from "./i18n.js";
import { on, state } from "./state.js";
import { clearEmpty, messagesBox, scrollDown, setMessageIdx, userBubble } from "./bubbles.js";
import { follow } from "./run.js";
import { jobsOfTask } from "./procs.js";

function mode() {
  const task = state.current;
  if (!task) return "none";
  if (task.read_only) return "read-only";
  if (jobsOfTask(task.task_id).length) return "job";
  if (state.run && state.run.taskId === task.task_id) return "queue";
  return "send";
}

export function updateComposer() {
  const m = mode();
  const input = $("message-input");
  const button = $("send-button");
  const lock = $("composer-lock");
  input.disabled = m === "none" || m === "read-only" || m === "job";
  button.disabled = input.disabled;
  $("attach-input").disabled = input.disabled;
  $("attach-button").classList.toggle("disabled", input.disabled);
  button.textContent = m === "queue" ? t("chat.queue_after") : t("chat.send");
  button.dataset.mode = m;
  input.placeholder = m === "read-only" ? t("chat.read_only", { channel: state.current.channel })
    : m === "none" ? t("chat.no_task") : t("chat.placeholder");
  lock.hidden = m !== "job";
  lock.textContent = m === "job" ? t("chat.locked_by_job") : "";
}

// The Idempotency-Key of the message being sent: one per composed message, kept while its send
// fails, so sending the same text to the same task again (the composer keeps it after a failure,
// e.g. the 503 "saved, send again") retries that message instead of storing it twice.
let unsent = null; // {taskId, content, key}

function keyFor(taskId, content) {
  if (!unsent || unsent.taskId !== taskId || unsent.content !== content) {
    const bytes = crypto.getRandomValues(new Uint8Array(16)); // randomUUID needs a secure context
    unsent = { taskId, content, key: Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("") };
  }
  return unsent.key;
}

export async function sendMessage(content) {
  const task = state.current;
  if (!task || !content.trim()) return false;
  const key = keyFor(task.task_id, content);
  const queued = mode() === "queue";
  const box = messagesBox();
  clearEmpty();
  const bubble = userBubble(content);
  if (queued) {
    bubble.classList.add("queued");
    bubble.append(notice("hint", t("chat.queued_note"), "queued-note"));
  }
  box.append(bubble);
  scrollDown(true);
  try {
    if (queued) {
      // Behind the active run: it starts when that one ends (run-ended re-follows the task).
      const out = await api("/v1/tasks/" + enc(task.task_id) + "/messages", { method: "POST",
        json: { content, multitask: "enqueue" }, headers: { "Idempotency-Key": key } });
      unsent = null;
      setMessageIdx(bubble, out && out.message_idx);
      return true;
    }
    // One request: the POST answers with the run's event stream (its URL, for resuming, in
    // Content-Location), instead of a JSON body and then a GET of events_url.
    const abort = new AbortController();
    const resp = await api("/v1/tasks/" + enc(task.task_id) + "/messages", {
      method: "POST", json: { content }, headers: { Accept: "text/event-stream", "Idempotency-Key": key },
      signal: abort.signal, raw: true,
    });
    unsent = null;
    const runId = resp.headers.get("X-Run-Id");
    setMessageIdx(bubble, resp.headers.get("X-Message-Idx"));
    const status = resp.headers.get("X-Run-Status") === "queued" ? "queued" : "running";
    const url = resp.headers.get("Content-Location")
      || "/v1/tasks/" + enc(task.task_id) + "/events?run_id=" + enc(runId || "");
    follow(url, runId, status, sendMessage, resp, abort);
    return true;
  } catch (err) {
    bubble.classList.add("failed");
    box.append(notice("error", t("chat.not_sent", { msg: err.message }), "send-error"));
    return false;
  }
}

export function setupComposer() {
  const input = $("message-input");
  $("send-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const content = input.value;
    if (!content.trim()) return;
    $("send-button").disabled = true;
    const ok = await sendMessage(content);
    updateComposer();
    if (ok) input.value = "";
    input.focus();
  });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      $("send-form").requestSubmit();
    }
  });
  for (const name of ["run-changed", "procs-changed", "task-selected", "task-cleared"]) on(name, updateComposer);
  updateComposer();
}
