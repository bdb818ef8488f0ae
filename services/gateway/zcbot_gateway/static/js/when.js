/* Message times: relative ("3 分钟前"), the exact time in the person's own time zone on hover
 * (the title), refreshed each minute while the page is open. */

import { el } from "./dom.js";
import { lang, t } from "./i18n.js";

const LOCALE = lang === "zh" ? "zh-CN" : "en";
const RELATIVE = new Intl.RelativeTimeFormat(LOCALE, { numeric: "auto" });
// dateStyle/timeStyle cannot be combined with timeZoneName: the fields one by one.
const EXACT = new Intl.DateTimeFormat(LOCALE, { year: "numeric", month: "long", day: "numeric", weekday: "short",
  hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false, timeZoneName: "short" });
const DAY = new Intl.DateTimeFormat(LOCALE, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
const FULL = new Intl.DateTimeFormat(LOCALE, { dateStyle: "medium", timeStyle: "short" });

export function relativeTime(date, now = new Date()) {
  const s = Math.round((now.getTime() - date.getTime()) / 1000);
  if (s < 45) return t("time.just_now");
  if (s < 3600) return RELATIVE.format(-Math.round(s / 60), "minute");
  if (s < 86400) return RELATIVE.format(-Math.round(s / 3600), "hour");
  if (s < 7 * 86400) return DAY.format(date);
  return FULL.format(date);
}

export function exactTime(date) { return EXACT.format(date); }

/** A <time> for `value` (ISO text from the server, or nothing: now, for a live message). */
export function timeStamp(value) {
  const date = value ? new Date(value) : new Date();
  if (Number.isNaN(date.getTime())) return null;
  return el("time", { class: "msg-time", datetime: date.toISOString(), title: exactTime(date),
    "data-testid": "msg-time" }, relativeTime(date));
}

let timer = null;
export function startClock() {
  if (timer !== null) return;
  timer = setInterval(() => {
    for (const node of document.querySelectorAll("time.msg-time")) node.textContent = relativeTime(new Date(node.dateTime));
  }, 60000);
}
