"""Async engine/session factory. URLs may be given as postgresql:// and are mapped to psycopg 3."""

from __future__ import annotations

import time
import weakref
from typing import Any

from sqlalchemy import event, exc
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

# A connection used this recently is not pinged before its next use (docs/decisions.md).
DEFAULT_PING_IDLE_SECONDS = 1.0


def normalize_url(url: str) -> str:
    for prefix in ("postgresql://", "postgres://", "postgresql+asyncpg://", "postgresql+psycopg2://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def make_engine(url: str, pool_size: int = 30, max_overflow: int = 20,
                ping_idle_seconds: float = DEFAULT_PING_IDLE_SECONDS) -> AsyncEngine:
    engine = create_async_engine(
        normalize_url(url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_timeout=30,
    )
    ping_when_idle(engine.sync_engine, ping_idle_seconds)
    return engine


# Engines handed out to the services one process hosts (`share_engines`), by URL and pool settings:
# [engine, services holding it]. None: every `acquire_engine` makes its own (a service per process).
_shared: dict[tuple[str, int, int, float], list[Any]] | None = None


def share_engines() -> None:
    """From now on, services asking for the same database with the same pool settings share one
    engine and pool (`zcbot up` hosting its services in one process, docs/decisions.md): one pool
    sized for the process keeps its connections open under load, where a small pool per service
    opened and closed its overflow connections every few statements (issue 43)."""
    global _shared
    if _shared is None:
        _shared = {}


def acquire_engine(url: str, pool_size: int = 30, max_overflow: int = 20,
                   ping_idle_seconds: float = DEFAULT_PING_IDLE_SECONDS) -> AsyncEngine:
    """`make_engine`, or the shared one after `share_engines`; give it back with `release_engine`."""
    if _shared is None:
        return make_engine(url, pool_size, max_overflow, ping_idle_seconds)
    key = (url, pool_size, max_overflow, ping_idle_seconds)
    entry = _shared.get(key)
    if entry is None:
        entry = _shared[key] = [make_engine(url, pool_size, max_overflow, ping_idle_seconds), 0]
    entry[1] += 1
    engine: AsyncEngine = entry[0]
    return engine


async def release_engine(engine: AsyncEngine) -> None:
    """A service is done with its engine: disposed when no other service shares it."""
    if _shared is not None:
        for key, entry in list(_shared.items()):
            if entry[0] is engine:
                entry[1] -= 1
                if entry[1] > 0:
                    return
                del _shared[key]
    await engine.dispose()


def ping_when_idle(engine: Engine, idle_seconds: float) -> None:
    """Pre-ping, but only a connection that sat in the pool for `idle_seconds` or more.

    `pool_pre_ping` pays a round trip on every checkout (several per request or run step). A pooled
    connection that was in use a moment ago is alive or was cut by an outage that the request
    using it meets anyway; when a query fails with a disconnect, SQLAlchemy invalidates every
    connection of the pool opened before it, so the next checkouts reconnect. An idle one (a
    PostgreSQL restart or a proxy's idle timeout while nobody was looking) is pinged first, as
    `pool_pre_ping` would, and replaced, with the rest of the pool, when the ping finds it dead.
    """

    @event.listens_for(engine, "checkin")
    def _mark_idle(dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.pop("idle_since", None)
        if since is None or time.monotonic() - since < idle_seconds:
            return  # a new connection, or one in use a moment ago
        dialect = engine.dialect
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as err:
            if dialect.is_disconnect(err, dbapi_connection, None):
                raise exc.InvalidatePoolError() from err  # the pool reconnects and retries the checkout
            raise


def make_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


_AUTOCOMMIT: "weakref.WeakKeyDictionary[async_sessionmaker[AsyncSession], AsyncEngine]" = weakref.WeakKeyDictionary()


def autocommit(sessions: async_sessionmaker[AsyncSession]) -> AsyncEngine:
    """The sessions' pool in autocommit mode, for one-statement work: no BEGIN/COMMIT round trips
    (`Runtime.autocommit` is the same for code that holds the runtime)."""
    found = _AUTOCOMMIT.get(sessions)
    if found is None:
        bind: AsyncEngine = sessions.kw["bind"]
        found = _AUTOCOMMIT[sessions] = bind.execution_options(isolation_level="AUTOCOMMIT")
    return found


def read_session(sessions: async_sessionmaker[AsyncSession]) -> AsyncSession:
    """A session on the autocommit pool, for reads that need no transaction: each statement is one
    round trip, without the BEGIN before it and the ROLLBACK when the session closes."""
    return sessions(bind=autocommit(sessions))
