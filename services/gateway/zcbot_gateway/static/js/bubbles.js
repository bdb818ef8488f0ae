/* The pieces of a conversation: user and assistant bubbles (assistant text is markdown, rendered
 * sanitized), reasoning blocks, and the "continue" hint after an early stop. */

import { el } from "./dom.js";
import { t } from "./i18n.js";
import { MarkdownStream } from "./markdown.js";
import { copyButton } from "./copy.js";
import { timeStamp } from "./when.js";

/** The bubble's head: who, when (exact on hover), and a copy button for its text. */
function head(who, createdAt, text) {
  return el("div", { class: "who" }, el("span", {}, who), timeStamp(createdAt),
    copyButton(text, "copy-message"));
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

export function userBubble(text, createdAt = null) {
  return el("div", { class: "msg user", "data-testid": "user-message" },
    head(t("chat.you"), createdAt, () => text), el("div", { class: "body", "data-testid": "user-text" }, text));
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
