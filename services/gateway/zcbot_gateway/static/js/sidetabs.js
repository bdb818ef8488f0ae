/* The tabs of the left pane: tasks, schedules, skills, memory (each loaded when first shown and
 * again each time it is opened). */

import { $ } from "./dom.js";
import { loadMemory } from "./memory.js";
import { loadSchedules } from "./schedules.js";
import { loadSkills } from "./skills.js";

const LOADERS = { tasks: null, schedules: loadSchedules, skills: loadSkills, memory: loadMemory };
const NAMES = Object.keys(LOADERS);

export function showSideTab(name) {
  for (const n of NAMES) {
    const tab = $("side-tab-" + n);
    const on = n === name;
    tab.setAttribute("aria-selected", String(on));
    tab.tabIndex = on ? 0 : -1;
    $("side-panel-" + n).hidden = !on;
  }
  if (LOADERS[name]) LOADERS[name]();
}

export function setupSideTabs() {
  for (const n of NAMES) $("side-tab-" + n).addEventListener("click", () => showSideTab(n));
  $("side-tabs").addEventListener("keydown", (e) => {
    if (e.key !== "ArrowLeft" && e.key !== "ArrowRight") return;
    const i = NAMES.findIndex((n) => $("side-tab-" + n).getAttribute("aria-selected") === "true");
    const next = NAMES[(i + (e.key === "ArrowRight" ? 1 : NAMES.length - 1)) % NAMES.length];
    showSideTab(next);
    $("side-tab-" + next).focus();
  });
  showSideTab("tasks");
}
