"""The runner runs a run's first statements once at start-up (issue 28): the first run's claim and budget
read then find them compiled, and the warm-up changes nothing (a queued run stays queued, unowned)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.engine.default import CACHE_HIT, CACHE_MISS

from zcbot_core.db.models import Task, User
from zcbot_core.platform.config import Settings
from zcbot_core.platform.service import Runtime, close_runtime, open_runtime
from zcbot_core.runstate import sql
from zcbot_runner.service import _warm_statements


async def _cache(rt: Runtime) -> tuple[Any, Any]:
    """Whether the claim and the budget limits read (`budgets.limits`, locking) were compiled already."""
    async with rt.autocommit.connect() as conn:
        claim = await conn.execute(sql.CLAIM, {"claim_task": "t-none", "claim_run": "r-none", "claim_owner": "x"})
    async with rt.sessions() as session:
        limits = await session.execute(select(User.budget_daily_usd, User.budget_monthly_usd)
                                       .where(User.user_id == "u-none").with_for_update())
        await session.rollback()
    return claim.context.cache_hit, limits.raw.context.cache_hit


async def test_the_first_run_finds_its_statements_compiled_and_nothing_changed(settings: Settings) -> None:
    cold = await open_runtime("runner", settings)
    try:
        assert await _cache(cold) == (CACHE_MISS, CACHE_MISS)  # a fresh engine compiles on first use
    finally:
        await close_runtime(cold)
    rt = await open_runtime("runner", settings)
    try:
        async with rt.sessions() as s:  # a queued run the warm-up must leave alone
            for row in (User(user_id="warm-claimer"), Task(task_id="t-warm", user_id="warm-claimer", name="t",
                                                           working_dir="t", run_status="queued", run_id="r-1")):
                s.add(row)
                await s.commit()
        await _warm_statements(rt)
        assert await _cache(rt) == (CACHE_HIT, CACHE_HIT)
        async with rt.sessions() as s:
            row = (await s.execute(select(Task.run_status, Task.run_owner).where(Task.task_id == "t-warm"))).one()
        assert (row.run_status, row.run_owner) == ("queued", None)
    finally:
        await close_runtime(rt)
