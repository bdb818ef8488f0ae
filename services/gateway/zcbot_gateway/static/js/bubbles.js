/* The pieces of a conversation: user and assistant bubbles (assistant text is markdown, rendered
 * sanitized), reasoning blocks, and the "continue" hint after an early stop. */

import { el } from "./dom.js";
import { t } from "./i18n.js";
import { MarkdownStream } from "./markdown.js";
import { copyButton } from "./copy.js";
import { timeStamp } from "./when.js";
import { emit } from "./state.js";

/** The bubble's head: who, when (exact on hover), a copy button for its text, and `extra` buttons. */
function head(who, createdAt, text, ...extra) {
  return el("div", { class: "who" }, el("span", {}, who), timeStamp(createdAt),
    copyButton(text, "copy-message"), ...extra);
}

export function messagesBox() { return document.getElementById("messages"); }

export function scrollDown(force = false) {
  const box = messagesBox();
  const nearBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 200;
  if (force || nearBottom) box.scrollTop = box.scrollHeight;
}

export function clearEmpty() {
  messagesBox().querySelectorAll(":scope > .empty").forEach((n) => n.remove());
}

/** A user bubble; with its stored `idx` it can be edited and sent again (resend.js). */
export function userBubble(text, createdAt = null, idx = null) {
  const bubble = el("div", { class: "msg user", "data-testid": "user-message" },
    head(t("chat.you"), createdAt, () => text, editButton()), el("div", { class: "body", "data-testid": "user-text" }, text));
  bubble.text = text;
  setMessageIdx(bubble, idx);
  return bubble;
}

function editButton() {
  return el("button", { type: "button", class: "copy-button small edit-button", "data-testid": "edit-message", hidden: true,
    "aria-label": t("chat.edit_label"), onclick: (e) => emit("edit-message", e.currentTarget.closest(".msg")) },
  t("chat.edit"));
}

/** The stored idx of a user bubble (known once the server said it): it may be edited from then on. */
export function setMessageIdx(bubble, idx) {
  if (idx === null || idx === undefined || idx === "") return;
  bubble.dataset.idx = String(idx);
  bubble.querySelector("[data-testid=edit-message]").hidden = false;
}

/** An assistant bubble; `.stream` renders its markdown as text arrives. */
export function assistantBubble(text = "", createdAt = null) {
  const body = el("div", { class: "body md", "data-testid": "assistant-text" });
  const bubble = el("div", { class: "msg assistant", "data-testid": "assistant-message" },
    head(t("chat.assistant"), createdAt, () => bubble.stream.text), body);
  bubble.stream = new MarkdownStream(body);
  if (text) bubble.stream.set(text);
  return bubble;
}

/** Messages replaced by an edit or a regenerate: kept, folded away, marked as no longer seen by the model. */
export function supersededGroup() {
  const body = el("div", { class: "superseded-body" });
  const group = el("details", { class: "superseded", "data-testid": "superseded" },
    el("summary", { "data-testid": "superseded-summary" }), body);
  group.body = body;
  return group;
}

/** The group's summary, once its messages are in: how many it holds. */
export function countSuperseded(group) {
  const n = group.body.querySelectorAll(".msg").length;
  group.querySelector("summary").textContent = t("chat.superseded", { n });
}

export function reasoningBlock(text = "") {
  return el("details", { class: "reasoning", "data-testid": "reasoning" },
    el("summary", {}, t("chat.reasoning")), el("div", { class: "reasoning-body" }, text));
}

export function continueHint(send) {
  return el("div", { class: "notice hint", "data-testid": "continue-hint" },
    t("chat.stopped_early") + " ",
    el("button", { type: "button", class: "link-button", "data-testid": "continue-button",
      onclick: () => send(t("chat.continue_message")) }, t("chat.continue")));
}

export function messageText(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((p) => (typeof p === "string" ? p : p && (p.text || (p.type ? "[" + p.type + "]" : ""))))
      .filter(Boolean).join("\n");
  }
  return JSON.stringify(content);
}
