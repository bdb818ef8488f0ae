/* Phone layout (≤ 900 px): the tasks and files panes are drawers opened from the header, the chat
 * keeps the full width. Escape or the backdrop closes a drawer; opening a task closes it too.
 * An open drawer keeps Tab inside it; closing it gives focus back to its header button. */

import { $ } from "./dom.js";
import { holdFocus, tabbables } from "./focustrap.js";
import { on } from "./state.js";

const DRAWERS = { tasks: "open-tasks", files: "open-files" };
let release = null; // the open drawer's focus trap

export function setDrawer(name) {
  const current = document.body.dataset.drawer || "";
  const next = name === current ? "" : name;
  document.body.dataset.drawer = next;
  for (const [drawer, button] of Object.entries(DRAWERS)) $(button).setAttribute("aria-expanded", String(next === drawer));
  $("drawer-scrim").hidden = !next;
  if (release) release({ restore: !next }); // switching: the new drawer takes focus at once
  release = null;
  if (next) {
    const pane = document.querySelector(`.pane[data-drawer="${next}"]`); // not <body>, which names it too
    release = holdFocus(pane, $(DRAWERS[next]));
    const [first] = tabbables(pane);
    // No scroll: the drawer is still sliding in, and scrolling would shift the clipped panes sideways.
    if (first) first.focus({ preventScroll: true });
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
