"""The runner's side of the data_events log (issue 29): the executor reports what a tool call did
to the user's files (`meta["file_changes"]`); this records them with the run's user, task and run
through `filehistory.record` (the one writer), and counts them for the `done` event.

Background processes end after their call (often after the run): the executor that launched one
publishes a `FileChangesReport` when it ends (zcbot_executor/background/changes.py) and `on_report` records
it for the run that started it (the file-changes work queue; only the executor identity may
publish there, bus/access.py)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import distinct, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core import filehistory
from zcbot_core.bus import BusDecodeError, FileChangesReport, decode
from zcbot_core.db.engine import read_session
from zcbot_core.db.models import DataEvent, Task
from zcbot_core.safe_fs.paths import PathRejected, validate_user_id

log = logging.getLogger(__name__)


def _changes(raw: list[Any], run_id: str) -> list[filehistory.Change]:
    changes = []
    for item in raw:
        try:
            changes.append(filehistory.Change.from_dict(item))
        except (AttributeError, KeyError, TypeError, ValueError):
            log.warning("malformed file change from the executor", extra={"run_id": run_id})
    return changes


def recorder(sessions: async_sessionmaker[AsyncSession], user_id: str, task_id: str,
             run_id: str) -> Callable[[list[dict[str, Any]]], Awaitable[None]]:
    async def record(raw: list[dict[str, Any]]) -> None:
        changes = _changes(raw, run_id)
        if changes:
            async with sessions() as session, session.begin():
                await filehistory.record(session, user_id, changes, task_id=task_id, run_id=run_id)
    return record


async def on_report(sessions: async_sessionmaker[AsyncSession], msg: Any) -> None:
    """Record one background process's changes (acked when written; redelivered if the database
    is down; dropped when undecodable; recorded once however often it is delivered)."""
    try:
        rep = decode(msg.data, FileChangesReport)
        validate_user_id(rep.user_id)
    except (BusDecodeError, PathRejected) as exc:
        log.warning("bad file changes report", extra={"error": str(exc)})
        await msg.term()
        return
    changes = _changes(rep.changes if isinstance(rep.changes, list) else [], rep.run_id)
    try:
        async with sessions() as session, session.begin():
            task = await session.get(Task, rep.task_id[:32]) if rep.task_id else None
            ours = task is not None and task.user_id == rep.user_id  # never attributed to another user's task
            task_id = task.task_id if ours else None
            run_id = (rep.run_id[:64] or None) if ours else None
            # keyed by the proc id: a redelivery (written, then no ack) writes nothing the second time
            await filehistory.record(session, rep.user_id, changes, task_id=task_id, run_id=run_id,
                                     report_id=rep.proc_id[:64] or None)
    except Exception:
        log.warning("could not record a background process's file changes", extra={"proc_id": rep.proc_id},
                    exc_info=True)
        await msg.nak(delay=2.0)
        return
    if rep.more:
        log.info("background file changes past the cap", extra={"proc_id": rep.proc_id, "more": rep.more})
    await msg.ack()


async def count(sessions: async_sessionmaker[AsyncSession], run_id: str) -> int:
    """Distinct paths the run changed (0 when the database cannot say: the done event still goes out)."""
    try:
        async with read_session(sessions) as session:
            return int(await session.scalar(
                select(func.count(distinct(DataEvent.path))).where(DataEvent.run_id == run_id)) or 0)
    except Exception:
        log.warning("could not count the run's changed files", extra={"run_id": run_id}, exc_info=True)
        return 0
