"""Claiming a delivered run: one statement that takes the run and returns the task's window (and
whether its user has an active channel binding), then the soft reset when it applies (DESIGN §4).

The statements are built once with bind parameters: building SQLAlchemy expressions per call (and
the ORM's bulk-UPDATE path) cost more CPU than the queries themselves (a claim took 3.3 ms of
which ~2 ms was Python; docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from datetime import datetime

from sqlalchemy import bindparam, case, func, literal_column, select, update
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.ext.asyncio import AsyncEngine

from zcbot_core.agent.context import window
from zcbot_core.agent.fold import meta_of, plan_reset
from zcbot_core.bus import RunRequest
from zcbot_core.channels.bindings import ACTIVE as ACTIVE_BINDING
from zcbot_core.db.models import ChannelBinding, Message, Task
from zcbot_core.runs import ACTIVE_STATUSES, now

_tasks = Task.__table__
_messages = Message.__table__
_bindings = ChannelBinding.__table__

# One statement, run in autocommit (no BEGIN/COMMIT round trips): a conditional UPDATE claims the
# run (a cancel requested before the claim keeps `cancelling`; no row: a stale or duplicate delivery
# of a finished run) and the same statement returns the task's window as one JSON array.
_claimed = (
    update(_tasks)
    .where(_tasks.c.task_id == bindparam("claim_task"), _tasks.c.run_id == bindparam("claim_run"),
           _tasks.c.run_status.in_(ACTIVE_STATUSES))
    .values(run_status=case((_tasks.c.run_status == "cancelling", "cancelling"), else_="running"),
            run_owner=bindparam("claim_owner"), run_started_at=func.coalesce(_tasks.c.run_started_at, func.now()))
    .returning(*_tasks.c)
    .cte("claimed")
)
_window_json = (
    select(func.coalesce(
        func.json_agg(aggregate_order_by(
            func.json_build_array(_messages.c.idx, _messages.c.kind, _messages.c.payload, _messages.c.created_at),
            _messages.c.idx)),
        literal_column("'[]'::json")))
    .where(_messages.c.task_id == _claimed.c.task_id, _messages.c.idx >= _claimed.c.context_base_idx)
    .scalar_subquery()
)
# Whether the user has an active channel binding at all (most users: none, and then the run's host
# tools need no query of their own to decide on `wechat_push`).
_binding_active = (
    select(_bindings.c.id)
    .where(_bindings.c.user_id == _claimed.c.user_id, _bindings.c.status == ACTIVE_BINDING)
    .exists()
)
_CLAIM = select(_claimed, _window_json.label("window_rows"), _binding_active.label("user_has_active_binding"))
# Applied only when the soft reset moves the window, fenced by the claim just made.
_RESET = (
    update(_tasks)
    .where(_tasks.c.task_id == bindparam("reset_task"), _tasks.c.run_id == bindparam("reset_run"),
           _tasks.c.run_owner == bindparam("reset_owner"))
    .values(context_base_idx=bindparam("reset_base"), context_summary=bindparam("reset_summary"))
)


@dataclass
class Claim:
    task: Any  # the claimed tasks row (read-only attribute access, like the ORM object)
    history: list[dict[str, Any]]
    cancelling: bool


async def claim_run(autocommit: AsyncEngine, req: RunRequest, owner: str) -> Claim | None:
    """`autocommit`: the pool in autocommit mode (`Runtime.autocommit`)."""
    async with autocommit.connect() as conn:
        task = (await conn.execute(
            _CLAIM, {"claim_task": req.task_id, "claim_run": req.run_id, "claim_owner": owner})).first()
        if task is None:
            return None
        base, summary = int(task.context_base_idx or 0), task.context_summary
        rows = [(int(idx), kind, payload, datetime.fromisoformat(created))
                for idx, kind, payload, created in task.window_rows]
        # The soft reset (a long gap, "/new") is decided on the window the claim returned.
        reset = plan_reset([meta_of(*r) for r in rows], now(), base_idx=base)
        if reset is not None:
            base = reset.base_idx
            summary = None if reset.clear_summary else summary
            await conn.execute(_RESET, {"reset_task": req.task_id, "reset_run": req.run_id, "reset_owner": owner,
                                        "reset_base": base, "reset_summary": summary})
            rows = [r for r in rows if r[0] >= base]
    history = window([(idx, kind, payload) for idx, kind, payload, _ in rows], base, summary)
    return Claim(task=task, history=history, cancelling=task.run_status == "cancelling")
