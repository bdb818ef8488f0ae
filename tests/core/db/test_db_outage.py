"""The one outage rule (zcbot_core.db.outage.is_db_outage), on real failures of a real PostgreSQL: what
the gateway answers with 503 and the runner leaves for redelivery, and what stays the query's fault."""

from __future__ import annotations

import asyncio
import socket

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from zcbot_core.db.engine import make_engine, normalize_url
from zcbot_core.db.outage import is_db_outage


async def _raised(engine: AsyncEngine, statement: str) -> BaseException:
    with pytest.raises(Exception) as caught:
        async with engine.connect() as conn:
            await conn.execute(text(statement))
    return caught.value


def _dead_url() -> str:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://postgres@127.0.0.1:{port}/nope?connect_timeout=2"


async def test_unreachable_cut_and_exhausted_are_outages_and_query_faults_are_not(db_url: str) -> None:
    dead = make_engine(_dead_url(), pool_size=1, max_overflow=0)
    engine = make_engine(db_url, pool_size=1, max_overflow=0, ping_idle_seconds=3600)
    killer = make_engine(db_url, pool_size=1, max_overflow=0)
    small = create_async_engine(normalize_url(db_url), pool_size=1, max_overflow=0, pool_timeout=0.2)
    try:
        assert is_db_outage(await _raised(dead, "select 1"))  # nothing listens: connect fails
        for statement in ("select * from no_such_table", "select 1/0", "select 'x'::int", "select (",
                          "create temp table t (id int primary key); insert into t values (1), (1)"):
            exc = await _raised(engine, statement)
            assert not is_db_outage(exc), (statement, exc)
        async with engine.connect() as conn:  # the server ends the connection mid-session
            pid = (await conn.execute(text("select pg_backend_pid()"))).scalar_one()
            async with killer.connect() as other:
                await other.execute(text("select pg_terminate_backend(:pid)"), {"pid": pid})
            with pytest.raises(Exception) as cut:
                await conn.execute(text("select 1"))
        assert is_db_outage(cut.value), cut.value
        async with small.connect():  # every connection of the pool in use: the pool's own timeout
            exhausted = await asyncio.wait_for(_raised(small, "select 1"), 5)
        assert is_db_outage(exhausted), exhausted
    finally:
        for each in (dead, engine, killer, small):
            await each.dispose()
