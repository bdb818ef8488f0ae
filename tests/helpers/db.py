"""SQL against a test's database, for assertions that read what the services stored.

`db_rows`/`db_exec` are synchronous (SQLAlchemy, named parameters); `db_rows_async`/`db_exec_async`
run on psycopg in autocommit with positional `%s` parameters, for tests already inside an event loop."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from sqlalchemy import create_engine, text

from zcbot_core.db.engine import normalize_url


def _engine(url: str):  # type: ignore[no-untyped-def]
    return create_engine(normalize_url(url))


def db_rows(url: str, sql: str, **params: object) -> list[tuple[Any, ...]]:
    engine = _engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql), params)]
    finally:
        engine.dispose()


def db_exec(url: str, sql: str, **params: object) -> None:
    engine = _engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(sql), params)
    finally:
        engine.dispose()


def plain_pg_url(url: str) -> str:
    """SQLAlchemy URL -> libpq URL (`postgresql+psycopg://` -> `postgresql://`)."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme.split('+', 1)[0]}{sep}{rest}"


async def db_rows_async(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(plain_pg_url(url), autocommit=True) as conn:
        cur = await conn.execute(sql, params or None)  # type: ignore[arg-type]
        return [tuple(row) for row in await cur.fetchall()] if cur.description else []


async def db_exec_async(url: str, sql: str, *params: Any) -> None:
    async with await psycopg.AsyncConnection.connect(plain_pg_url(url), autocommit=True) as conn:
        await conn.execute(sql, params or None)  # type: ignore[arg-type]


# ---- what every fault (and the cluster test) must leave intact --------------------------


def task_status(url: str, task_id: str) -> tuple[str, str | None, str | None]:
    return db_rows(url, "select run_status, run_owner, run_error from tasks where task_id=:t", t=task_id)[0]  # type: ignore[return-value]


def roles(url: str, task_id: str) -> list[str]:
    return [r[0] for r in db_rows(url, "select payload->>'role' from messages where task_id=:t order by idx", t=task_id)]


def assert_consistent(url: str, tasks: list[str] | None = None) -> None:
    """The invariants after any fault, over every task of the database (or only `tasks`)."""
    only = "" if tasks is None else " and task_id = any(:tasks)"
    stuck = db_rows(url, "select task_id, run_status from tasks where run_status in "
                         "('waiting','queued','running','cancelling')" + only, tasks=tasks)
    assert not stuck, f"tasks left active: {stuck}"
    rows = db_rows(url, "select task_id, idx, kind, payload::text from messages where true" + only +
                        " order by task_id, idx", tasks=tasks)
    by_task: dict[str, list[tuple[int, str, dict[str, Any]]]] = {}
    for task_id, idx, kind, payload in rows:
        by_task.setdefault(task_id, []).append((idx, kind, json.loads(payload)))
    for task_id, msgs in by_task.items():
        assert [m[0] for m in msgs] == list(range(len(msgs))), f"idx not contiguous in {task_id}: {[m[0] for m in msgs]}"
        for (_, _, a), (_, _, b) in zip(msgs, msgs[1:]):
            assert a != b, f"duplicated message in {task_id}: {a}"
        answered: dict[str, int] = {}
        asked: list[str] = []
        for _, _, p in msgs:
            if p.get("role") == "tool":
                answered[p.get("tool_call_id")] = answered.get(p.get("tool_call_id"), 0) + 1
            for tc in p.get("tool_calls") or []:
                asked.append(tc["id"])
        assert len(asked) == len(set(asked)), f"tool call ids repeated in {task_id}: {asked}"
        assert all(n == 1 for n in answered.values()), f"tool call answered twice in {task_id}: {answered}"
        assert set(answered) == set(asked), f"unanswered/unknown tool calls in {task_id}: {asked} vs {answered}"


async def wait_for_lock_waiter(url: str, timeout: float = 10.0) -> None:
    """Until a session of this database waits for a lock (a statement blocked by another's row lock):
    the condition a test of lock ordering wants, instead of a sleep it hopes is long enough."""
    from tests.helpers.wait import wait_for

    async def waiting() -> bool:
        rows = await db_rows_async(url, "select count(*) from pg_stat_activity "
                                        "where datname = current_database() and wait_event_type = 'Lock'")
        return rows[0][0] > 0

    await wait_for(waiting, timeout=timeout, interval=0.02, what="a statement waiting for a lock")
