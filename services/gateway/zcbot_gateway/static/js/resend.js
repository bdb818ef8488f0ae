/* Regenerate the last answer and edit-and-resend a user message (issue 37), both through
 * `POST /v1/tasks/{id}/messages/{idx}/resend`: the server keeps the replaced messages (the model no
 * longer sees them) and sends the text again as a new message. Here the replaced part of the
 * conversation folds away in its place, as it shows after a reload (history.js), and the new run is
 * followed like any other. */

import { api, enc } from "./api.js";
import { el, notice } from "./dom.js";
import { t } from "./i18n.js";
import { on, state } from "./state.js";
import { countSuperseded, messagesBox, scrollDown, supersededGroup, userBubble } from "./bubbles.js";
import { sendMessage } from "./composer.js";
import { follow } from "./run.js";

/** The conversation's current user bubbles (not the replaced ones), in order. */
function liveUserBubbles() {
  return [...messagesBox().querySelectorAll(":scope > .msg.user, :scope > .run > .msg.user")];
}

/** Move `from` and everything after it in the conversation into a new group of replaced messages. */
function foldFrom(from) {
  const box = messagesBox();
  let top = from;
  while (top.parentElement !== box) top = top.parentElement;
  const group = supersededGroup();
  const moving = [];
  if (top !== from) { // the bubble sits in a run's block: take the block from the bubble on
    moving.push(...[...top.children].slice([...top.children].indexOf(from)));
    const tail = [];
    for (let n = top.nextSibling; n; n = n.nextSibling) tail.push(n);
    group.body.append(...moving, ...tail);
    top.after(group);
  } else {
    const tail = [];
    for (let n = top; n; n = n.nextSibling) tail.push(n);
    top.before(group);
    group.body.append(...tail);
  }
  group.body.querySelectorAll("[data-testid=edit-message], [data-testid=regenerate]").forEach((b) => b.remove());
  const prev = group.previousElementSibling; // replaced right after an earlier replacement: one group, as after a reload
  if (prev && prev.classList.contains("superseded")) {
    prev.body.append(...group.body.childNodes);
    group.remove();
    countSuperseded(prev);
    return prev;
  }
  countSuperseded(group);
  return group;
}

/** Send `content` again in place of the user message `bubble` (and all after it). */
async function resend(bubble, content) {
  const task = state.current;
  if (!task || state.run) return false;
  const idx = bubble.dataset.idx;
  const abort = new AbortController();
  let resp;
  try {
    resp = await api("/v1/tasks/" + enc(task.task_id) + "/messages/" + enc(idx) + "/resend", {
      method: "POST", json: content === null ? {} : { content }, headers: { Accept: "text/event-stream" },
      signal: abort.signal, raw: true,
    });
  } catch (err) {
    bubble.after(notice("error", t("chat.resend_failed", { msg: err.message }), "resend-error"));
    return false;
  }
  const text = content === null ? bubble.text : content;
  const group = foldFrom(bubble);
  const fresh = userBubble(text, new Date().toISOString(), resp.headers.get("X-Message-Idx"));
  group.after(fresh);
  scrollDown(true);
  const runId = resp.headers.get("X-Run-Id");
  const status = resp.headers.get("X-Run-Status") === "queued" ? "queued" : "running";
  const url = resp.headers.get("Content-Location") || "/v1/tasks/" + enc(task.task_id) + "/events?run_id=" + enc(runId || "");
  follow(url, runId, status, sendMessage, resp, abort);
  return true;
}

/** The edit box in place of a user bubble's text: Send again / Cancel. */
function startEdit(bubble) {
  if (!bubble || bubble.querySelector(".edit-box")) return;
  const body = bubble.querySelector(".body");
  const input = el("textarea", { class: "edit-input", rows: 3, "data-testid": "edit-input", "aria-label": t("chat.edit_label") });
  input.value = bubble.text;
  const done = () => { box.remove(); body.hidden = false; };
  const box = el("div", { class: "edit-box" }, input, el("div", { class: "row" },
    el("button", { type: "button", class: "primary", "data-testid": "edit-send", onclick: async (e) => {
      if (!input.value.trim()) return;
      e.currentTarget.disabled = true;
      const value = input.value;
      done();
      await resend(bubble, value);
    } }, t("chat.edit_send")),
    el("button", { type: "button", "data-testid": "edit-cancel", onclick: done }, t("chat.edit_cancel"))));
  body.hidden = true;
  body.after(box);
  input.focus();
}

/** "重新生成" on the conversation's last answer, while no run is active and its question is known. */
export function markLastAnswer() {
  const box = messagesBox();
  box.querySelectorAll("[data-testid=regenerate]").forEach((b) => b.remove());
  const users = liveUserBubbles();
  const question = users[users.length - 1];
  if (!question || !question.dataset.idx || state.run || !state.current || state.current.read_only) return;
  const answers = [...box.querySelectorAll(":scope > .msg.assistant, :scope > .run > .msg.assistant")];
  const answer = answers[answers.length - 1];
  if (!answer || (question.compareDocumentPosition(answer) & Node.DOCUMENT_POSITION_FOLLOWING) === 0) return;
  answer.querySelector(".who").append(el("button", { type: "button", class: "copy-button small", "data-testid": "regenerate",
    "aria-label": t("chat.regenerate_label"), onclick: () => resend(question, null) }, t("chat.regenerate")));
}

export function setupResend() {
  on("edit-message", startEdit);
  for (const name of ["history-loaded", "run-ended", "run-changed"]) on(name, markLastAnswer);
}
