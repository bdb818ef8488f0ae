"""The claim: a runner takes a delivered run (queued -> running; `cancelling` stays) in one statement
that also returns the task's window and whether its user has an active channel binding
(`sql.CLAIM`), then applies the soft reset when it moves the window (`sql.SOFT_RESET`). No row: a
stale or duplicate delivery of a run that is over (the caller acks it).

The statements are built once with bind parameters: building SQLAlchemy expressions per call (and
the ORM's bulk-UPDATE path) cost more CPU than the queries themselves (a claim took 3.3 ms of
which ~2 ms was Python; docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from zcbot_core.agent.context import window
from zcbot_core.agent.fold import meta_of, plan_reset
from zcbot_core.bus import RunRequest
from zcbot_core.runstate import sql
from zcbot_core.runstate.status import RunOutcome, RunStatus
from zcbot_core.runstate.transitions import now


@dataclass
class Claim:
    task: Any  # the claimed tasks row (read-only attribute access, like the ORM object)
    history: list[dict[str, Any]]
    cancelling: bool
    prior_owner: str | None = None  # another runner's id: this claim took the run over from it


async def claim_run(autocommit: AsyncEngine, req: RunRequest, owner: str) -> Claim | None:
    """`autocommit`: the pool in autocommit mode (`Runtime.autocommit`)."""
    async with autocommit.connect() as conn:
        task = (await conn.execute(
            sql.CLAIM, {"claim_task": req.task_id, "claim_run": req.run_id, "claim_owner": owner})).first()
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
            await conn.execute(sql.SOFT_RESET, {"reset_task": req.task_id, "reset_run": req.run_id,
                                                "reset_owner": owner, "reset_base": base, "reset_summary": summary})
            rows = [r for r in rows if r[0] >= base]
    history = window([(idx, kind, payload) for idx, kind, payload, _ in rows], base, summary)
    return Claim(task=task, history=history, cancelling=task.run_status == RunStatus.CANCELLING,
                 prior_owner=task.prior_owner)


async def ended_outcome(autocommit: AsyncEngine, task_id: str, run_id: str) -> str:
    """How a run that is over ended (`RunOutcome`), read from what it left when nothing recorded it:
    `error` while its task still holds it so, `cancelled` or `stopped` when its last message is the
    loop's cancel notice or stop, else `ok`."""
    async with autocommit.connect() as conn:
        row = (await conn.execute(sql.ENDED_RUN, {"ended_task": task_id, "ended_run": run_id})).first()
    if row is not None and row.errored:
        return RunOutcome.ERROR.value
    last_kind = row.last_kind if row is not None else None
    return {"cancelled": RunOutcome.CANCELLED.value, "guard": RunOutcome.STOPPED.value}.get(last_kind or "",
                                                                                         RunOutcome.OK.value)
