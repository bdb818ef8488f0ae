/* Following a run live: its event stream rendered as it arrives (markdown re-rendered per frame),
 * the status badge, Cancel, and what the end of a run refreshes. */

import { api, enc } from "./api.js";
import { $, el, notice } from "./dom.js";
import { t, statusLabel } from "./i18n.js";
import { sse } from "./sse.js";
import { emit, state } from "./state.js";
import { assistantBubble, clearEmpty, continueHint, messagesBox, reasoningBlock, scrollDown } from "./bubbles.js";
import { setToolResult, settlePendingCards, toolCard } from "./toolcard.js";
import { undoOffer } from "./run_undo.js";
import { failureNotice } from "./causes.js";

export function setRunStatus(text, kind = "") {
  const badge = $("run-status");
  badge.textContent = text || "";
  badge.className = "badge" + (kind ? " " + kind : "");
}

function showCancel(on) {
  // visibility, not display: the chat header keeps its height whether Cancel is there or not.
  const button = $("cancel-run");
  button.classList.toggle("invisible", !on);
  button.disabled = !on;
  button.setAttribute("aria-hidden", String(!on));
  button.tabIndex = on ? 0 : -1;
}

export function stopRun() {
  if (state.run) {
    state.run.abort.abort();
    state.run = null;
  }
  showCancel(false);
  emit("run-changed");
}

class RunView {
  constructor(runId, send) {
    this.root = el("div", { class: "run", "data-testid": "live-run", "data-run-id": runId || "" });
    clearEmpty();
    messagesBox().append(this.root);
    this.text = null; // current assistant bubble
    this.reasoning = null; // current reasoning body
    this.cards = new Map();
    this.send = send;
  }

  append(node) { this.root.append(node); scrollDown(); return node; }

  onText(delta) {
    if (!this.text) this.text = this.append(assistantBubble());
    this.text.stream.append(delta);
    this.reasoning = null;
    scrollDown();
  }

  onReasoning(delta) {
    if (!this.reasoning) this.reasoning = this.append(reasoningBlock()).querySelector(".reasoning-body");
    this.reasoning.textContent += delta;
    scrollDown();
  }

  onToolCall(d) {
    this.endText();
    this.cards.set(d.call_id, this.append(toolCard(d.call_id, d.name, d.args || d.args_preview)));
  }

  onToolResult(d) {
    let card = this.cards.get(d.call_id);
    if (!card) card = this.append(toolCard(d.call_id, d.name, ""));
    setToolResult(card, d.preview, d.ok, d.truncated);
    scrollDown();
    emit("tool-result", d);
  }

  endText() {
    if (this.text) this.text.stream.flush();
    this.text = null;
    this.reasoning = null;
  }
}

function eventNotice(view, evt) {
  const d = evt.data || {};
  switch (evt.event) {
    case "model_switch":
      return notice("info", t("run.model_switch", { from: d.from_profile, to: d.to_profile })
        + (d.reason ? " (" + d.reason + ")" : ""), "model-switch");
    case "context_fold":
      return notice("info", t("run.context_fold", { phase: d.phase }) + (d.detail ? " — " + d.detail : ""), "context-fold");
    case "warn":
      return notice("warn", d.msg || t("run.warning"), "run-warn");
    case "cancelled":
      return notice("warn", t("run.cancelled") + (d.reason && d.reason !== "user" ? " (" + d.reason + ")" : ""), "run-cancelled");
    case "error": // the cause in words; Retry is added when the run is over (see follow)
      return failureNotice(d.code || "", d.msg || "", null);
    default:
      return null;
  }
}

/** Follow `url`'s events; `opened`: the POST's own event stream, read first. */
export async function follow(url, runId, initialStatus, send, opened = null, abort = new AbortController()) {
  stopRun();
  const task = state.current;
  if (!task) { abort.abort(); return; }
  const view = new RunView(runId, send);
  const run = { runId, abort, view, taskId: task.task_id };
  state.run = run;
  showCancel(true);
  setRunStatus(statusLabel(initialStatus || "running"), "running");
  emit("run-changed");
  let final = null;
  try {
    for await (const evt of sse(url, { signal: abort.signal, opened })) {
      if (state.run !== run) return;
      const d = evt.data || {};
      switch (evt.event) {
        case "run_start":
          run.runId = d.run_id || run.runId;
          view.root.dataset.runId = run.runId || "";
          setRunStatus(statusLabel("running"), "running");
          break;
        case "queued": // over the per-user cap: waiting for one of the user's runs to end
          setRunStatus(t("run.waiting_position", { n: d.position || 1 }), "warn");
          break;
        case "llm_start": view.endText(); break;
        case "text": view.onText(d.delta || ""); break;
        case "reasoning": view.onReasoning(d.delta || ""); break;
        case "tool_call": view.onToolCall(d); break;
        case "tool_result": view.onToolResult(d); break;
        case "done": final = d; break;
        default: {
          const n = eventNotice(view, evt);
          if (!n) break; // usage, timings, …: nothing to show
          view.endText();
          view.append(n);
          if (evt.event === "warn" && /continue|继续/i.test(d.msg || "")) view.append(continueHint(send));
        }
      }
    }
  } catch (err) {
    if (state.run === run) view.append(notice("error", t("run.stream_failed", { msg: err.message }), "run-error"));
  }
  if (state.run !== run) return;
  view.endText();
  state.run = null;
  showCancel(false);
  const status = final ? final.status : "disconnected";
  settlePendingCards(view.root, status === "cancelled" ? t("tool.cancelled") : t("tool.not_run"));
  view.root.dataset.status = status;
  if (status === "stopped" && !view.root.querySelector("[data-testid=continue-hint]")) view.append(continueHint(send));
  if (status === "error") {
    const shown = view.root.querySelector(".run-failure");
    if (shown) shown.remove(); // shown again below with Retry, now that the run is over
    const code = shown ? shown.dataset.code || "" : "";
    view.append(failureNotice(code, shown ? shown.rawMessage : "", send));
  }
  if (final && final.files_changed > 0 && run.runId) view.append(undoOffer(task.task_id, run.runId, final.files_changed));
  const total = final && final.timings && final.timings.total;
  setRunStatus(status === "idle" ? "" : statusLabel(status) + (total ? " · " + Number(total).toFixed(1) + " s" : ""),
    status === "ok" ? "ok" : status === "error" ? "error" : status === "cancelled" ? "warn" : "");
  emit("run-changed");
  emit("run-ended", { taskId: task.task_id, status });
}

export function setupCancel() {
  showCancel(false);
  $("cancel-run").addEventListener("click", async () => {
    const task = state.current;
    if (!task) return;
    $("cancel-run").disabled = true;
    setRunStatus(statusLabel("cancelling"), "warn");
    try {
      await api("/v1/tasks/" + enc(task.task_id) + "/cancel", { method: "POST" });
    } catch (err) {
      $("cancel-run").disabled = false;
      const n = notice("error", t("run.cancel_failed", { msg: err.message }), "cancel-error");
      if (state.run) state.run.view.append(n); else messagesBox().append(n);
    }
  });
}
