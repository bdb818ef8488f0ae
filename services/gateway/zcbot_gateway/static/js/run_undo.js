/* "Undo this run's file changes" at the end of a run that changed files (the `done` event's
 * `files_changed`, issue 29): POST revert-files; files changed again since the run are listed and
 * skipped, and the user may force them; a 409 (a run is active) is said plainly. */

import { api, enc } from "./api.js";
import { el } from "./dom.js";
import { t } from "./i18n.js";
import { emit } from "./state.js";
import { toast } from "./toast.js";

function pathList(paths, testid) {
  return el("ul", { class: "undo-paths", "data-testid": testid }, paths.map((p) => el("li", {}, p)));
}

/** The offer for `runId` of `taskId`, which changed `n` files; a node to append to the run view. */
export function undoOffer(taskId, runId, n) {
  const box = el("div", { class: "notice hint undo-run", "data-testid": "undo-run", "data-run-id": runId });
  const result = el("div", { class: "undo-result", "data-testid": "undo-result", role: "status", tabindex: "-1" });
  const button = el("button", { type: "button", "data-testid": "undo-run-button",
    onclick: () => revert(false) }, t("undo.button"));

  async function revert(force) {
    for (const b of box.querySelectorAll("button")) b.disabled = true;
    result.setAttribute("role", "status");
    result.replaceChildren(el("span", { class: "muted" }, t("undo.working")));
    let out;
    try {
      out = await api(`/v1/tasks/${enc(taskId)}/runs/${enc(runId)}/revert-files`, { method: "POST", json: { force } });
    } catch (err) {
      result.setAttribute("role", "alert");
      result.replaceChildren(el("p", { class: "undo-error", "data-testid": "undo-error", "data-status": err.status },
        err.status === 409 ? t("undo.busy") : t("undo.failed", { msg: err.message })));
      for (const b of box.querySelectorAll("button")) b.disabled = false;
      return;
    }
    const reverted = out.reverted || [];
    const conflicts = (out.conflicts || []).map((c) => c.path);
    const missing = out.missing_versions || [];
    const parts = [];
    if (reverted.length) parts.push(el("p", { "data-testid": "undo-summary" }, t("undo.done", { n: reverted.length })));
    else if (!conflicts.length && !missing.length) parts.push(el("p", { "data-testid": "undo-summary" }, t("undo.nothing")));
    if (conflicts.length) {
      parts.push(el("p", {}, t("undo.conflicts")), pathList(conflicts, "undo-conflicts"),
        el("button", { type: "button", class: "danger", "data-testid": "undo-run-force",
          onclick: () => revert(true) }, t("undo.force")));
    }
    if (missing.length) parts.push(el("p", {}, t("undo.missing")), pathList(missing, "undo-missing"));
    result.replaceChildren(...parts);
    // Undoing twice finds nothing left to do; the button stays only while something was skipped.
    button.hidden = true;
    if (reverted.length) {
      toast(t("undo.done", { n: reverted.length }), "info", "undo-toast");
      emit("files-changed");
    }
    // The clicked button is gone: keep keyboard focus in the note (on Force when it is offered).
    (box.querySelector('[data-testid="undo-run-force"]') || result).focus();
  }

  box.append(el("div", { class: "row" }, el("span", {}, t("undo.changed", { n })), button), result);
  return box;
}

/** In place of the offer after a reload, for a run whose file changes were undone already. */
export function undoneNote(runId) {
  return el("div", { class: "notice hint undo-run", "data-testid": "undo-run-done", "data-run-id": runId },
    t("undo.already"));
}
