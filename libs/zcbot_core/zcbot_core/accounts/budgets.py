"""Per-user cost budgets (issue 26 item 8; seed §7.5's soft quota): the one home of their logic.

A user has a daily (UTC day) and a monthly (UTC calendar month) limit in USD: `users.budget_*_usd`,
null = the service default (`ZCBOT_USER_DAILY_BUDGET_USD` / `_MONTHLY_`), 0 = no limit.

Before each LLM call the caller reserves the call's worst case (`worst_case`: a prompt estimate
plus the profile's whole `max_output`, at the profile's prices) in `budget_reservations`, under a
lock on the user's row, so concurrent runs of one user see each other's calls in flight. Spent =
the period's `usage_events` (streamed calls included: their usage comes from the stream's final
chunk) + the live reservations. When spent + the new reservation would pass a limit the call is
refused (`BudgetExceeded`). After the call its usage event is written and the reservation deleted
(`release`): that is the reconciliation. A reservation left by a runner that died is ignored after
`STALE_AFTER` (a call never runs that long).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from zcbot_core.agent.lang import Lang
from zcbot_core.db.models import BudgetReservation, UsageEvent, User
from zcbot_core.errors import ZcbotError

STALE_AFTER = timedelta(hours=1)
_OWN_LIMITS = select(User.budget_daily_usd, User.budget_monthly_usd).where(User.user_id == bindparam("limits_user"))
PERIODS = ("daily", "monthly")

_TEXT: dict[Lang, str] = {
    "zh": "已达到{period}费用上限：已用 ${spent:.4f}，上限 ${limit:.4f}；将于 {resets} (UTC) 重置。",
    "en": "the {period} cost limit is reached: ${spent:.4f} used of ${limit:.4f}; it resets at {resets} UTC.",
}
_PERIOD_NAME: dict[Lang, dict[str, str]] = {"zh": {"daily": "每日", "monthly": "每月"},
                                            "en": {"daily": "daily", "monthly": "monthly"}}


class BudgetExceeded(ZcbotError):
    """A user's daily or monthly cost limit: the run ends with this error event; a new message gets 429."""

    code = "budget_exceeded"
    http_status = 429

    def __init__(self, period: str, limit: Decimal, spent: Decimal, resets_at: datetime, lang: Lang = "zh") -> None:
        self.period, self.limit, self.spent, self.resets_at = period, limit, spent, resets_at
        resets = resets_at.strftime("%Y-%m-%d %H:%M")
        super().__init__(_TEXT[lang].format(period=_PERIOD_NAME[lang][period], spent=float(spent),
                                            limit=float(limit), resets=resets))


@dataclass(frozen=True)
class Defaults:
    daily: Decimal = Decimal(0)
    monthly: Decimal = Decimal(0)

    @classmethod
    def from_settings(cls, settings: Any) -> "Defaults":
        return cls(Decimal(str(settings.zcbot_user_daily_budget_usd)),
                   Decimal(str(settings.zcbot_user_monthly_budget_usd)))


def periods(now: datetime) -> dict[str, tuple[datetime, datetime]]:
    """Each period's (start, reset) around `now` (UTC)."""
    now = now.astimezone(timezone.utc)
    day = datetime(now.year, now.month, now.day, tzinfo=timezone.utc)
    month = datetime(now.year, now.month, 1, tzinfo=timezone.utc)
    next_month = datetime(now.year + (now.month == 12), now.month % 12 + 1, 1, tzinfo=timezone.utc)
    return {"daily": (day, day + timedelta(days=1)), "monthly": (month, next_month)}


def estimate_prompt_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
    """Over, not under: UTF-8 bytes / 3 (a CJK character is 3 bytes and about one token; English
    runs ~4 characters a token), so the worst case never counts a prompt as cheaper than it is."""
    size = len(json.dumps(messages, ensure_ascii=False).encode())
    if tools:
        size += len(json.dumps(tools, ensure_ascii=False).encode())
    return size // 3 + 16


def worst_case(profile: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> Decimal:
    """The call's most expensive outcome: the whole prompt uncached plus the full `max_output`."""
    from zcbot_core.llm.client import Usage, compute_cost  # litellm is heavy: only where calls are made
    cost = compute_cost(profile, Usage(prompt_tokens=estimate_prompt_tokens(messages, tools),
                                       completion_tokens=profile.max_output))
    return Decimal(str(round(cost, 6)))


async def any_limit(reads: AsyncEngine, user_id: str, defaults: Defaults) -> bool:
    """Whether the user may have a limit (a default one, or their own): without a default, one
    statement on the autocommit pool (`reads`), no lock and no transaction. Before each LLM call a
    user without any limit then costs one read, not a locked transaction whose commit waits for the
    WAL's flush (issue 43); an admin setting a limit meanwhile counts from the next call."""
    if defaults.daily > 0 or defaults.monthly > 0:
        return True
    async with reads.connect() as conn:
        row = (await conn.execute(_OWN_LIMITS, {"limits_user": user_id})).one_or_none()
    return row is not None and any(row)


async def limits(session: AsyncSession, user_id: str, defaults: Defaults, *, lock: bool = False) -> dict[str, Decimal]:
    """`{daily, monthly}` for the user (0 = none); `lock` holds the user's row to the transaction's end."""
    stmt = select(User.budget_daily_usd, User.budget_monthly_usd).where(User.user_id == user_id)
    row = (await session.execute(stmt.with_for_update() if lock else stmt)).one_or_none()
    daily, monthly = (row if row is not None else (None, None))
    return {"daily": defaults.daily if daily is None else Decimal(daily),
            "monthly": defaults.monthly if monthly is None else Decimal(monthly)}


async def spent(session: AsyncSession, user_id: str, now: datetime) -> dict[str, Decimal]:
    """Each period's usage events plus the live reservations (reservations count in both periods)."""
    bounds = periods(now)
    out: dict[str, Decimal] = {}
    held = await session.scalar(select(func.coalesce(func.sum(BudgetReservation.amount), 0)).where(
        BudgetReservation.user_id == user_id, BudgetReservation.created_at >= now - STALE_AFTER))
    for period, (start, _reset) in bounds.items():
        used = await session.scalar(select(func.coalesce(func.sum(UsageEvent.cost), 0)).where(
            UsageEvent.user_id == user_id, UsageEvent.created_at >= start))
        out[period] = Decimal(used or 0) + Decimal(held or 0)
    return out


def _check(lims: dict[str, Decimal], used: dict[str, Decimal], extra: Decimal, now: datetime, lang: Lang,
           *, strict: bool) -> None:
    bounds = periods(now)
    for period in PERIODS:
        limit = lims[period]
        if limit <= 0:
            continue
        over = used[period] + extra > limit if strict else used[period] >= limit
        if over:
            raise BudgetExceeded(period, limit, used[period], bounds[period][1], lang)


async def reserve(session: AsyncSession, *, user_id: str, run_id: str | None, amount: Decimal, defaults: Defaults,
                  lang: Lang = "zh") -> int | None:
    """Hold `amount` for one call; None when the user has no limit. Raises BudgetExceeded. Commits in
    every case, so what the caller did in the same transaction (the runner drops its settled
    reservations) is kept even when the call is refused."""
    now = datetime.now(timezone.utc)
    lims = await limits(session, user_id, defaults, lock=True)  # serializes one user's reservations
    if all(v <= 0 for v in lims.values()):
        await session.commit()
        return None
    try:
        _check(lims, await spent(session, user_id, now), amount, now, lang, strict=True)
    except BudgetExceeded:
        await session.commit()
        raise
    reservation = await session.scalar(insert(BudgetReservation).values(
        user_id=user_id, run_id=run_id, amount=amount).returning(BudgetReservation.id))
    await session.commit()
    return int(reservation) if reservation is not None else None


async def release(session: AsyncSession, reservation_id: int | None) -> None:
    """The call's usage event is written: its reservation goes (commits)."""
    if reservation_id is None:
        return
    await session.execute(delete(BudgetReservation).where(BudgetReservation.id == reservation_id))
    await session.commit()


async def check_open(session: AsyncSession, user_id: str, defaults: Defaults, lang: Lang = "zh",
                     floor: Decimal = Decimal(0)) -> None:
    """A new message: refused (BudgetExceeded, 429) when what is left of a limit cannot pay even the
    cheapest call (`floor`: the task's profile's full output, `min_call_cost`): its run would only
    end at its first call with the same error."""
    now = datetime.now(timezone.utc)
    lims = await limits(session, user_id, defaults)
    if all(v <= 0 for v in lims.values()):
        return
    _check(lims, await spent(session, user_id, now), floor, now, lang, strict=floor > 0)


def min_call_cost(profile: Any) -> Decimal:
    """The least any call of the profile reserves: its `max_output` at its prices (0 without prices
    of its own: LiteLLM's cost map stays out of the gateway)."""
    if profile.pricing is None:
        return Decimal(0)
    return Decimal(str(round(profile.pricing.cost(0, profile.max_output), 6)))


async def check_new_message(session: AsyncSession, settings: Any, *, user_id: str, task_id: str, lang: Lang) -> None:
    """`check_open` for a message to a task, with the floor of the task's model profile."""
    from zcbot_core.db.models import Task
    from zcbot_core.llm.profiles import get_profile
    from zcbot_core.platform.config import ConfigError

    defaults = Defaults.from_settings(settings)
    if defaults.daily <= 0 and defaults.monthly <= 0:
        row = (await session.execute(select(User.budget_daily_usd, User.budget_monthly_usd)
                                     .where(User.user_id == user_id))).one_or_none()
        if row is None or not any(row):  # no limit at all: one query, nothing more
            return
    name = await session.scalar(select(Task.model_profile).where(Task.task_id == task_id, Task.user_id == user_id))
    try:
        floor = min_call_cost(get_profile(settings, name or settings.zcbot_default_model))
    except ConfigError:  # an unknown profile fails the run with its own clear error
        floor = Decimal(0)
    await check_open(session, user_id, defaults, lang, floor)


async def budget_status(session: AsyncSession, user_id: str, defaults: Defaults) -> dict[str, Any]:
    """What the user sees (`GET /v1/me/usage`): per period its limit (null = none), spent, reset."""
    now = datetime.now(timezone.utc)
    lims = await limits(session, user_id, defaults)
    used = await spent(session, user_id, now)
    bounds = periods(now)
    return {period: {"limit_usd": float(lims[period]) if lims[period] > 0 else None,
                     "spent_usd": round(float(used[period]), 6),
                     "resets_at": bounds[period][1].isoformat()} for period in PERIODS}
