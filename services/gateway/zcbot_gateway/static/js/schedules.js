/* The schedules board: the user's jobs with when they run in words (cronwords.js; the cron on
 * hover), the next run in this browser's time zone, and state; disable and delete (creating and
 * editing happen in conversation). */

import { api, enc } from "./api.js";
import { $, clip, el, itemsOf } from "./dom.js";
import { lang, t } from "./i18n.js";
import { scheduleWords } from "./cronwords.js";
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

/** A time in this browser's zone, with the zone's name ("2026/12/8 09:00 GMT+8"). */
function zonedTime(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleString(lang === "zh" ? "zh-CN" : "en", { year: "numeric", month: "numeric", day: "numeric",
    hour: "2-digit", minute: "2-digit", hour12: false, timeZoneName: "short" });
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
  const meta = scheduleWords(job.cron, job.timezone)
    + (enabled ? "" : " · " + t("schedules.disabled"))
    + (job.next_run_at && enabled ? " · " + t("schedules.next", { when: zonedTime(job.next_run_at) }) : "");
  return el("li", { class: "schedule" + (enabled ? "" : " disabled"), "data-testid": "schedule-item", "data-job-id": id },
    el("div", { class: "schedule-name" }, job.name || id),
    el("div", { class: "muted small-text", "data-testid": "schedule-when", title: job.cron }, meta),
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
