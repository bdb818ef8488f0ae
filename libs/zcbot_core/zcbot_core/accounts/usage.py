"""Usage and cost: the one writer of `usage_events` rows and the aggregate queries over them.

Every LLM call is one `usage_events` row (`units`: prompt_tokens, completion_tokens, cached_tokens;
`cost` in USD from the profile's pricing, else LiteLLM's local cost map — `llm.client.compute_cost`)
and is added to the task's running totals (`tasks.tokens_in/out/cached`, `cost_usd`) in the same
transaction, so the two always agree. `kind` tells chat steps (`chat`) from context folds (`fold`),
image questions (`vision`) and the host tools' own rows (`web_search`, `web_fetch`: `record_tool_usage`).

The aggregates return plain dicts (JSON-ready: ints and floats) for the admin routes, the CLI and
tests. `since`/`until` bound `created_at` (`since` inclusive, `until` exclusive); `None` = unbounded.
Days are UTC calendar days.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, Date, Integer, Numeric, bindparam, cast, func, insert, select, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from zcbot_core.db.models import Task, UsageEvent

UNIT_KEYS = ("prompt_tokens", "completion_tokens", "cached_tokens")


def to_cost(cost_usd: float | Decimal) -> Decimal:
    """USD as stored (Numeric(14, 6))."""
    return cost_usd if isinstance(cost_usd, Decimal) else Decimal(str(round(float(cost_usd), 6)))


_INSERT_USAGE = insert(UsageEvent.__table__).values(  # built once: one is written per LLM call
    user_id=bindparam("usage_user"), task_id=bindparam("usage_task"), run_id=bindparam("usage_run"),
    kind=bindparam("usage_kind"), model_profile=bindparam("usage_profile"), units=bindparam("usage_units", type_=JSONB),
    cost=bindparam("usage_cost", type_=Numeric(14, 6)),
)


_tasks = Task.__table__
# A task's running totals plus one call's usage (bind parameters from `totals_params`): written by
# `record_usage` and, inside its fence statement, by the runner's step store.
TASK_TOTALS_DELTA: dict[str, Any] = {
    "tokens_in": _tasks.c.tokens_in + bindparam("add_in", type_=Integer),
    "tokens_out": _tasks.c.tokens_out + bindparam("add_out", type_=Integer),
    "tokens_cached": _tasks.c.tokens_cached + bindparam("add_cached", type_=Integer),
    "cost_usd": _tasks.c.cost_usd + bindparam("add_cost", type_=Numeric(14, 6)),
}
_ADD_TO_TOTALS = update(_tasks).where(_tasks.c.task_id == bindparam("totals_task")).values(**TASK_TOTALS_DELTA)


def totals_params(prompt_tokens: int, completion_tokens: int, cached_tokens: int, cost: Decimal) -> dict[str, Any]:
    return {"add_in": int(prompt_tokens), "add_out": int(completion_tokens), "add_cached": int(cached_tokens),
            "add_cost": cost}


async def insert_usage_event(session: AsyncSession, *, user_id: str, task_id: str | None, run_id: str | None,
                             model_profile: str | None, prompt_tokens: int, completion_tokens: int,
                             cached_tokens: int, cost: Decimal, kind: str = "chat") -> None:
    """The usage event row alone, for a caller that adds the task's totals in its own statement."""
    await session.execute(_INSERT_USAGE, {
        "usage_task": task_id, "usage_run": run_id,
        **usage_event_params(user_id=user_id, model_profile=model_profile, prompt_tokens=prompt_tokens,
                             completion_tokens=completion_tokens, cached_tokens=cached_tokens, cost=cost, kind=kind),
    })


def usage_event_params(*, user_id: str, model_profile: str | None, prompt_tokens: int, completion_tokens: int,
                       cached_tokens: int, cost: Decimal, kind: str = "chat") -> dict[str, Any]:
    """A usage event's bind parameters besides its task and run (`_INSERT_USAGE`, the runner's step)."""
    return {"usage_user": user_id, "usage_kind": kind, "usage_profile": model_profile, "usage_cost": cost,
            "usage_units": {"prompt_tokens": int(prompt_tokens), "completion_tokens": int(completion_tokens),
                            "cached_tokens": int(cached_tokens)}}


async def record_usage(session: AsyncSession, *, user_id: str, task_id: str | None, run_id: str | None,
                       model_profile: str | None, prompt_tokens: int, completion_tokens: int, cached_tokens: int,
                       cost_usd: float | Decimal, kind: str = "chat") -> Decimal:
    """Insert one usage event and add it to the task's totals (inside the caller's transaction)."""
    cost = to_cost(cost_usd)
    await insert_usage_event(session, user_id=user_id, task_id=task_id, run_id=run_id, model_profile=model_profile,
                             prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                             cached_tokens=cached_tokens, cost=cost, kind=kind)
    if task_id is not None:
        await session.execute(_ADD_TO_TOTALS, {"totals_task": task_id,
                                               **totals_params(prompt_tokens, completion_tokens, cached_tokens, cost)})
    return cost


async def record_tool_usage(session: AsyncSession, *, user_id: str, task_id: str | None, run_id: str | None,
                            kind: str, units: dict[str, int], cost_usd: float | Decimal = 0) -> Decimal:
    """A host tool's usage event (`web_search`: {"requests": 1}, `web_fetch`: {"bytes": n}), its cost
    added to the task's totals (no tokens), inside the caller's transaction."""
    cost = to_cost(cost_usd)
    await session.execute(_INSERT_USAGE, {"usage_user": user_id, "usage_task": task_id, "usage_run": run_id,
                                          "usage_kind": kind, "usage_profile": None, "usage_units": units,
                                          "usage_cost": cost})
    if task_id is not None and cost:
        await session.execute(_ADD_TO_TOTALS, {"totals_task": task_id, **totals_params(0, 0, 0, cost)})
    return cost


# ---- aggregates ------------------------------------------------------------------------------

def _unit(key: str) -> ColumnElement[Any]:
    return func.coalesce(func.sum(cast(UsageEvent.units[key].astext, BigInteger)), 0)


def _measures() -> list[ColumnElement[Any]]:
    return [
        func.count(UsageEvent.id).label("calls"),
        *(_unit(k).label(k) for k in UNIT_KEYS),
        func.coalesce(func.sum(UsageEvent.cost), 0).label("cost_usd"),
    ]


def _row_dict(row: Any) -> dict[str, Any]:
    out = {"calls": int(row.calls or 0)}
    for key in UNIT_KEYS:
        out[key] = int(getattr(row, key) or 0)
    out["cost_usd"] = round(float(row.cost_usd or 0), 6)
    return out


def _bounded(stmt: Any, since: datetime | None, until: datetime | None, user_id: str | None = None,
             task_id: str | None = None) -> Any:
    if since is not None:
        stmt = stmt.where(UsageEvent.created_at >= since)
    if until is not None:
        stmt = stmt.where(UsageEvent.created_at < until)
    if user_id is not None:
        stmt = stmt.where(UsageEvent.user_id == user_id)
    if task_id is not None:
        stmt = stmt.where(UsageEvent.task_id == task_id)
    return stmt


async def usage_totals(session: AsyncSession, since: datetime | None = None, until: datetime | None = None, *,
                       user_id: str | None = None, task_id: str | None = None) -> dict[str, Any]:
    """`{calls, prompt_tokens, completion_tokens, cached_tokens, cost_usd}` over the range."""
    row = (await session.execute(_bounded(select(*_measures()), since, until, user_id, task_id))).one()
    return _row_dict(row)


async def usage_by_model(session: AsyncSession, since: datetime | None = None, until: datetime | None = None, *,
                         user_id: str | None = None) -> list[dict[str, Any]]:
    """One dict per model profile (`model_profile` may be None for unattributed rows), costliest first."""
    stmt = _bounded(select(UsageEvent.model_profile, *_measures()), since, until, user_id)
    rows = (await session.execute(stmt.group_by(UsageEvent.model_profile))).all()
    out = [{"model_profile": r.model_profile, **_row_dict(r)} for r in rows]
    return sorted(out, key=lambda d: (-d["cost_usd"], -d["calls"], d["model_profile"] or ""))


async def usage_by_user(session: AsyncSession, since: datetime | None = None, until: datetime | None = None, *,
                        limit: int | None = None) -> list[dict[str, Any]]:
    """One dict per user (`user_id`), costliest first; `limit` keeps the top N."""
    stmt = _bounded(select(UsageEvent.user_id, *_measures()), since, until)
    rows = (await session.execute(stmt.group_by(UsageEvent.user_id))).all()
    out = sorted(({"user_id": r.user_id, **_row_dict(r)} for r in rows),
                 key=lambda d: (-d["cost_usd"], -d["calls"], d["user_id"]))
    return out[:limit] if limit is not None else out


async def task_usage(session: AsyncSession, task_id: str) -> dict[str, Any]:
    """A task's totals from its usage events, next to the running totals on the task row.

    `consistent` is True when the two agree (they are written in one transaction).
    """
    events = await usage_totals(session, task_id=task_id)
    task = (await session.execute(
        select(Task.tokens_in, Task.tokens_out, Task.tokens_cached, Task.cost_usd).where(Task.task_id == task_id)
    )).one_or_none()
    row = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0, "cost_usd": 0.0}
    if task is not None:
        row = {"prompt_tokens": int(task.tokens_in or 0), "completion_tokens": int(task.tokens_out or 0),
               "cached_tokens": int(task.tokens_cached or 0), "cost_usd": round(float(task.cost_usd or 0), 6)}
    consistent = all(events[k] == row[k] for k in UNIT_KEYS) and abs(events["cost_usd"] - row["cost_usd"]) < 1e-6
    return {"task_id": task_id, **events, "task_row": row, "consistent": consistent}


def _utc_today(now: datetime | None) -> date:
    moment = now or datetime.now(timezone.utc)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).date()


async def daily_trend(session: AsyncSession, days: int = 30, *, user_id: str | None = None,
                      now: datetime | None = None) -> list[dict[str, Any]]:
    """One dict per UTC day for the last `days` days (today included), oldest first, zero-filled:
    `{day: "YYYY-MM-DD", calls, prompt_tokens, completion_tokens, cached_tokens, cost_usd}`."""
    days = max(int(days), 1)
    today = _utc_today(now)
    first = today - timedelta(days=days - 1)
    since = datetime(first.year, first.month, first.day, tzinfo=timezone.utc)
    day = cast(func.timezone("UTC", UsageEvent.created_at), Date).label("day")
    stmt = _bounded(select(day, *_measures()), since, None, user_id).group_by(day)
    found = {r.day: _row_dict(r) for r in (await session.execute(stmt)).all()}
    empty = {"calls": 0, **{k: 0 for k in UNIT_KEYS}, "cost_usd": 0.0}
    out = []
    for offset in range(days):
        current = first + timedelta(days=offset)
        out.append({"day": current.isoformat(), **found.get(current, empty)})
    return out
