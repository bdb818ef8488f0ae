"""The runner's side of the data_events log (issue 29): the executor reports what a tool call did
to the user's files (`meta["file_changes"]`); this records them with the run's user, task and run
through `filehistory.record` (the one writer), and counts them for the `done` event."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import distinct, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core import filehistory
from zcbot_core.db.models import DataEvent

log = logging.getLogger(__name__)


def recorder(sessions: async_sessionmaker[AsyncSession], user_id: str, task_id: str,
             run_id: str) -> Callable[[list[dict[str, Any]]], Awaitable[None]]:
    async def record(raw: list[dict[str, Any]]) -> None:
        changes = []
        for item in raw:
            try:
                changes.append(filehistory.Change.from_dict(item))
            except (KeyError, TypeError, ValueError):
                log.warning("malformed file change from the executor", extra={"run_id": run_id})
        if changes:
            async with sessions() as session, session.begin():
                await filehistory.record(session, user_id, changes, task_id=task_id, run_id=run_id)
    return record


async def count(sessions: async_sessionmaker[AsyncSession], run_id: str) -> int:
    """Distinct paths the run changed (0 when the database cannot say: the done event still goes out)."""
    try:
        async with sessions() as session:
            return int(await session.scalar(
                select(func.count(distinct(DataEvent.path))).where(DataEvent.run_id == run_id)) or 0)
    except Exception:
        log.warning("could not count the run's changed files", extra={"run_id": run_id}, exc_info=True)
        return 0
