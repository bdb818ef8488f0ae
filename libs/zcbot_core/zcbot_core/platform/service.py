"""The lifecycle every zcbot service shares.

signal -> stop pulling -> finish or hand back in-flight work -> drain -> exit. The runtime owns
the NATS connection, the DB engine, a small HTTP server for /healthz, /readyz and /metrics, and
JSON logs. A service implements `ServiceImpl` and is wired with `run_service`.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Protocol

from fastapi import FastAPI, Response
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from zcbot_core.bus import Topology
from zcbot_core.bus.topology import connect
from zcbot_core.bus.topology_setup import prepare_topology, stream_limits
from zcbot_core.db.engine import acquire_engine, make_sessionmaker, release_engine
from zcbot_core.platform.config import ConfigError, Settings
from zcbot_core.platform.logs import setup_logging

log = logging.getLogger(__name__)


class Runtime:
    """What a running service is given: its settings and live connections. A service opened without
    the database (the executor) has none: `engine`/`sessions`/`autocommit` raise ConfigError there, so a
    service that needs it says so in one way (`require_db` at start-up) and its code needs no guards."""

    def __init__(self, *, name: str, settings: Settings, topo: Topology, nc: NATS, js: JetStreamContext,
                 engine: AsyncEngine | None, sessions: async_sessionmaker[AsyncSession] | None) -> None:
        self.name = name
        self.settings = settings
        self.topo = topo
        self.nc = nc
        self.js = js
        self.stopping = asyncio.Event()
        # Set once the service's start() has finished: /readyz answers 503 before (`zcbot up` says
        # "up" only when every service can take work, not when its HTTP port answers).
        self.started = asyncio.Event()
        self._engine = engine
        self._sessions = sessions
        self._autocommit: AsyncEngine | None = None

    @property
    def has_db(self) -> bool:
        return self._engine is not None and self._sessions is not None

    def require_db(self) -> None:
        """Called by a service that cannot work without the database, at start-up."""
        if not self.has_db:
            raise self._no_db()

    def _no_db(self) -> ConfigError:
        return ConfigError(f"the {self.name} service needs the database (ZCBOT_DB_URL)")

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise self._no_db()
        return self._engine

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]:
        if self._sessions is None:
            raise self._no_db()
        return self._sessions

    @property
    def autocommit(self) -> AsyncEngine:
        """The same pool in autocommit mode, for single statements (reads and writes alike): no
        BEGIN/COMMIT round trips."""
        if self._autocommit is None:
            self._autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        return self._autocommit

    async def ready(self) -> dict[str, bool]:
        checks = {"nats": self.nc.is_connected}
        if self._engine is not None:
            try:
                async with self._engine.connect() as conn:
                    await asyncio.wait_for(conn.execute(text("select 1")), 2.0)
                checks["db"] = True
            except Exception:
                checks["db"] = False
        return checks


class ServiceImpl(Protocol):
    async def start(self, rt: Runtime) -> None: ...

    async def drain(self) -> None:
        """Stop taking work, finish or hand back what is in flight (bounded by the grace period)."""


def health_routes(app: FastAPI, get_runtime: Callable[[], Runtime | None], instance: str) -> None:
    """Mount /healthz, /readyz and /metrics on `app` (the gateway's own app or a bare one).
    `instance`: the id `zcbot up` gave this process (`ZCBOT_INSTANCE_ID`); it tells its own
    services from another program answering on the same port."""

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "instance": instance}

    @app.get("/readyz", include_in_schema=False)
    async def readyz(response: Response) -> dict[str, object]:
        rt = get_runtime()
        if rt is None:
            response.status_code = 503
            return {"ready": False, "checks": {}, "instance": instance}
        checks = await rt.ready()
        checks["started"] = rt.started.is_set()
        ok = all(checks.values()) and not rt.stopping.is_set()
        if not ok:
            response.status_code = 503
        return {"ready": ok, "checks": checks, "draining": rt.stopping.is_set(), "instance": instance}

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


async def open_runtime(name: str, settings: Settings, use_db: bool = True) -> Runtime:
    db_url, nats_url = settings.require_urls()
    nc = await connect(nats_url, f"zcbot-{name}", user=settings.zcbot_nats_user,
                       password=settings.zcbot_nats_password,
                       ca_file=str(settings.zcbot_nats_ca) if settings.zcbot_nats_ca else None)
    js = nc.jetstream()
    topo = Topology(settings.zcbot_bus_prefix)
    # With its own identity a service only checks the topology the setup step declared (issue 36).
    await prepare_topology(js, topo, stream_limits(settings), identity=settings.zcbot_nats_user)
    engine = acquire_engine(db_url, settings.zcbot_db_pool_size, settings.zcbot_db_max_overflow,
                         settings.zcbot_db_ping_idle_seconds) if use_db else None
    sessions = make_sessionmaker(engine) if engine is not None else None
    return Runtime(name=name, settings=settings, topo=topo, nc=nc, js=js, engine=engine, sessions=sessions)


async def close_runtime(rt: Runtime) -> None:
    try:
        await asyncio.wait_for(rt.nc.drain(), 5.0)
    except Exception:
        await rt.nc.close()
    if rt.has_db:
        await release_engine(rt.engine)


class HttpServeError(Exception):
    """uvicorn could not serve (it exits the process when it cannot bind its port): `code` is the
    exit code it asked for."""

    def __init__(self, where: str, code: int) -> None:
        super().__init__(f"could not serve HTTP on {where}")
        self.code = code


async def serve_http(app: FastAPI, host: str, port: int, lifespan: str = "off") -> tuple["asyncio.Task[None]", object]:
    """Serve `app` in a task of its own; the task fails with `HttpServeError`, never `SystemExit`
    (which, raised in a task, would end the event loop and every service it runs)."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, lifespan=lifespan,
                            timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]

    async def serve() -> None:
        try:
            await server.serve()
        except SystemExit as exc:
            raise HttpServeError(f"{host}:{port}", exc.code if isinstance(exc.code, int) else 1) from None

    task = asyncio.create_task(serve())
    return task, server


async def _until_serving(task: "asyncio.Task[None]", server: object) -> None:
    """Wait until `server` listens; else exit with uvicorn's code (3 for a port taken), as the
    service's process would have (`zcbot up` restarts the service)."""
    while not getattr(server, "started", False):
        if task.done():
            try:
                task.result()
            except HttpServeError as exc:
                log.error("%s; the service exits", exc)
                raise SystemExit(exc.code) from None
            log.error("the HTTP server stopped before it started; the service exits")
            raise SystemExit(3)
        await asyncio.sleep(0.01)


async def run_service(
    name: str,
    settings: Settings,
    impl_factory: Callable[[], ServiceImpl],
    port: int,
    use_db: bool = True,
    extra_app: Callable[[FastAPI, Runtime], Awaitable[None] | None] | None = None,
    needs_secrets: bool = True,
    stop: asyncio.Event | None = None,
) -> None:
    """Run a non-HTTP service until SIGTERM/SIGINT, then drain within the grace period.
    `needs_secrets=False`: a service that never signs or checks a token (the executor) starts
    without JWT_SECRET/PLATFORM_KEY, so they need not be in its environment at all.
    `stop`: hosted in a process that runs several services (`zcbot up`): that process owns the
    signals and the logging; the service stops when `stop` is set.
    A health port it cannot bind ends it with uvicorn's exit code (`SystemExit`), its connections closed."""
    if stop is None:
        setup_logging(name, settings.zcbot_log_level)
    if needs_secrets:
        settings.require_secrets()
    from zcbot_core.llm.profiles import check_profiles

    check_profiles(settings)  # an invalid model profile file: refuse to start, naming file, line and key
    rt = await open_runtime(name, settings, use_db=use_db)
    http_task: asyncio.Task[None] | None = None
    server: object = None
    relay: asyncio.Task[None] | None = None
    started = False
    try:
        app = FastAPI(title=f"zcbot {name}", docs_url=None, redoc_url=None, openapi_url=None)
        health_routes(app, lambda: rt, settings.zcbot_instance_id)
        if extra_app is not None:
            maybe = extra_app(app, rt)
            if asyncio.iscoroutine(maybe):
                await maybe
        http_task, server = await serve_http(app, settings.zcbot_http_host, port)
        if stop is None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, rt.stopping.set)
        relay = asyncio.create_task(_relay_stop(stop, rt.stopping)) if stop is not None else None
        await _until_serving(http_task, server)
        impl = impl_factory()
        await impl.start(rt)
        started = True
        settle_heap()
        rt.started.set()
        log.info("service started", extra={"port": port})
        await rt.stopping.wait()
        log.info("draining")
        await impl.drain()
    finally:
        # Also after a failed start: a hosted service is restarted in the same process, so its
        # port and connections must be free again.
        if http_task is not None:
            server.should_exit = True  # type: ignore[attr-defined]
            await asyncio.wait({http_task})
            failure = None if http_task.cancelled() else http_task.exception()
            if failure is not None and not isinstance(failure, HttpServeError):  # that one `_until_serving` said
                log.error("the HTTP server failed", exc_info=failure)
        await close_runtime(rt)
        if relay is not None:
            relay.cancel()
        log.info("stopped" if started else "stopped after a failed start")


async def _relay_stop(stop: asyncio.Event, stopping: asyncio.Event) -> None:
    await stop.wait()
    stopping.set()


GC_THRESHOLDS = (50_000, 20, 100)
_OWN_PROCESS = {"heap": False}


def own_process_heap() -> None:
    """Called by a service's process entry point: `settle_heap` then tunes this process's GC.
    (Services started in-process, as the tests do, leave the host process's GC alone.)"""
    _OWN_PROCESS["heap"] = True


def settle_heap() -> None:
    """Once started: move everything allocated so far (modules, config, pools) out of the cyclic
    GC's reach, and collect the young generation less often and the old one rarely. With Python's
    defaults a gateway holding 1000 SSE streams paused 70-135 ms in full collections that found
    nothing to free (one late event for every subscriber at once); with these, young collections
    pause <10 ms and no full one ran in the fan-out benchmark (docs/performance.md)."""
    if not _OWN_PROCESS["heap"]:
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def install_uvloop() -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # non-Linux dev machines
        pass


def main_entry(coro_factory: Callable[[], Awaitable[None]]) -> None:
    install_uvloop()
    own_process_heap()
    asyncio.run(coro_factory())
    # Drained and closed: exit now. The interpreter's teardown of a service's heap took seconds of
    # CPU per process on a busy machine, most of `zcbot up --separate`'s stop budget (issue 34).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
