/* A schedule's cron in words (issue 37): "每个工作日 09:00（北京时间）" / "Every weekday at 09:00
 * (Beijing time)" for the shapes people set up (daily, weekdays, weekends, given weekdays, a day of
 * the month, every N minutes or hours, hourly); any other expression is shown as the cron itself.
 * The time zone is the schedule's own (the server runs it there), named in words when it is China's. */

import { lang, t } from "./i18n.js";

const INT = /^\d+$/;
const CHINA = new Set(["Asia/Shanghai", "Asia/Chongqing", "Asia/Chungking", "Asia/Harbin", "PRC"]);

const pad = (n) => String(n).padStart(2, "0");

/** The weekdays of a cron day-of-week field (0 and 7 are Sunday), or null for a shape not read. */
function weekdays(field) {
  const days = new Set();
  for (const part of field.split(",")) {
    const range = /^(\d)-(\d)$/.exec(part);
    if (range) {
      for (let d = Number(range[1]); d <= Number(range[2]); d += 1) days.add(d % 7);
    } else if (/^\d$/.test(part)) {
      days.add(Number(part) % 7);
    } else {
      return null;
    }
  }
  return [...days].sort((a, b) => ((a + 6) % 7) - ((b + 6) % 7)); // Monday first
}

function dayWords(days) {
  const key = days.join(",");
  if (key === "1,2,3,4,5") return t("cron.weekdays");
  if (key === "6,0") return t("cron.weekends");
  if (days.length === 7) return t("cron.daily");
  const names = days.map((d) => t("cron.day" + d));
  return t("cron.weekly", { days: names.join(lang === "zh" ? "、" : ", ") });
}

/** The words of `cron`, or null when its shape is not one of the common ones. */
export function cronWords(cron) {
  const f = String(cron || "").trim().split(/\s+/);
  if (f.length !== 5) return null;
  const [min, hour, dom, mon, dow] = f;
  if (mon !== "*") return null;
  const every = /^\*\/(\d+)$/;
  if (dom === "*" && dow === "*") {
    if (every.test(min) && hour === "*") return t("cron.every_minutes", { n: every.exec(min)[1] });
    if (INT.test(min) && hour === "*") return t("cron.hourly", { mm: pad(min) });
    if (INT.test(min) && every.test(hour)) return t("cron.every_hours", { n: every.exec(hour)[1], mm: pad(min) });
  }
  if (!INT.test(min) || !INT.test(hour)) return null;
  const time = pad(hour) + ":" + pad(min);
  if (dom === "*" && dow === "*") return t("cron.at", { when: t("cron.daily"), time });
  if (dom === "*") {
    const days = weekdays(dow);
    return days && days.length ? t("cron.at", { when: dayWords(days), time }) : null;
  }
  if (INT.test(dom) && dow === "*") return t("cron.at", { when: t("cron.monthly", { d: dom }), time });
  return null;
}

/** The schedule's time zone in words: 北京时间 / Beijing time for China's, else its name. */
export function zoneWords(tz) {
  if (!tz) return "";
  if (CHINA.has(tz)) return t("cron.beijing");
  if (tz === "UTC" || tz === "Etc/UTC") return "UTC";
  return tz;
}

/** "每个工作日 09:00（北京时间）": the words and the zone (the cron itself when not read). */
export function scheduleWords(cron, tz) {
  const words = cronWords(cron) || cron;
  const zone = zoneWords(tz);
  return zone ? t("cron.with_zone", { words, zone }) : words;
}
