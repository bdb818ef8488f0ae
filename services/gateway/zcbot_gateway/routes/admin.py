"""Admin endpoints (seed 003 §7.2): `require_admin` (role read from the DB per request).

- `GET /v1/admin/overview`: `{runtime: {version, started_at, uptime_seconds, runs: {<run_status>: n}},
  tasks: {total, active, deleted}, users: {total, admins}, usage: {tokens_in, tokens_out, tokens_cached,
  tokens, cost_usd, events, runs}, trend_7d: [{date, tokens_in, tokens_out, tokens, cost_usd, runs}]}`.
  `uptime` is this gateway process's; `runs` counts live tasks by `run_status` now; the trend has one
  row per UTC day (oldest first, today last, zero days included) and counts runs as distinct
  `run_id`s that recorded usage that day.
- `GET /v1/admin/usage/models` and `/usage/users`: `usage_events` aggregated by `model_profile` /
  `user_id`, `?range=all|7d|30d&sort=cost|tokens&page=&page_size=` -> `{page, page_size, count,
  results}` (descending; ties by the other measure, then the key). Bad range/sort -> 400.
- `GET /v1/admin/storage/users?page=&page_size=`: bytes (apparent size), files and folders per user
  root, walked through `zcbot_core.safe_fs` in a worker thread (symlinks never followed), within
  `STORAGE_SCAN_SECONDS` (users not fully walked are `partial: true`); sorted by bytes.

Tokens come from `usage_events.units` (`prompt_tokens`, `completion_tokens`, `cached_tokens`, as the
runner writes them); a missing or non-numeric unit counts as 0. Cost is `usage_events.cost` (USD).
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy import Numeric, case, distinct, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from zcbot_core import __version__, safe_fs
from zcbot_core.db.models import Task, UsageEvent, User
from zcbot_core.runstate import RunStatus
from zcbot_core.safe_fs import paths
from zcbot_gateway.deps import AdminUser, SessionDep, SettingsDep
from zcbot_gateway.http import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, Paging, PagingDep, invalid_query
from zcbot_gateway.schemas import iso

router = APIRouter(prefix="/v1/admin", tags=["admin"])

STARTED_AT = datetime.now(UTC)
_STARTED_MONO = time.monotonic()
RUN_STATUSES = tuple(status.value for status in RunStatus)
RANGES = {"all": None, "7d": 7, "30d": 30}
SORTS = ("cost", "tokens")
STORAGE_SCAN_SECONDS = 5.0
TREND_DAYS = 7


def _unit(key: str) -> Any:
    value = UsageEvent.units[key]
    return case((func.jsonb_typeof(value) == "number", value.astext.cast(Numeric)), else_=0)


TOKENS_IN = func.coalesce(func.sum(_unit("prompt_tokens")), 0)
TOKENS_OUT = func.coalesce(func.sum(_unit("completion_tokens")), 0)
TOKENS_CACHED = func.coalesce(func.sum(_unit("cached_tokens")), 0)
COST = func.coalesce(func.sum(UsageEvent.cost), 0)


def _usage_columns() -> list[Any]:
    return [TOKENS_IN.label("tokens_in"), TOKENS_OUT.label("tokens_out"), TOKENS_CACHED.label("tokens_cached"),
            COST.label("cost"), func.count().label("events"), func.count(distinct(UsageEvent.run_id)).label("runs")]


def _usage_json(row: Any) -> dict[str, Any]:
    tokens_in, tokens_out = int(row.tokens_in), int(row.tokens_out)
    return {"tokens_in": tokens_in, "tokens_out": tokens_out, "tokens_cached": int(row.tokens_cached),
            "tokens": tokens_in + tokens_out, "cost_usd": round(float(row.cost), 6),
            "events": int(row.events), "runs": int(row.runs)}


def _since(range_: str) -> datetime | None:
    if range_ not in RANGES:
        raise invalid_query("range", zh=f"须为以下之一：{'、'.join(RANGES)}", en=f"must be one of {', '.join(RANGES)}")
    days = RANGES[range_]
    return None if days is None else datetime.now(UTC) - timedelta(days=days)


AdminPaging = PagingDep(DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
Range = Annotated[str, Query(alias="range", max_length=8, description="all | 7d | 30d")]
Sort = Annotated[str, Query(max_length=8, description="cost | tokens (descending)")]


# ---- overview --------------------------------------------------------------------------------


async def _trend(session: AsyncSession) -> list[dict[str, Any]]:
    today = datetime.now(UTC).date()
    first = today - timedelta(days=TREND_DAYS - 1)
    day = func.date(func.timezone("UTC", UsageEvent.created_at))
    stmt = (select(day.label("day"), *_usage_columns())
            .where(UsageEvent.created_at >= datetime(first.year, first.month, first.day, tzinfo=UTC))
            .group_by(day))
    by_day: dict[date, dict[str, Any]] = {row.day: _usage_json(row) for row in (await session.execute(stmt)).all()}
    out = []
    for offset in range(TREND_DAYS):
        d = first + timedelta(days=offset)
        usage = by_day.get(d) or {"tokens_in": 0, "tokens_out": 0, "tokens": 0, "cost_usd": 0.0, "runs": 0}
        out.append({"date": d.isoformat(), "tokens_in": usage["tokens_in"], "tokens_out": usage["tokens_out"],
                    "tokens": usage["tokens"], "cost_usd": usage["cost_usd"], "runs": usage["runs"]})
    return out


@router.get("/overview")
async def overview(admin: AdminUser, session: SessionDep) -> dict[str, Any]:
    """Fixed metrics for the admin page (cheap enough to poll)."""
    runs = dict.fromkeys(RUN_STATUSES, 0)
    rows = await session.execute(
        select(Task.run_status, func.count()).where(Task.deleted_at.is_(None)).group_by(Task.run_status))
    for run_status, n in rows.all():
        runs[run_status] = int(n)
    tasks = (await session.execute(select(
        func.count().filter(Task.deleted_at.is_(None)),
        func.count().filter(Task.deleted_at.is_(None), Task.status == "active"),
        func.count().filter(Task.deleted_at.is_not(None)),
    ))).one()
    users = (await session.execute(select(func.count(), func.count().filter(User.role == "admin")))).one()
    usage = (await session.execute(select(*_usage_columns()))).one()
    return {
        "runtime": {"version": __version__, "started_at": iso(STARTED_AT),
                    "uptime_seconds": round(time.monotonic() - _STARTED_MONO, 1), "runs": runs},
        "tasks": {"total": int(tasks[0]), "active": int(tasks[1]), "deleted": int(tasks[2])},
        "users": {"total": int(users[0]), "admins": int(users[1])},
        "usage": _usage_json(usage),
        "trend_7d": await _trend(session),
    }


# ---- usage tables ----------------------------------------------------------------------------


async def _usage_table(session: AsyncSession, key: Any, range_: str, sort: str,
                       paging: Paging) -> tuple[int, list[Any]]:
    """(the number of rows, rows of `key` + usage columns of one page)."""
    since = _since(range_)
    if sort not in SORTS:
        raise invalid_query("sort", zh=f"须为以下之一：{'、'.join(SORTS)}", en=f"must be one of {', '.join(SORTS)}")
    stmt = select(key.label("key"), *_usage_columns()).group_by(key)
    if since is not None:
        stmt = stmt.where(UsageEvent.created_at >= since)
    count = await session.scalar(select(func.count()).select_from(stmt.subquery())) or 0
    tokens = TOKENS_IN + TOKENS_OUT
    order = [COST.desc(), tokens.desc()] if sort == "cost" else [tokens.desc(), COST.desc()]
    stmt = stmt.order_by(*order, key.asc().nulls_last()).offset(paging.offset).limit(paging.page_size)
    return count, list((await session.execute(stmt)).all())


@router.get("/usage/models")
async def usage_by_model(admin: AdminUser, session: SessionDep, paging: AdminPaging, range_: Range = "all",
                         sort: Sort = "cost") -> dict[str, Any]:
    """Usage per model profile (list envelope, plus `range` and `sort`)."""
    count, rows = await _usage_table(session, UsageEvent.model_profile, range_, sort, paging)
    return paging.envelope([{"model_profile": row.key, **_usage_json(row)} for row in rows], count,
                           range=range_, sort=sort)


@router.get("/usage/users")
async def usage_by_user(admin: AdminUser, session: SessionDep, paging: AdminPaging, range_: Range = "all",
                        sort: Sort = "cost") -> dict[str, Any]:
    """Usage per user (with the user's email and name when the user still exists; list envelope,
    plus `range` and `sort`)."""
    count, rows = await _usage_table(session, UsageEvent.user_id, range_, sort, paging)
    ids = [row.key for row in rows]
    people = {u.user_id: u for u in (await session.scalars(select(User).where(User.user_id.in_(ids)))).all()} if ids else {}
    results = []
    for row in rows:
        person = people.get(row.key)
        results.append({"user_id": row.key, "email": person.email if person else None,
                        "name": person.name if person else None, **_usage_json(row)})
    return paging.envelope(results, count, range=range_, sort=sort)


# ---- storage ---------------------------------------------------------------------------------


def _walk(top: Path, deadline: float) -> dict[str, Any]:
    """Sizes under one user root, folder by folder through `safe_fs` (each listed beneath the root's
    fd, symlinks never entered, so a folder swapped for a link cannot make it count host files)."""
    stats: dict[str, Any] = {"bytes": 0, "files": 0, "dirs": 0, "partial": False}
    try:
        root = safe_fs.Root.open(top)
    except paths.PathRejected:
        return stats
    with root:
        stack = [""]
        seen = 0
        while stack:
            folder = stack.pop()
            try:
                entries = root.listdir(folder)
            except paths.PathRejected:
                continue
            for name, st in entries:
                seen += 1
                if seen % 1000 == 0 and time.monotonic() > deadline:
                    stats["partial"] = True
                    return stats
                if stat.S_ISDIR(st.st_mode):
                    stats["dirs"] += 1
                    stack.append(f"{folder}/{name}" if folder else name)
                elif stat.S_ISREG(st.st_mode):
                    stats["files"] += 1
                    stats["bytes"] += st.st_size
            if stack and time.monotonic() > deadline:
                stats["partial"] = True
                return stats
    return stats


def scan_storage(storage_root: Path, budget: float) -> tuple[dict[str, dict[str, Any]], float]:
    """Per user root (named by a valid user id) -> stats; returns (stats, seconds spent)."""
    started = time.monotonic()
    deadline = started + budget
    out: dict[str, dict[str, Any]] = {}
    try:
        roots = sorted((e for e in os.scandir(storage_root) if e.is_dir(follow_symlinks=False)), key=lambda e: e.name)
    except OSError:
        return out, 0.0
    for entry in roots:
        try:
            paths.validate_user_id(entry.name)
        except paths.PathRejected:
            continue
        if time.monotonic() > deadline:
            out[entry.name] = {"bytes": 0, "files": 0, "dirs": 0, "partial": True}
            continue
        out[entry.name] = _walk(storage_root / entry.name, deadline)
    return out, time.monotonic() - started


@router.get("/storage/users")
async def storage_by_user(admin: AdminUser, session: SessionDep, settings: SettingsDep,
                          paging: AdminPaging) -> dict[str, Any]:
    """Disk usage of every user root (largest first; list envelope, plus the totals)."""
    people = {u.user_id: u for u in (await session.scalars(select(User))).all()}
    await session.close()
    scanned, spent = await asyncio.to_thread(scan_storage, settings.storage_root, STORAGE_SCAN_SECONDS)
    empty = {"bytes": 0, "files": 0, "dirs": 0, "partial": False}
    rows = []
    for user_id in set(people) | set(scanned):
        person = people.get(user_id)
        rows.append({"user_id": user_id, "email": person.email if person else None,
                     "name": person.name if person else None, **scanned.get(user_id, empty)})
    rows.sort(key=lambda r: (-r["bytes"], r["user_id"]))
    return paging.slice(
        rows, total_bytes=sum(r["bytes"] for r in rows), total_files=sum(r["files"] for r in rows),
        partial=any(r["partial"] for r in rows), elapsed_ms=round(spent * 1000, 1),
    )
