"""A background process's file changes (issue 29), reported when it ends.

`shell`/`run_python` with background=true get the same bounded before/after scan of the task
folder as foreground calls (file_watch.py): the before-scan at launch, kept in the executor's
private process record (record.py); the after-scan here, once watch.py sees the process gone. The changes
go to the runners as a `FileChangesReport` on JetStream (the executor has no database), which
record them as `data_events` of the run that started the process. Published before the record
forgets its before-scan: a failed publish is retried by the next executor start.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from zcbot_core import safe_fs
from zcbot_core.bus import FileChangesReport, Topology, encode
from zcbot_executor.background.manager import ProcManager
from zcbot_executor.background.record import ProcRecord
from zcbot_executor.file_watch import MAX_FILE_CHANGES, Before, FileWatch, absorb

log = logging.getLogger(__name__)


def absorb_call(procs: ProcManager, user_id: str, changes: list[dict[str, Any]]) -> None:
    """A foreground call's changes are its own: the user's running background processes (this
    host's) take them into their before-scans, so each change is recorded once."""
    for proc_id, record in list(procs.watch.entries.items()):
        raw = record.watch
        if record.user_id != user_id or raw is None:
            continue
        try:
            before = Before.from_json(raw)
            with safe_fs.Root.open(before.user_root) as r:
                if not absorb(before, r, changes):
                    continue
        except (KeyError, TypeError, ValueError, safe_fs.SafeFsError, OSError) as exc:
            log.info("background before-scan not updated", extra={"proc_id": proc_id, "error": str(exc)})
            continue
        record.watch = before.to_json()
        procs.watch.save(record)


async def report_changes(watch: FileWatch, procs: ProcManager, js: Any, topo: Topology, record: ProcRecord) -> None:
    raw, proc_id, user_id = record.watch, record.proc_id, record.user_id
    if raw is None:
        return
    try:
        before = Before.from_json(raw)
    except (KeyError, TypeError, ValueError):
        log.warning("unreadable background before-scan", extra={"proc_id": proc_id})
        await asyncio.to_thread(procs.forget_watch, record)
        return
    changes = await asyncio.to_thread(watch.after, user_id, before, True)
    if changes:
        msg = FileChangesReport(user_id=user_id, task_id=record.task_id,
                                run_id=record.run_id, proc_id=proc_id,
                                changes=changes[:MAX_FILE_CHANGES], more=max(0, len(changes) - MAX_FILE_CHANGES))
        try:
            # the user in the id too: JetStream's dedupe must not drop another user's report of a
            # colliding proc id (':' is in neither alphabet)
            await js.publish(topo.file_changes_subject(), encode(msg),
                             headers={"Nats-Msg-Id": f"fchg:{user_id}:{proc_id}"})
        except Exception as exc:
            log.warning("could not report a background process's file changes",
                        extra={"proc_id": proc_id, "error": str(exc)})
            return
    log.info("background process file changes reported", extra={"proc_id": proc_id, "changes": len(changes)})
    await asyncio.to_thread(procs.forget_watch, record)
