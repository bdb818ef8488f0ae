/* The dev page's shared state and its small event bus: modules announce what changed
 * ("task-selected", "run-ended", "tasks-changed", "procs-changed") instead of calling each other. */

export const ACTIVE_RUN = new Set(["waiting", "queued", "running", "cancelling"]);

export const state = {
  me: null,
  tasks: [],
  current: null, // the selected task object
  run: null, // the followed run: {runId, abort, view, taskId}
  filesPath: "",
  selectSeq: 0,
  procs: [], // background processes (procs.js)
};

const handlers = new Map();

export function on(name, fn) {
  if (!handlers.has(name)) handlers.set(name, new Set());
  handlers.get(name).add(fn);
}

export function emit(name, detail) {
  for (const fn of handlers.get(name) || []) {
    try { fn(detail); } catch (err) { console.error(name, err); }
  }
}
