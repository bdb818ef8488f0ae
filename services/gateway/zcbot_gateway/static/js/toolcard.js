/* Tool-call cards, the same live and after a reload: closed by default (the summary line says
 * tool, arguments and state), opened by the person, or by itself when the tool failed.
 * Arguments are pretty-printed JSON with non-ASCII text shown as is (never \uXXXX). */

import { clip, el, parseJson } from "./dom.js";
import { t } from "./i18n.js";

const ESCAPED = /\\u([0-9a-fA-F]{4})/g;

/** Arguments as readable text: an object (live event) or a JSON string (stored call). */
export function prettyArgs(raw) {
  if (raw === null || raw === undefined) return "";
  const value = typeof raw === "string" ? parseJson(raw) : raw;
  if (typeof value === "string") return value.replace(ESCAPED, (_, hex) => String.fromCharCode(parseInt(hex, 16)));
  return JSON.stringify(value, null, 2);
}

function oneLine(text) {
  const s = String(text || "").replace(/\s+/g, " ").trim();
  return s.length > 80 ? s.slice(0, 79) + "…" : s;
}

// What each tool acts on, shown after its name in words ("写入文件 报告.md").
const SUBJECT = {
  read: "path", write: "path", edit: "path", look_at_image: "path", generate_image: "prompt", glob: "pattern",
  grep: "pattern",
  shell: "command", run_python: "code", check_process: "proc_id", web_fetch: "url", web_search: "query",
  load_skill: "name", read_skill_file: "path", save_skill: "name", fork_skill: "name",
  schedule_create: "name", schedule_update: "name", schedule_delete: "name", wechat_push: "title",
};

/** The card's label: the tool in words (an unknown tool: "调用工具 x") and what it acts on. */
export function toolLabel(name, args) {
  const key = "toolname." + name;
  const words = t(key) !== key ? t(key) : t("toolname.other", { name });
  const value = typeof args === "string" ? parseJson(args) : args;
  const field = SUBJECT[name];
  let subject = value && typeof value === "object" && field ? value[field] ?? value.job_id ?? "" : "";
  if (typeof subject !== "string") subject = subject === null || subject === undefined ? "" : String(subject);
  return { words, subject: oneLine(subject.split("\n")[0]) };
}

export function toolCard(callId, name, args) {
  const pretty = prettyArgs(args);
  const label = toolLabel(name, args);
  return el("details", { class: "tool-card pending", "data-testid": "tool-card", "data-call-id": callId || "",
    "data-tool": name },
    el("summary", { title: name },
      el("span", { class: "tool-name", "data-testid": "tool-name" }, label.words),
      el("span", { class: "tool-oneline muted", "data-testid": "tool-subject" }, label.subject),
      el("span", { class: "tool-state badge", "data-testid": "tool-state" }, t("tool.running"))),
    el("div", { class: "tool-section-label" }, t("tool.args")),
    el("pre", { class: "tool-args", "data-testid": "tool-args" }, clip(pretty, 8000)),
    el("div", { class: "tool-section-label" }, t("tool.result")),
    el("pre", { class: "tool-result", "data-testid": "tool-result" }, ""));
}

export function setToolResult(card, preview, ok, truncated) {
  card.classList.remove("pending");
  card.classList.add(ok === false ? "failed" : "ok");
  card.dataset.ok = ok === false ? "false" : "true";
  card.querySelector(".tool-state").textContent = ok === false ? t("tool.failed") : t("tool.ok");
  card.querySelector(".tool-result").textContent = clip(preview) + (truncated ? "\n" + t("tool.truncated") : "");
  if (ok === false) card.open = true;
}

/** Cards still waiting when a run is over: the tool never ran (guard stop, cancel, crash). */
export function settlePendingCards(root, label) {
  root.querySelectorAll(".tool-card.pending").forEach((card) => {
    card.classList.remove("pending");
    card.classList.add("skipped");
    card.dataset.ok = "false";
    card.querySelector(".tool-state").textContent = label;
  });
}
