/* The memory panel, read-only (seed §3.7): the agent keeps its memory; here you can read it. */

import { api, enc } from "./api.js";
import { $, el, formatBytes, formatTime } from "./dom.js";
import { t } from "./i18n.js";
import { renderMarkdown } from "./markdown.js";

export async function loadMemory() {
  const box = $("memory-body");
  let body;
  try {
    body = await api("/v1/memory");
  } catch (err) {
    box.replaceChildren(el("p", { class: "error", role: "alert" }, t("memory.load_failed", { msg: err.message })));
    return;
  }
  const core = (body.core || "").trim();
  const files = body.extended || [];
  box.replaceChildren(
    el("h4", {}, t("memory.core")),
    core ? el("div", { class: "md memory-core", "data-testid": "memory-core" }, renderMarkdown(core))
      : el("p", { class: "muted empty", "data-testid": "memory-empty" }, t("memory.empty")),
    el("h4", {}, t("memory.extended")),
    files.length ? el("ul", { class: "memory-files" }, files.map((f) => el("li", { "data-testid": "memory-file" },
      el("details", { ontoggle: (e) => { if (e.target.open) openFile(e.target, f.filename); } },
        el("summary", {}, f.filename, el("span", { class: "muted small-text" },
          " " + (f.description || "") + " · " + formatBytes(f.size) + (f.mtime ? " · " + formatTime(f.mtime) : ""))),
        el("div", { class: "md memory-file-body" }))))) : el("p", { class: "muted empty" }, t("memory.no_files")),
    el("p", { class: "muted small-text" }, t("memory.read_only")));
}

async function openFile(details, filename) {
  const target = details.querySelector(".memory-file-body");
  if (target.dataset.loaded) return;
  try {
    const out = await api("/v1/memory/extended/" + enc(filename));
    target.replaceChildren(renderMarkdown(out.content || ""));
    target.dataset.loaded = "1";
  } catch (err) {
    target.textContent = t("memory.load_failed", { msg: err.message });
  }
}
