"""The run's first LLM call takes the user's limits from the claim (issue 43): without a limit of any
kind it reads nothing before the call; a later call, or a user with a limit, reads as before."""

from __future__ import annotations

from decimal import Decimal

import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker

from zcbot_core.accounts import budgets
from zcbot_core.bus import RunRequest
from zcbot_core.db.engine import make_engine, make_sessionmaker
from zcbot_core.db.models import Task, User
from zcbot_core.llm.profiles import Profile
from zcbot_core.platform.service import Runtime
from zcbot_core.runstate.claim import claim_run
from zcbot_devstack.embedded import free_port
from zcbot_runner.budget import RunBudget

PROFILE = Profile(name="p", model="openai/fake-model", max_context=8000, reliable_context=4000, max_output=100)
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(("daily", "monthly", "own"), [(None, None, False), (0, 0, False), (1.5, None, True),
                                                       (None, 2, True)])
async def test_the_claim_says_whether_the_user_has_a_limit_of_their_own(rt: Runtime, daily: float | None,
                                                                        monthly: float | None, own: bool) -> None:
    async with rt.sessions() as s, s.begin():
        s.add(User(user_id="spender", budget_daily_usd=daily, budget_monthly_usd=monthly))
        await s.flush()
        s.add(Task(task_id="t-spend", user_id="spender", name="t", working_dir="w", run_status="queued", run_id="r-1"))
    claim = await claim_run(rt.autocommit, RunRequest(run_id="r-1", task_id="t-spend", user_id="spender",
                                                      enqueued_at=0.0), "me")
    assert claim is not None and claim.task.user_has_own_limit is own


async def test_a_primed_first_call_reads_nothing_and_the_next_one_reads() -> None:
    """Its database is unreachable: the primed call must not touch it, the next one must try."""
    engine = make_engine(f"postgresql://nobody:x@127.0.0.1:{free_port()}/none", pool_size=1, max_overflow=0)
    sessions: async_sessionmaker = make_sessionmaker(engine)  # type: ignore[type-arg]
    try:
        budget = RunBudget(sessions, user_id="u", run_id="r", defaults=budgets.Defaults())
        budget.prime(user_has_own_limit=False)
        assert await budget.reserve(PROFILE, MESSAGES, None, "en") is None
        with pytest.raises(Exception, match="(?i)connect"):
            await budget.reserve(PROFILE, MESSAGES, None, "en")
        for own, defaults in ((True, budgets.Defaults()), (False, budgets.Defaults(daily=Decimal("1")))):
            limited = RunBudget(sessions, user_id="u", run_id="r", defaults=defaults)
            limited.prime(user_has_own_limit=own)  # a limit of some kind: the first call reads too
            with pytest.raises(Exception, match="(?i)connect"):
                await limited.reserve(PROFILE, MESSAGES, None, "en")
    finally:
        await engine.dispose()
