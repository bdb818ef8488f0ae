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


async def test_hosted_services_share_one_engine_disposed_by_the_last_of_them(db_url: str) -> None:
    """`share_engines` (zcbot up hosting its services in one process, issue 43): one pool per URL and
    pool settings; a service giving its engine back closes nothing while another still holds it."""
    from zcbot_core.db import engine as db_engine

    assert db_engine._shared is None  # a test process shares nothing unless told
    try:
        db_engine.share_engines()
        gateway = db_engine.acquire_engine(db_url, 3, 0)
        runner = db_engine.acquire_engine(db_url, 3, 0)
        other = db_engine.acquire_engine(db_url, 2, 0)
        assert gateway is runner and other is not gateway
        async with gateway.connect() as conn:
            assert (await conn.execute(text("select 1"))).scalar_one() == 1
        await db_engine.release_engine(gateway)
        assert gateway.pool.checkedin() == 1  # the runner's pool is still open
        async with runner.connect() as conn:
            assert (await conn.execute(text("select 2"))).scalar_one() == 2
        await db_engine.release_engine(runner)
        await db_engine.release_engine(other)
        assert gateway.pool.checkedin() == 0 and db_engine._shared == {}
        fresh = db_engine.acquire_engine(db_url, 3, 0)  # a restarted service gets a new one
        assert fresh is not gateway
        await db_engine.release_engine(fresh)
    finally:
        db_engine._shared = None


async def test_without_sharing_each_service_gets_its_own_engine(db_url: str) -> None:
    from zcbot_core.db import engine as db_engine

    first, second = db_engine.acquire_engine(db_url, 1, 0), db_engine.acquire_engine(db_url, 1, 0)
    try:
        assert first is not second
    finally:
        await db_engine.release_engine(first)
        await db_engine.release_engine(second)
