/* Phone layout (≤ 900 px): the tasks and files panes are drawers opened from the header, the chat
 * keeps the full width. Escape or the backdrop closes a drawer; opening a task closes it too. */

import { $ } from "./dom.js";
import { on } from "./state.js";

const DRAWERS = { tasks: "open-tasks", files: "open-files" };

export function setDrawer(name) {
  const current = document.body.dataset.drawer || "";
  const next = name === current ? "" : name;
  document.body.dataset.drawer = next;
  for (const [drawer, button] of Object.entries(DRAWERS)) $(button).setAttribute("aria-expanded", String(next === drawer));
  $("drawer-scrim").hidden = !next;
  if (next) {
    const pane = document.querySelector(`[data-drawer="${next}"]`);
    const first = pane && pane.querySelector("button, input, [tabindex='0']");
    if (first) first.focus();
  }
}

export function setupLayout() {
  document.body.dataset.drawer = "";
  for (const [drawer, button] of Object.entries(DRAWERS)) $(button).addEventListener("click", () => setDrawer(drawer));
  $("drawer-scrim").addEventListener("click", () => setDrawer(""));
  document.addEventListener("keydown", (e) => {
    // Escape in a dialog opened from a drawer (preview, history) closes only the dialog.
    if (e.key === "Escape" && document.body.dataset.drawer && !document.querySelector("dialog[open]")) setDrawer("");
  });
  on("task-selected", () => { if (document.body.dataset.drawer === "tasks") setDrawer(""); });
}
