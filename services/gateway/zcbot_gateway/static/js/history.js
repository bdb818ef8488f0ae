/* A task's stored conversation, as the person saw it live: user bubbles, assistant markdown,
 * reasoning, tool cards with their results, guard stops, the stored "cancelled" notice, and the
 * "undo this run's file changes" offer under each ended run that changed files (issue 29), or
 * "undone" under one whose changes were undone already. Messages replaced by an edit or a regenerate
 * (kind "superseded:…") are shown folded in their place, marked as no longer seen by the model. */

import { api, enc } from "./api.js";
import { el, itemsOf, notice } from "./dom.js";
import { t } from "./i18n.js";
import { ACTIVE_RUN, emit, state } from "./state.js";
import {
  assistantBubble, continueHint, countSuperseded, messageText, messagesBox, reasoningBlock, supersededGroup, userBubble,
} from "./bubbles.js";
import { setToolResult, settlePendingCards, toolCard } from "./toolcard.js";
import { undoneNote, undoOffer } from "./run_undo.js";
import { failureNotice } from "./causes.js";

const SUPERSEDED = "superseded:"; // agent/context.py: replaced by an edit or a regenerate
const FAILED_RESULT = /^\s*\[?(error|not run|cancelled)\b/i;
const CANCEL_TAIL = /\s*(（已取消）|（已中止）|\(cancelled\)|\(stopped\))\s*$/;

function cancelledNotice(text) {
  return notice("warn", text || t("run.cancelled"), "run-cancelled");
}

/** A message's bubble carries its stored idx (a search result opens the task at it: tasks.js). */
function tagged(node, m) {
  node.dataset.msgIdx = String(m.idx);
  return node;
}

export async function loadHistory(task, seq, send) {
  const box = messagesBox();
  box.replaceChildren(el("p", { class: "muted empty" }, t("chat.loading")));
  let msgs = [];
  let changed = {};
  let undone = new Set();
  try {
    const out = await api("/v1/tasks/" + enc(task.task_id) + "/messages?page_size=1000");
    msgs = itemsOf(out, "messages");
    changed = (out && out.files_changed) || {};
    undone = new Set((out && out.files_undone) || []);
  } catch (err) {
    if (seq === state.selectSeq) box.replaceChildren(notice("error", t("chat.history_failed", { msg: err.message }), "history-error"));
    return;
  }
  if (seq !== state.selectSeq) return;
  box.replaceChildren();
  const cards = new Map();
  // The active run's own steps are replayed from its event stream (run.js), not shown twice.
  const live = ACTIVE_RUN.has(task.run_status) ? task.run_id : null;
  // The last node of each run's last assistant message: its undo offer goes right under it.
  const runEnd = new Map();
  let answered = null;
  let out = box; // where this message goes: the conversation, or the group of replaced messages
  let group = null;
  const markEnd = () => { if (answered && out.lastChild) runEnd.set(answered, out.lastChild); };
  for (const m of msgs) {
    markEnd();
    const p = m.payload || {};
    const replaced = String(m.kind || "").startsWith(SUPERSEDED);
    const kind = replaced ? m.kind.slice(SUPERSEDED.length) : m.kind;
    if (replaced && !group) box.append(group = supersededGroup());
    if (!replaced && group) { countSuperseded(group); group = null; }
    out = replaced ? group.body : box;
    answered = m.run_id && (p.role === "assistant" || kind === "cancelled") ? m.run_id : null;
    if (live && m.run_id === live && p.role !== "user") continue;
    if (kind === "cancelled") {
      // The stored partial answer; its content ends with the notice line ("（已取消）"), shown as a notice.
      const text = messageText(p.content);
      const cut = CANCEL_TAIL.exec(text);
      const answer = cut ? text.slice(0, cut.index) : text;
      if (answer.trim()) out.append(tagged(assistantBubble(answer, m.created_at), m));
      out.append(cancelledNotice(cut ? cut[1] : ""));
    } else if (p.role === "user") {
      out.append(tagged(userBubble(messageText(p.content), m.created_at, replaced ? null : m.idx), m));
    } else if (p.role === "assistant") {
      if (kind === "guard") {
        out.append(notice("warn", messageText(p.content), "run-warn"));
        if (!replaced) out.append(continueHint(send));
        continue;
      }
      if (p.reasoning_content) out.append(reasoningBlock(p.reasoning_content));
      const text = messageText(p.content);
      if (text) out.append(tagged(assistantBubble(text, m.created_at), m));
      for (const tc of p.tool_calls || []) {
        const fn = tc.function || {};
        const card = toolCard(tc.id, fn.name || "tool", fn.arguments || "{}");
        cards.set(tc.id, card);
        out.append(card);
      }
    } else if (p.role === "tool") {
      const card = cards.get(p.tool_call_id);
      const content = messageText(p.content);
      if (card) setToolResult(card, content, !FAILED_RESULT.test(content), false);
    }
  }
  markEnd();
  if (group) countSuperseded(group);
  if (!live) settlePendingCards(box, t("tool.no_result"));
  for (const [runId, node] of runEnd) {
    const n = Number(changed[runId]) || 0;
    // A run already undone (the server's `files_undone`) says so instead of offering the undo again.
    if (n > 0 && runId !== live) node.after(undone.has(runId) ? undoneNote(runId) : undoOffer(task.task_id, runId, n));
  }
  if (task.run_status === "error" && task.run_error) {
    box.append(failureNotice("", task.run_error, send));
  }
  if (!msgs.length) box.append(el("p", { class: "muted empty", "data-testid": "chat-empty" }, t("chat.empty")));
  box.scrollTop = box.scrollHeight;
  emit("history-loaded");
}
