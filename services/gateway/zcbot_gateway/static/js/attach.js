/* Files into the chat (issue 37): the composer's attach button, files dropped on the conversation
 * and files pasted into the message box are uploaded into the open task's folder (the upload API,
 * one request) and named in the message being written, so the model knows to look at them. */

import { api, enc } from "./api.js";
import { $ } from "./dom.js";
import { t } from "./i18n.js";
import { emit, state } from "./state.js";

/** A pasted screenshot arrives as "image.png": give it a name of its own so pastes never overwrite. */
function named(file, i) {
  if (!/^image\.\w+$/i.test(file.name || "") && file.name) return file;
  const ext = (file.type.split("/")[1] || "png").replace(/[^a-z0-9]/gi, "");
  const stamp = new Date().toISOString().replace(/[-:T]/g, "").slice(0, 14);
  return new File([file], `${t("attach.pasted")}-${stamp}${i ? "-" + i : ""}.${ext}`, { type: file.type });
}

function say(text, kind = "muted") {
  const line = $("attach-status");
  line.textContent = text;
  line.className = "attach-status " + kind;
}

export async function attachFiles(list) {
  const task = state.current;
  const files = Array.from(list || []).map(named);
  if (!files.length) return;
  if (!task || task.read_only) { say(t("attach.no_task"), "error"); return; }
  const form = new FormData();
  form.append("path", task.working_dir);
  for (const file of files) form.append("file", file, file.name);
  const names = files.map((f) => f.name).join("、");
  say(t("files.uploading", { names }));
  try {
    await api("/v1/files/upload?path=" + enc(task.working_dir), { method: "POST", body: form });
  } catch (err) {
    say(t("files.upload_failed", { msg: err.message }), "error");
    return;
  }
  const input = $("message-input");
  const line = t("attach.named", { names });
  input.value = input.value.trim() ? input.value.replace(/\s*$/, "\n") + line : line;
  say(t("attach.done", { names, folder: task.working_dir }));
  emit("files-changed");
  input.focus();
}

export function setupAttach() {
  const pick = $("attach-input");
  pick.addEventListener("change", async () => { await attachFiles(pick.files); pick.value = ""; });
  const zone = document.querySelector(".chat-pane");
  const hasFiles = (e) => Array.from(e.dataTransfer ? e.dataTransfer.types : []).includes("Files");
  zone.addEventListener("dragover", (e) => {
    if (!hasFiles(e) || !state.current) return;
    e.preventDefault();
    zone.classList.add("dropping");
  });
  zone.addEventListener("dragleave", (e) => { if (!zone.contains(e.relatedTarget)) zone.classList.remove("dropping"); });
  zone.addEventListener("drop", (e) => {
    zone.classList.remove("dropping");
    if (!hasFiles(e)) return;
    e.preventDefault();
    attachFiles(e.dataTransfer.files);
  });
  $("message-input").addEventListener("paste", (e) => {
    const files = e.clipboardData ? e.clipboardData.files : null;
    if (!files || !files.length) return; // text pastes as usual
    e.preventDefault();
    attachFiles(files);
  });
}
