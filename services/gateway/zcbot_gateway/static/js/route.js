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
