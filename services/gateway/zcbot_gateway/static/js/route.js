/* The page's address: `/t/<task_id>` while a task is open, `/` otherwise (issue 37). Opening a
 * task pushes a history entry, so back/forward step through the tasks opened; a reload or a shared
 * link opens the task named by the address (main.js), and re-attaches to its running stream. */

export function taskIdFromPath(path = location.pathname) {
  const m = /^\/t\/([^/]+)\/?$/.exec(path);
  if (!m) return null;
  try { return decodeURIComponent(m[1]); } catch (_) { return null; }
}

export function pathOf(taskId) {
  return taskId ? "/t/" + encodeURIComponent(taskId) : "/";
}

/** Point the address at `taskId` (null: no task): "push" a new entry, "replace" this one, or "none". */
export function setRoute(taskId, mode = "push") {
  const path = pathOf(taskId);
  if (mode === "none" || location.pathname === path) return;
  if (mode === "replace") history.replaceState({ taskId }, "", path);
  else history.pushState({ taskId }, "", path);
}

/* The open preview is in the address too, as `?file=<path>` (relative to the user's root): a
 * reload, back/forward or a shared link opens the same file's preview. Opening a preview pushes an
 * entry; closing it goes back over that entry (or, on an address that came with the file, drops
 * the parameter in place), so back never reopens a preview the user closed. */

export function fileFromAddress() {
  return new URLSearchParams(location.search).get("file") || null;
}

export function setFileRoute(path) {
  const url = new URL(location.href);
  if (path) {
    if (url.searchParams.get("file") === path) return;
    url.searchParams.set("file", path);
    history.pushState({ ...(history.state || {}), file: path, pushedFile: true }, "", url.pathname + url.search);
    return;
  }
  if (!url.searchParams.has("file")) return;
  if (history.state && history.state.pushedFile) { history.back(); return; }
  url.searchParams.delete("file");
  const { file, pushedFile, ...rest } = history.state || {}; // eslint-disable-line no-unused-vars
  history.replaceState(rest, "", url.pathname + url.search);
}
