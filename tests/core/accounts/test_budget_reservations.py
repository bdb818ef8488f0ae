"""zcbot_core.accounts.budgets against the real PostgreSQL: concurrent reservations of one user are
serialized by the lock on the user's row, so together they never pass the limit."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from tests.helpers.db import db_exec, db_rows
from zcbot_core.accounts import budgets
from zcbot_core.db.engine import make_engine, make_sessionmaker


@pytest.mark.parametrize(("now", "day_reset", "month_reset"), [
    (datetime(2026, 12, 31, 23, 59, tzinfo=timezone.utc), datetime(2027, 1, 1, tzinfo=timezone.utc),
     datetime(2027, 1, 1, tzinfo=timezone.utc)),
    (datetime(2026, 2, 10, 8, tzinfo=timezone.utc), datetime(2026, 2, 11, tzinfo=timezone.utc),
     datetime(2026, 3, 1, tzinfo=timezone.utc)),
])
def test_periods_reset_at_the_next_utc_day_and_month(now: datetime, day_reset: datetime,
                                                     month_reset: datetime) -> None:
    p = budgets.periods(now)
    assert p["daily"][1] == day_reset and p["monthly"][1] == month_reset


def test_the_prompt_estimate_is_never_under_a_chinese_or_english_prompt() -> None:
    for text in ("请帮我写一份关于市场的报告" * 50, "please write a market report " * 50):
        estimate = budgets.estimate_prompt_tokens([{"role": "user", "content": text}])
        assert estimate >= len(text) // 3 if text.isascii() else estimate >= len(text)


async def test_concurrent_reservations_cannot_pass_the_limit(db_url: str) -> None:
    db_exec(db_url, "insert into users (user_id, budget_daily_usd) values ('u1', 1.0)")
    engine = make_engine(db_url, pool_size=10)
    sessions = make_sessionmaker(engine)
    amount = Decimal("0.3")

    async def one() -> int | None:
        async with sessions() as session:
            try:
                return await budgets.reserve(session, user_id="u1", run_id="r", amount=amount,
                                             defaults=budgets.Defaults())
            except budgets.BudgetExceeded as exc:
                assert exc.period == "daily" and exc.code == "budget_exceeded" and exc.http_status == 429
                return None

    try:
        async with asyncio.timeout(20):
            held = await asyncio.gather(*(one() for _ in range(10)))
        assert sum(h is not None for h in held) == 3  # 3 x 0.3 <= 1.0 < 4 x 0.3
        assert float(db_rows(db_url, "select sum(amount) from budget_reservations")[0][0]) == pytest.approx(0.9)
        async with sessions() as session:
            for h in held:
                await budgets.release(session, h)
            status = await budgets.budget_status(session, "u1", budgets.Defaults())
        assert status["daily"] == {**status["daily"], "limit_usd": 1.0, "spent_usd": 0.0}
        assert status["monthly"]["limit_usd"] is None  # no default, no own limit
    finally:
        await engine.dispose()


async def test_any_limit_reads_the_users_own_limits_unless_a_default_is_set(db_url: str) -> None:
    """Before each LLM call the runner asks `any_limit` first: a user without any limit then costs
    one autocommit read, no locked transaction and no reservation (issue 43)."""
    db_exec(db_url, "insert into users (user_id) values ('none')")
    db_exec(db_url, "insert into users (user_id, budget_daily_usd, budget_monthly_usd) values ('zero', 0, 0)")
    db_exec(db_url, "insert into users (user_id, budget_monthly_usd) values ('monthly', 5.0)")
    engine = make_engine(db_url, pool_size=2)
    reads = engine.execution_options(isolation_level="AUTOCOMMIT")
    try:
        found = {u: await budgets.any_limit(reads, u, budgets.Defaults()) for u in ("none", "zero", "monthly", "gone")}
        assert found == {"none": False, "zero": False, "monthly": True, "gone": False}
        assert await budgets.any_limit(reads, "none", budgets.Defaults(daily=Decimal("1")))
    finally:
        await engine.dispose()
