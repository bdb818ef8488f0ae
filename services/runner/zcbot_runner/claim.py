"""Claiming a delivered run: one transaction that takes the task row, loads its window and applies
the soft reset (DESIGN §4).

The statements are built once with bind parameters: building SQLAlchemy expressions per call (and
the ORM's bulk-UPDATE path) cost more CPU than the queries themselves (a claim took 3.3 ms of
which ~2 ms was Python; docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, case, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core.agent.context import window
from zcbot_core.agent.fold import meta_of, plan_reset
from zcbot_core.bus import RunRequest
from zcbot_core.db.models import Message, Task
from zcbot_core.runs import ACTIVE_STATUSES, now

_tasks = Task.__table__
_messages = Message.__table__

# A conditional UPDATE takes the row lock and claims the run; a cancel requested before the claim
# keeps `cancelling`. No row: a stale or duplicate delivery of a finished run.
_CLAIM = (
    update(_tasks)
    .where(_tasks.c.task_id == bindparam("claim_task"), _tasks.c.run_id == bindparam("claim_run"),
           _tasks.c.run_status.in_(ACTIVE_STATUSES))
    .values(run_status=case((_tasks.c.run_status == "cancelling", "cancelling"), else_="running"),
            run_owner=bindparam("claim_owner"), run_started_at=func.coalesce(_tasks.c.run_started_at, func.now()))
    .returning(*_tasks.c)
)
_WINDOW = (
    select(_messages.c.idx, _messages.c.kind, _messages.c.payload, _messages.c.created_at)
    .where(_messages.c.task_id == bindparam("window_task"), _messages.c.idx >= bindparam("window_base"))
    .order_by(_messages.c.idx)
)


@dataclass
class Claim:
    task: Any  # the claimed tasks row (read-only attribute access, like the ORM object)
    history: list[dict[str, Any]]
    cancelling: bool


async def claim_run(sessions: async_sessionmaker[AsyncSession], req: RunRequest, owner: str) -> Claim | None:
    async with sessions() as session, session.begin():
        task = (await session.execute(
            _CLAIM, {"claim_task": req.task_id, "claim_run": req.run_id, "claim_owner": owner})).first()
        if task is None:
            return None
        base, summary = int(task.context_base_idx or 0), task.context_summary
        rows = (await session.execute(_WINDOW, {"window_task": task.task_id, "window_base": base})).all()
        # The soft reset (a long gap, "/new") is decided on this same locked row and window.
        reset = plan_reset([meta_of(*r) for r in rows], now(), base_idx=base)
        if reset is not None:
            base = reset.base_idx
            summary = None if reset.clear_summary else summary
            await session.execute(update(_tasks).where(_tasks.c.task_id == task.task_id)
                                  .values(context_base_idx=base, context_summary=summary))
            rows = [r for r in rows if r.idx >= base]
        history = window([(r.idx, r.kind, r.payload) for r in rows], base, summary)
        return Claim(task=task, history=history, cancelling=task.run_status == "cancelling")
