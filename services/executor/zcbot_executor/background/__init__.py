"""Background processes: `shell`/`run_python` with background=true, check_process, the web's process cards.

The one entry point is `ProcManager` (manager.py): `start`, `check`, `kill`, `list`, `find`,
`stop_task` and `sweep`. Inside the package, one concern a module, each importing only those
before it:
- `files` — a process's files in the user's tree (forgeable; written by inside/proc_wrapper.py);
- `record` — `ProcRecord`, the launching host's private record of a process (host state);
- `watch` — `BackgroundWatch`: liveness, time limits and kills from outside the process tree, one
  lock per process around each kill and enforcement step; `stop_left_behind` for `zcbot up`;
- `sweep` — removing ended processes after the retention;
- `manager` — `ProcManager`, the public API;
- `web` — the web's list/kill (`ProcsRequest`), `changes` — a process's file changes reported
  when it ends, `quota_guard` — the executor's side of the disk quota (it kills the user's
  writing background processes too).
Nothing here runs inside a sandbox; what does is in `zcbot_executor/inside/`.
"""

from zcbot_executor.background.manager import ProcManager
from zcbot_executor.background.record import ProcRecord
from zcbot_executor.background.watch import BackgroundWatch, stop_left_behind

__all__ = ["BackgroundWatch", "ProcManager", "ProcRecord", "stop_left_behind"]
