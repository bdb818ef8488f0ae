/* One focus trap for everything that opens over the page: the phone layout's drawers and the modal
 * dialogs (preview, history, password). While one is open, Tab and Shift+Tab cycle inside it
 * (a modal <dialog> alone lets Tab leave to the browser's own controls; a drawer does not stop it
 * at all); closing it gives focus back to what opened it. A dialog opened from a drawer traps on
 * top of the drawer's trap, and closing it hands the keyboard back to the drawer. */

const FOCUSABLE = "a[href], button, input, select, textarea, iframe, summary, [tabindex]";
const traps = []; // the open ones, innermost last: only that one handles Tab

/** What Tab can reach inside `root`, in document order (enabled, rendered, not tabindex=-1). */
export function tabbables(root) {
  return [...root.querySelectorAll(FOCUSABLE)].filter((node) => node.tabIndex >= 0 && !node.disabled
    && node.checkVisibility({ visibilityProperty: true }));
}

function onKeydown(e) {
  const trap = traps[traps.length - 1];
  if (e.key !== "Tab" || !trap) return;
  const items = tabbables(trap.root);
  const active = document.activeElement;
  const inside = trap.root.contains(active);
  if (!items.length) {
    e.preventDefault();
    return;
  }
  const first = items[0];
  const last = items[items.length - 1];
  // Only the two ends (and a focus that slipped out, e.g. to <body> after a re-render) need help:
  // between them the browser's own order is already the right one.
  if (e.shiftKey && (!inside || active === first)) {
    e.preventDefault();
    last.focus();
  } else if (!e.shiftKey && (!inside || active === last)) {
    e.preventDefault();
    first.focus();
  }
}

/** Trap Tab inside `root` until the returned release() is called; release({restore: false}) when
 * another trap takes over at once (switching drawers), otherwise focus goes back to `opener`. */
export function holdFocus(root, opener = document.activeElement) {
  if (!traps.length) document.addEventListener("keydown", onKeydown);
  const trap = { root, opener };
  traps.push(trap);
  return function release({ restore = true } = {}) {
    const i = traps.indexOf(trap);
    if (i < 0) return;
    traps.splice(i, 1);
    if (!traps.length) document.removeEventListener("keydown", onKeydown);
    if (restore && opener && opener.isConnected && opener !== document.body) opener.focus();
  };
}

/** dialog.showModal() with the trap; the dialog's close event (its button, Escape, code) releases it. */
export function openModal(dialog, opener = document.activeElement) {
  if (dialog.open) return;
  const release = holdFocus(dialog, opener);
  dialog.addEventListener("close", () => release(), { once: true });
  dialog.showModal();
}
