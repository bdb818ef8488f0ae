/* Markdown -> sanitized DOM: the only place the page turns text into HTML.
 * marked renders (GFM: tables, fences), DOMPurify removes everything that could run or load
 * (scripts, event handlers, javascript: URLs, iframes, forms), highlight.js colours code.
 * A model's answer is attacker-controlled text: it never reaches innerHTML unsanitized. */

import { Marked } from "../vendor/marked.esm.js";
import DOMPurify from "../vendor/purify.es.js";
import hljs from "../vendor/highlight.min.js";
import { copyButton } from "./copy.js";

const marked = new Marked({ gfm: true, breaks: true, async: false });

const PURIFY = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed", "svg", "math"],
  FORBID_ATTR: ["style", "srcset"],
  ADD_ATTR: ["target"],
  RETURN_DOM_FRAGMENT: true,
};

// Links open in a new tab without access to this page (noopener) and without a Referer.
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
});

/** A sanitized fragment for `text` (markdown); code blocks highlighted. */
export function renderMarkdown(text) {
  const html = marked.parse(String(text || ""));
  const frag = DOMPurify.sanitize(html, PURIFY);
  for (const code of frag.querySelectorAll("pre code")) {
    const m = /language-([\w+-]+)/.exec(code.className);
    try {
      if (m && hljs.getLanguage(m[1])) {
        code.innerHTML = hljs.highlight(code.textContent, { language: m[1], ignoreIllegals: true }).value;
      } else {
        code.innerHTML = hljs.highlightAuto(code.textContent).value;
      }
      code.classList.add("hljs");
    } catch (_) { /* leave the plain text */ }
  }
  for (const pre of frag.querySelectorAll("pre")) {
    // Each code block gets its own copy button (added after sanitizing: it is ours, not the model's).
    const wrap = document.createElement("div");
    wrap.className = "code-block";
    const source = pre.textContent;
    pre.replaceWith(wrap);
    wrap.append(copyButton(() => source, "copy-code", "copy.code"), pre);
  }
  for (const table of frag.querySelectorAll("table")) {
    // A wide table scrolls inside its own box instead of widening the chat (390 px phones).
    const wrap = document.createElement("div");
    wrap.className = "md-table";
    table.replaceWith(wrap);
    wrap.append(table);
  }
  return frag;
}

/** Renders markdown into `node` as text streams in: at most once per animation frame. */
export class MarkdownStream {
  constructor(node) {
    this.node = node;
    this.text = "";
    this.pending = false;
  }

  append(delta) {
    this.text += delta;
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => this.flush());
  }

  set(text) {
    this.text = text;
    this.flush();
  }

  flush() {
    this.pending = false;
    this.node.replaceChildren(renderMarkdown(this.text));
    this.node.dataset.raw = this.text.length;
  }
}
