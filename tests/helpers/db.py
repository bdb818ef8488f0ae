"""SQL against a test's database, for assertions that read what the services stored.

`db_rows`/`db_exec` are synchronous (SQLAlchemy, named parameters); `db_rows_async`/`db_exec_async`
run on psycopg in autocommit with positional `%s` parameters, for tests already inside an event loop."""

from __future__ import annotations

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
