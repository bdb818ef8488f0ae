"""Shared fixtures: a real NATS and a real PostgreSQL for every test session (DESIGN §9).

Session scope
- `nats_server_url`: `ZCBOT_TEST_NATS_URL`, else an embedded nats-server (JetStream) in a temp dir.
- `pg_admin_url`: `ZCBOT_TEST_DB_URL` (its user must be allowed to CREATE DATABASE), else an
  embedded PostgreSQL (fsync off) in a temp dir.
- `template_db`: name of a database migrated to head once; per-test databases are copies of it.

Function scope
- `db_url`: a fresh database (`CREATE DATABASE ... TEMPLATE template_db`, made ahead by a background
  thread: `database_pool`, session scope), dropped afterwards.
- `bus_prefix`: a unique bus prefix (`t` + 8 hex) so tests sharing the NATS server never see each
  other's subjects/streams; its streams and KV buckets are deleted afterwards.
- `settings_env`: env vars for a service or `Settings` under test (URLs, prefix, dirs, secrets,
  free ports); `settings`: a `Settings` built from them (applied with monkeypatch.setenv).
- `start_service`: factory starting real services (`python -m zcbot_devstack.cli NAME`) with
  `settings_env` (+ overrides); all are stopped at teardown. See `helpers.procs.ServiceProcess`.
- `module_settings_env` (module scope): the same environment shared by one module's tests.
- `os_tmp_dir`: a temp dir outside pytest's private (0700) tree, for data that the embedded
  PostgreSQL's OS user must reach when tests run as root.
"""

from __future__ import annotations

import asyncio
import os
import queue
import secrets
import shutil
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
sys.path.insert(0, str(Path(__file__).parent))  # `import helpers.procs` from any test directory

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from helpers.procs import ServiceProcess  # noqa: E402
from zcbot_core.bus import Topology  # noqa: E402
from zcbot_core.platform.config import Settings, get_settings  # noqa: E402
from zcbot_core.platform.service import Runtime  # noqa: E402
from zcbot_devstack.embedded import EmbeddedNats, EmbeddedPostgres, free_port  # noqa: E402
from zcbot_devstack.embedded.nats_auth import NatsCredentials  # noqa: E402
from zcbot_devstack.services import SERVICE_PORT_ENV  # noqa: E402
from zcbot_gateway import prebuild as route_prebuild  # noqa: E402

# In-process gateway apps build each router's routes on its first request, as FastAPI does by itself:
# the suite creates hundreds of apps, and building every route of each at creation cost ~200 ms an
# app (a minute or two of the run). The production path is tested in tests/gateway/test_route_prebuild.py.
route_prebuild.AT_CREATION = False

# An in-process runner's drain waits out its pending pull requests (one poll each: the run requests'
# and the file reports'), by design (a message the server sends meanwhile is naked, not stranded).
# A quarter of production's 1 s poll: ~1.5 s off each of the suite's many in-process stack teardowns.
from zcbot_runner import service as runner_service  # noqa: E402

runner_service.PULL_POLL_SECONDS = 0.25


def _test_files_under(paths: list[Path], limit: int) -> int:
    """How many test modules the given paths name (counting stops at `limit`)."""
    count = 0
    for path in paths:
        if path.is_dir():
            count += sum(1 for _ in zip(path.rglob("test_*.py"), range(limit - count)))
        elif path.suffix == ".py":
            count += 1
        if count >= limit:
            break
    return count


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): the default run spreads whole files (`--dist loadfile`, so a
    module's shared stack stays in one worker) over 3 workers — on 2 cores, because most of a test's
    time is spent waiting on a service, a timer or a sandbox, not computing. A run of a few files
    stays in one process (a worker costs seconds of imports). `ZCBOT_TEST_WORKERS` overrides (0: no
    workers). Each worker starts its own NATS and PostgreSQL (session fixtures)."""
    if "ZCBOT_TEST_WORKERS" in os.environ:
        return int(os.environ["ZCBOT_TEST_WORKERS"])
    here = config.invocation_params.dir
    paths = [here / str(arg).split("::", 1)[0] for arg in config.args] or [config.rootpath / "tests"]
    return 3 if _test_files_under(paths, limit=6) >= 6 else 0


# The slowest files and folders (the durations printed at the end of a run), handed to the workers
# first: a long file started last would run on alone after the others finished.
SLOW_FIRST = ("tests/browser/", "tests/skills/test_skills_deck", "tests/testing/test_fake_keepalive.py",
              "tests/core/runstate/", "tests/e2e/", "tests/devstack/", "tests/skills/", "tests/security/")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With workers (`--dist loadfile` hands out files in collection order), slow files go first."""
    if not getattr(config.option, "numprocesses", 0):
        return

    def rank(item: pytest.Item) -> int:
        path = Path(str(item.path)).relative_to(config.rootpath).as_posix()
        return next((i for i, prefix in enumerate(SLOW_FIRST) if path.startswith(prefix)), len(SLOW_FIRST))

    items.sort(key=rank)  # stable: the order inside each rank is unchanged


def _os_tmp(prefix: str) -> Path:
    """A private temp dir directly under the system temp dir (see `os_tmp_dir`)."""
    return Path(tempfile.mkdtemp(prefix=prefix))


def _with_database(url: str, name: str) -> str:
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def _admin_exec(admin_url: str, statement: sql.Composable) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(statement)


def run_coro_in_thread(factory: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run a coroutine to completion on a private loop in another thread.

    For sync fixture code that needs nats-py: it never touches the session event loop, whether or
    not a test's loop is running.
    """
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(factory())
        except BaseException as exc:  # re-raised in the caller
            result["error"] = exc

    thread = threading.Thread(target=target, name="fixture-async")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result.get("value")


# ---- servers (session) ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def nats_server_url() -> Iterator[str]:
    url = os.environ.get("ZCBOT_TEST_NATS_URL")
    if url:
        yield url
        return
    data = _os_tmp("zcbot-test-nats-")
    # Anonymous connections are refused here as in `zcbot up`; the tests connect as the admin (the
    # per-service identities are tested on their own server: tests/security/test_nats_access.py).
    creds = NatsCredentials.generate()
    config = creds.write_server_config(data / "auth.conf", None)
    server = EmbeddedNats(data, extra_args=["-c", str(config)]).start()
    try:
        yield creds.admin_url(server.url)
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    url = os.environ.get("ZCBOT_TEST_DB_URL")
    if url:
        yield url
        return
    data = _os_tmp("zcbot-test-pg-")
    server = EmbeddedPostgres(data / "pg", fast=True, options={"max_connections": "300"}).start()
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="session")
def template_db(pg_admin_url: str) -> Iterator[str]:
    """A database migrated to head once per session; `db_url` copies it per test."""
    from zcbot_core.db.migrate import upgrade

    name = f"zcbot_tpl_{secrets.token_hex(4)}"
    _admin_exec(pg_admin_url, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        upgrade(_with_database(pg_admin_url, name))
        yield name
    finally:
        _admin_exec(pg_admin_url, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


# ---- per test ------------------------------------------------------------------------------


class _DatabasePool:
    """Per-test databases copied from the template ahead of time by a background thread: a copy
    costs ~0.15 s of PostgreSQL's time (on its own core while the test process runs a test), paid by
    every test that asks for a database. Each is dropped as soon as its test ends (~0.05 s)."""

    def __init__(self, admin_url: str, template: str, ahead: int = 2) -> None:
        self.admin_url, self.template = admin_url, template
        self._ready: queue.Queue[str | BaseException] = queue.Queue()
        self._room = threading.Semaphore(ahead)  # ready databases not taken yet, at most `ahead`
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="test-db-pool", daemon=True)
        self._thread.start()

    def _drop(self, name: str) -> None:
        _admin_exec(self.admin_url, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def _work(self) -> None:
        while not self._stop.is_set():
            if not self._room.acquire(timeout=0.05):
                continue
            name = f"zcbot_t_{secrets.token_hex(5)}"
            try:
                _admin_exec(self.admin_url, sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(self.template)))
            except BaseException as exc:  # handed to the test that takes it
                self._ready.put(exc)
            else:
                self._ready.put(name)

    def take(self, timeout: float = 120.0) -> str:
        try:
            item = self._ready.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no test database was made within {timeout:g} s") from None
        self._room.release()
        if isinstance(item, BaseException):
            raise item
        return item

    def give_back(self, name: str) -> None:
        self._drop(name)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        while True:
            try:
                item = self._ready.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, str):
                self._drop(item)


@pytest.fixture(scope="session")
def database_pool(pg_admin_url: str, template_db: str) -> Iterator[_DatabasePool]:
    pool = _DatabasePool(pg_admin_url, template_db)
    try:
        yield pool
    finally:
        pool.close()


@contextmanager
def _fresh_database(pool: _DatabasePool) -> Iterator[str]:
    name = pool.take()
    try:
        yield _with_database(pool.admin_url, name)
    finally:
        pool.give_back(name)


@pytest.fixture
def db_url(database_pool: _DatabasePool) -> Iterator[str]:
    """URL of a fresh, migrated database of this test's own (dropped afterwards)."""
    with _fresh_database(database_pool) as url:
        yield url


async def _delete_bus_objects(nats_url: str, topo: Topology) -> None:
    import nats
    from nats.js.errors import NotFoundError

    nc = await nats.connect(nats_url, connect_timeout=5, max_reconnect_attempts=2)
    try:
        js = nc.jetstream()
        for stream in (topo.runs_stream, topo.events_stream, topo.channel_inbound_stream, topo.file_changes_stream):
            try:
                await js.delete_stream(stream)
            except NotFoundError:
                pass
        for bucket in topo.kv_buckets:
            try:
                await js.delete_key_value(bucket)
            except NotFoundError:
                pass
    finally:
        await nc.close()


@contextmanager
def _fresh_bus_prefix(nats_server_url: str) -> Iterator[str]:
    prefix = f"t{secrets.token_hex(4)}"
    yield prefix
    run_coro_in_thread(lambda: _delete_bus_objects(nats_server_url, Topology(prefix)))


@pytest.fixture
def bus_prefix(nats_server_url: str) -> Iterator[str]:
    """A unique bus prefix; `Topology(bus_prefix)` names this test's subjects, streams and buckets."""
    with _fresh_bus_prefix(nats_server_url) as prefix:
        yield prefix


@pytest.fixture(autouse=True)
def _process_globals_restored() -> Iterator[None]:
    """What hosting services in this process (`zcbot_devstack.hosted`, as `zcbot up` does) sets for
    the whole process — the GC's thresholds and frozen heap, the shared database pools — is put back
    after each test, so the next test in this worker starts as in a fresh one (with workers, any
    file may follow tests/devstack)."""
    import gc

    from zcbot_core.db import engine as db_engine
    from zcbot_core.platform import service as platform_service

    threshold, frozen = gc.get_threshold(), gc.get_freeze_count()
    own_heap, shared = dict(platform_service._OWN_PROCESS), db_engine._shared
    yield
    gc.set_threshold(*threshold)
    if gc.get_freeze_count() > frozen:
        gc.unfreeze()
    platform_service._OWN_PROCESS.update(own_heap)
    db_engine._shared = shared


@pytest.fixture
def os_tmp_dir() -> Iterator[Path]:
    path = _os_tmp("zcbot-test-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _service_env(nats_server_url: str, db_url: str, bus_prefix: str, tmp_path: Path) -> dict[str, str]:
    env = {
        "ZCBOT_NATS_URL": nats_server_url,
        "ZCBOT_DB_URL": db_url,
        "ZCBOT_BUS_PREFIX": bus_prefix,
        "ZCBOT_HOME": str(tmp_path / "home"),
        "ZCBOT_STORAGE_ROOT": str(tmp_path / "users"),
        "JWT_SECRET": secrets.token_hex(32),
        "PLATFORM_KEY": secrets.token_hex(32),
        "ZCBOT_CHANNEL_SECRET_KEY": secrets.token_hex(32),
        "ZCBOT_RUN_GRANT_KEY": secrets.token_hex(32),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "ZCBOT_LOG_LEVEL": "INFO",
        "ZCBOT_EXECUTOR_HOST": f"h{secrets.token_hex(4)}",
    }
    for key in SERVICE_PORT_ENV.values():
        env[key] = str(free_port())
    return env


@pytest.fixture
def settings_env(nats_server_url: str, db_url: str, bus_prefix: str, tmp_path: Path) -> dict[str, str]:
    """Environment for a service (or `Settings`) under test; tests may add or override keys."""
    return _service_env(nats_server_url, db_url, bus_prefix, tmp_path)


@pytest.fixture(scope="module")
def module_settings_env(nats_server_url: str, database_pool: _DatabasePool,
                        tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`settings_env` shared by a whole module (own database, bus prefix and dirs): for suites that
    start one stack per module because a stack costs seconds (the browser tests)."""
    with _fresh_database(database_pool) as url, _fresh_bus_prefix(nats_server_url) as prefix:
        yield _service_env(nats_server_url, url, prefix, tmp_path_factory.mktemp("module"))


@pytest.fixture
def settings(settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """`Settings()` read from `settings_env` (also left in os.environ, and `get_settings()` agrees)."""
    for key, value in settings_env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    try:
        yield Settings()
    finally:
        get_settings.cache_clear()


@pytest.fixture
async def rt(settings: Settings) -> AsyncIterator[Runtime]:
    """A service's `Runtime` (NATS with the test's topology, the test's database), in the test's loop."""
    from zcbot_core.platform.service import close_runtime, open_runtime

    runtime = await open_runtime("test", settings)
    try:
        yield runtime
    finally:
        await close_runtime(runtime)


StartService = Callable[..., ServiceProcess]


@pytest.fixture
def start_service(settings_env: dict[str, str], tmp_path: Path) -> Iterator[StartService]:
    """Factory: `start_service(name, env=None, *, wait=True, timeout=60.0, cmd=None) -> ServiceProcess`.

    The child's env is os.environ + `settings_env` + `env`. With `wait`, blocks until its /healthz
    answers (raising with the service log otherwise). Everything started is terminated at teardown.
    """
    started: list[ServiceProcess] = []
    counter = iter(range(1, 10_000))

    def start(
        name: str,
        env: Mapping[str, str] | None = None,
        *,
        wait: bool = True,
        timeout: float = 60.0,
        cmd: list[str] | None = None,
    ) -> ServiceProcess:
        full_env = {**os.environ, **settings_env, **(env or {})}
        svc = ServiceProcess(name, full_env, tmp_path / "logs" / f"{name}-{next(counter)}.log", cmd=cmd)
        started.append(svc.start())
        if wait:
            svc.wait_healthy(timeout=timeout)
        return svc

    yield start
    import signal
    import time

    for svc in started:  # all drain in parallel
        if svc.alive:
            svc._signal_group(signal.SIGTERM)
    deadline = time.monotonic() + 20.0
    for svc in reversed(started):
        svc.terminate(timeout=max(0.1, deadline - time.monotonic()))
