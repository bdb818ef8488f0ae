"""The pool pings a connection before use only when it sat idle (zcbot_core.db.engine.ping_when_idle)."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from zcbot_core.db.engine import make_engine


async def _cut_pooled_connection(engine) -> None:  # type: ignore[no-untyped-def]
    """Use one connection, return it to the pool, then kill its server process from outside (as a
    PostgreSQL restart or a proxy's idle timeout would)."""
    async with engine.connect() as conn:
        pid = (await conn.execute(text("select pg_backend_pid()"))).scalar_one()
    killer = make_engine(str(engine.url.render_as_string(hide_password=False)), pool_size=1, max_overflow=0)
    try:
        async with killer.connect() as conn:
            assert (await conn.execute(text("select pg_terminate_backend(:pid)"), {"pid": pid})).scalar_one()
    finally:
        await killer.dispose()


@pytest.mark.parametrize("idle_seconds", [0.0, 0.05])
async def test_an_idle_dead_connection_is_pinged_and_replaced(db_url: str, idle_seconds: float) -> None:
    engine = make_engine(db_url, pool_size=1, max_overflow=0, ping_idle_seconds=idle_seconds)
    try:
        await _cut_pooled_connection(engine)
        await asyncio.sleep(idle_seconds * 2)
        async with engine.connect() as conn:  # the ping finds it dead: a new connection, no error
            assert (await conn.execute(text("select 1"))).scalar_one() == 1
    finally:
        await engine.dispose()


async def test_a_connection_used_a_moment_ago_is_not_pinged_and_a_disconnect_renews_the_pool(db_url: str) -> None:
    engine = make_engine(db_url, pool_size=1, max_overflow=0, ping_idle_seconds=3600)
    try:
        await _cut_pooled_connection(engine)
        # Not pinged (it was in use a moment ago): the query itself meets the dead connection ...
        with pytest.raises(DBAPIError) as failed:
            async with engine.connect() as conn:
                await conn.execute(text("select 1"))
        assert failed.value.connection_invalidated
        # ... and the pool was renewed: the next use works.
        async with engine.connect() as conn:
            assert (await conn.execute(text("select 1"))).scalar_one() == 1
    finally:
        await engine.dispose()
