/* The schedules board: the user's jobs with cron, next run and state; disable and delete
 * (creating and editing happen in conversation). */

import { api, enc } from "./api.js";
import { $, clip, el, formatTime, itemsOf } from "./dom.js";
import { t } from "./i18n.js";
import { confirmDanger } from "./ask.js";

export async function loadSchedules() {
  const list = $("schedule-list");
  const error = $("schedules-error");
  let items;
  try {
    items = itemsOf(await api("/v1/schedules"), "schedules");
    error.textContent = "";
  } catch (err) {
    list.replaceChildren();
    error.textContent = t("schedules.load_failed", { msg: err.message });
    return;
  }
  list.replaceChildren();
  if (!items.length) {
    list.append(el("li", { class: "muted empty", "data-testid": "schedules-empty" }, t("schedules.empty")));
    return;
  }
  for (const job of items) list.append(scheduleItem(job));
}

function scheduleItem(job) {
  const id = job.job_id || job.id;
  const enabled = job.enabled !== false;
  const act = async (method, path, what) => {
    try {
      await api(path, { method });
      await loadSchedules();
    } catch (err) {
      $("schedules-error").textContent = t("schedules.action_failed", { what, msg: err.message });
    }
  };
  const meta = [job.cron, job.timezone].filter(Boolean).join(" ")
    + (enabled ? "" : " · " + t("schedules.disabled"))
    + (job.next_run_at && enabled ? " · " + t("schedules.next", { when: formatTime(job.next_run_at) }) : "");
  return el("li", { class: "schedule" + (enabled ? "" : " disabled"), "data-testid": "schedule-item", "data-job-id": id },
    el("div", { class: "schedule-name" }, job.name || id),
    el("div", { class: "muted small-text" }, meta),
    job.prompt ? el("div", { class: "schedule-prompt small-text" }, clip(job.prompt, 200)) : null,
    el("div", { class: "row" },
      enabled ? el("button", { type: "button", class: "small", "data-testid": "schedule-disable",
        onclick: () => act("POST", "/v1/schedules/" + enc(id) + "/disable", t("schedules.disable")) },
      t("schedules.disable")) : null,
      el("button", { type: "button", class: "small danger", "data-testid": "schedule-delete",
        onclick: async () => {
          if (await confirmDanger(t("schedules.delete_title"), t("schedules.confirm_delete", { name: job.name || id }),
            t("schedules.delete"))) {
            act("DELETE", "/v1/schedules/" + enc(id), t("schedules.delete"));
          }
        } }, t("schedules.delete"))));
}
