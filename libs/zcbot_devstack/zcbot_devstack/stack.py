"""`zcbot up`: the whole stack on one machine (DESIGN §8).

Order of things:
1. NATS: `ZCBOT_NATS_URL`, else an embedded server under `ZCBOT_HOME/nats` (port 4322 if free).
2. PostgreSQL: `ZCBOT_DB_URL`, else an embedded server under `ZCBOT_HOME/pg` (port 5433 if free)
   with a database `zcbot`. The chosen embedded ports are kept in `ZCBOT_HOME/ports.json` so a
   rerun reuses them. Then migrations.
3. Secrets (`config.ensure_local_secrets`, env wins) and a first admin (`admin@localhost`, random
   password in `ZCBOT_HOME/admin-credentials.txt`, mode 0600; only the path is ever printed).
4. The five services, hosted in this process (`hosted`: one interpreter, issue 28's memory target),
   or with `--separate` each in its own process group, forked by the fork server (`forkserver`);
   output re-printed with a `name      | ` prefix (JSON log lines as `level msg key=value`); one
   that exits unexpectedly is restarted with backoff (`max_restarts`). `launch` starts them.
5. Ports checked and the default model profile named (with whether its key is set) before anything
   starts (`preflight`); `zcbot is up: http://HOST:PORT` once every `/readyz` is ready with this
   stack's instance id; the stack's URLs in `ZCBOT_HOME/stack.json` (`state`) for `zcbot user`.
6. SIGINT/SIGTERM/SIGHUP: everything the stack started has stopped within 15 s, saying what it
   waits for (`shutdown`): services drained (the executor kills its background jobs first), then
   killed, then what a killed executor left, then PostgreSQL and NATS. A second signal skips the wait.

One `zcbot up` per ZCBOT_HOME at a time (an flock on `ZCBOT_HOME/up.lock`). This module supervises;
`bootstrap` prepares (ports, database, admin, environments), `output` renders, `services` lists.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from zcbot_core.bus.subjects import Topology
from zcbot_core.platform.config import Settings, ensure_local_secrets, get_settings
from zcbot_devstack.bootstrap import (
    DB_NAME,
    DEFAULT_NATS_PORT,
    DEFAULT_PG_PORT,
    choose_port,
    ensure_database,
    service_env,
)
from zcbot_devstack.bus_setup import declare_topology
from zcbot_devstack.embedded import EmbeddedNats, EmbeddedPostgres, EmbeddedServerError
from zcbot_devstack.embedded.nats_auth import NatsCredentials
from zcbot_devstack.groups import group_leftovers
from zcbot_devstack.launch import INTERPRETER_ENV, Child, Launcher
from zcbot_devstack.output import Printer
from zcbot_devstack.preflight import PortInUse, check_ports, model_word, office_word
from zcbot_devstack.prepare_db import prepare as prepare_database
from zcbot_devstack.readiness import FOREIGN, health_host, readiness
from zcbot_devstack.services import BY_NAME, NAMES, SERVICES
from zcbot_devstack.shutdown import stop_stack
from zcbot_devstack.state import remove_state, write_state
from zcbot_devstack.uplock import AlreadyRunning, UpLock
from zcbot_devstack.warmup import warm_previews

__all__ = ["group_leftovers", "run_stack", "up"]  # group_leftovers: the tests' process helpers use it

# The embedded stack's database pools, sized for one machine (the target is <= 20 PostgreSQL
# backends after 200 runs): set only when the operator set none. `--separate`: four processes hold
# one each. Hosted (the default): the services share one pool (`db.engine.share_engines`), kept open
# under load: no overflow, whose connections a pool closes at check-in (issue 43).
EMBEDDED_POOL = {"ZCBOT_DB_POOL_SIZE": "4", "ZCBOT_DB_MAX_OVERFLOW": "4"}
HOSTED_POOL = {"ZCBOT_DB_POOL_SIZE": "12", "ZCBOT_DB_MAX_OVERFLOW": "0"}
EMBEDDED_PG_MAX_CONNECTIONS = "60"
# Ctrl-C stops everything the stack started: its executor's background jobs too (docs/decisions.md).
UP_ENV = {"ZCBOT_BG_STOP_WITH_EXECUTOR": "true"}
# Set only when the operator set none: calls in flight get this long, so a stop fits STOP_BUDGET.
UP_DEFAULTS = {"ZCBOT_EXECUTOR_DRAIN_GRACE_SECONDS": "4"}

PROGRESS_EVERY = 5.0  # seconds between "still starting" lines before the stack is up
ServiceCmd = Callable[[str], list[str]]


def default_service_cmd(name: str) -> list[str]:
    return [sys.executable, "-m", "zcbot_devstack.cli", name]


def up(only: list[str] | None = None, separate: bool = False, *, verbose: bool = False,
       demo_port: int | None = None) -> int:
    """`zcbot up [--only NAME...] [--separate] [--verbose] [--demo]`: run the stack in the foreground until
    a signal; returns 0. `separate`: each service in a process of its own (more memory, see `hosted`);
    `demo_port`: serve the demo model there (`demo`)."""
    return run_stack(only=only, separate=separate, verbose=verbose, demo_port=demo_port)


def run_stack(
    only: Sequence[str] | None = None,
    *,
    service_cmd: ServiceCmd = default_service_cmd,
    settings: Settings | None = None,
    ready_timeout: float = 60.0,
    stop_timeout: float = 10.0,
    max_restarts: int = 5,
    out: IO[str] | None = None,
    separate: bool = False,
    verbose: bool = True,
    demo_port: int | None = None,
) -> int:
    """`up` with its seams exposed (tests pass stand-in `service_cmd`s: processes of their own)."""
    stack = Stack(
        settings or get_settings(),  # `zcbot up`'s entry: the stack's settings, handed to every part
        only=list(only) if only else list(NAMES),
        service_cmd=service_cmd,
        ready_timeout=ready_timeout,
        stop_timeout=stop_timeout,
        max_restarts=max_restarts,
        out=out or sys.stdout,
        separate=separate,
        verbose=verbose,
        demo_port=demo_port,
    )
    return stack.run()


# ---- the supervisor -------------------------------------------------------------------------


class _Interrupted(Exception):
    """A stop signal arrived before the services were being supervised."""


@dataclass
class _Service:
    name: str
    port: int
    proc: Child | None = None
    started_at: float = 0.0
    restarts: int = 0
    restart_at: float | None = None
    given_up: bool = False
    healthy: bool = False  # ready to take work (its /readyz, with our instance id)
    foreign_said: bool = False
    readers: list[threading.Thread] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Stack:
    def __init__(
        self,
        settings: Settings,
        *,
        only: list[str],
        service_cmd: ServiceCmd,
        ready_timeout: float,
        stop_timeout: float,
        max_restarts: int,
        out: IO[str],
        separate: bool = False,
        verbose: bool = True,
        demo_port: int | None = None,
    ) -> None:
        unknown = [n for n in only if n not in BY_NAME]
        if unknown:
            raise ValueError(f"unknown services: {', '.join(unknown)}")
        self.settings = settings
        self.home = settings.home
        self.service_cmd = service_cmd
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.max_restarts = max_restarts
        self.printer = Printer(out, quiet=not verbose)
        self.demo_port = demo_port
        self.demo: Any = None  # the demo model (`demo.DemoModel`) of `zcbot up --demo`
        self.services = [_Service(s.name, s.port(settings)) for s in SERVICES if s.name in only]
        self.nats: EmbeddedNats | None = None
        self.nats_creds: NatsCredentials | None = None
        self.pg: EmbeddedPostgres | None = None
        mode = ("forked" if separate else "hosted") if service_cmd is default_service_cmd else "process"
        self.launcher = Launcher(mode, service_cmd, [s.name for s in self.services], self.say,
                                 self.printer.emit, settings.zcbot_log_level)
        self.env: dict[str, str] = {}
        self.admin_file: Path | None = None
        self.stop_requested = threading.Event()
        self.force = False
        self._supervising = False
        self._signals = 0
        self.instance = secrets.token_hex(8)  # in every child's /readyz: tells ours from another program

    def say(self, text: str) -> None:
        self.printer.say("zcbot", text)

    # ---- signals -----------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: object) -> None:
        self._signals += 1
        if self._signals > 1:
            self.force = True
        self.stop_requested.set()
        if not self._supervising:
            raise _Interrupted()

    def _install_signals(self) -> dict[int, Any]:
        previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return previous
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, self._on_signal)
        return previous

    # ---- main ----------------------------------------------------------------------------------
    def run(self) -> int:
        lock = UpLock(self.home)
        try:
            lock.acquire()
        except AlreadyRunning as exc:
            self.say(str(exc))
            return 1
        try:
            check_ports(self.settings, [s.name for s in self.services])
        except PortInUse as exc:
            lock.abandon()
            self.say(f"error: {exc}")
            return 1
        previous = self._install_signals()
        code = 0
        try:
            try:
                self.say(model_word(self.settings))
                self.say(office_word())
                if self.demo_port is not None:
                    self._start_demo()
                self._prepare()
                self._supervising = True
                if self.stop_requested.is_set():
                    return 0
                code = self._supervise()
            except _Interrupted:
                code = 0
            except EmbeddedServerError as exc:
                self.say(f"error: {exc}")
                code = 1
        finally:
            self._supervising = True  # a signal during shutdown only shortens the wait
            self._shutdown()
            remove_state(self.home)
            if self.demo is not None:
                self.demo.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            lock.release()
        return code

    def _start_demo(self) -> None:
        from zcbot_devstack.demo import DemoModel

        self.demo = DemoModel(port=self.demo_port or 0)
        self.demo.start()
        self.say("demo model: scripted replies (a streamed text, files written, a deck by the ppt skill); "
                 "no API key, no real LLM")

    def _prepare(self) -> None:
        s = self.settings
        self.launcher.prepare(os.environ)  # the services' imports overlap the database's preparation
        nats_url = s.zcbot_nats_url
        if not nats_url:
            port = choose_port(self.home, "nats", DEFAULT_NATS_PORT)
            self.say(f"starting embedded NATS (JetStream) on port {port}, data in {self.home / 'nats'}")
            # One identity per service with its subject permissions; anonymous clients are refused.
            self.nats_creds = NatsCredentials.ensure(self.home)
            conf = self.nats_creds.write_server_config(self.home / "nats-auth.conf", Topology(s.zcbot_bus_prefix))
            self.nats = EmbeddedNats(self.home / "nats", port, extra_args=["-c", str(conf)])
            self.nats.start()
            nats_url = self.nats.url
        db_url = s.zcbot_db_url
        if not db_url:
            port = choose_port(self.home, "postgres", DEFAULT_PG_PORT)
            self.say(f"starting embedded PostgreSQL on port {port}, data in {self.home / 'pg'}")
            # Four services with a database pool each (EMBEDDED_POOL, or the operator's sizes).
            self.pg = EmbeddedPostgres(self.home / "pg", port,
                                       options={"max_connections": EMBEDDED_PG_MAX_CONNECTIONS})
            self.pg.start()
            ensure_database(self.pg.url, DB_NAME)
            db_url = self.pg.url_for(DB_NAME)
        self.say("declaring the bus topology")  # before the services, which may only check it
        declare_topology(s, nats_url, self.nats_creds)
        self.say("applying database migrations")
        self.admin_file = prepare_database(db_url, self.home)
        secret_env = ensure_local_secrets(self.home)
        env = dict(os.environ)  # the children's environment: each service reads its settings from it
        if self.pg is not None:
            pool = HOSTED_POOL if self.launcher.mode == "hosted" else EMBEDDED_POOL
            env.update({k: v for k, v in pool.items() if k not in os.environ})
        env.update({k: v for k, v in UP_DEFAULTS.items() if k not in os.environ})
        env.update(UP_ENV)
        env.update(secret_env)
        env.update(
            {
                "ZCBOT_DB_URL": db_url,
                "ZCBOT_NATS_URL": nats_url,
                "ZCBOT_HOME": str(self.home),
                **INTERPRETER_ENV,
                "ZCBOT_INSTANCE_ID": self.instance,
            }
        )
        for spec in SERVICES:
            env[spec.port_env] = str(spec.port(s))
        self.env = env
        netloc = health_host(s.zcbot_http_host)
        write_state(self.home, instance=self.instance, db_url=db_url, nats_url=nats_url,
                    gateway_url=f"http://{netloc}:{s.zcbot_http_port}")

    # ---- children ------------------------------------------------------------------------------
    def _spawn(self, svc: _Service) -> None:
        env = {**service_env(svc.name, self.env),
               **(self.nats_creds.service_env(svc.name) if self.nats_creds is not None else {})}
        svc.proc = self.launcher.start(svc.name, env)
        svc.started_at = time.monotonic()
        svc.restart_at = None
        svc.healthy = False
        if svc.proc.stdout is not None:  # a hosted service's lines reach the printer directly
            reader = threading.Thread(target=self._pump, args=(svc.name, svc.proc), name=f"out-{svc.name}",
                                      daemon=True)
            reader.start()
            svc.readers.append(reader)

    def _pump(self, name: str, proc: Child) -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            self.printer.emit(name, raw.decode(errors="replace"))
        proc.stdout.close()

    def _reap(self, svc: _Service, now: float) -> None:
        """A service exited on its own: clean its group, schedule a restart or give up."""
        assert svc.proc is not None
        code = svc.proc.returncode
        self.launcher.kill_leftovers(svc.proc)
        if now - svc.started_at > 60.0:
            svc.restarts = 0  # it ran fine for a while: a fresh failure, not a crash loop
        if svc.restarts >= self.max_restarts:
            svc.given_up = True
            self.say(f"{svc.name} exited with code {code}; gave up after {svc.restarts} restarts")
            return
        delay = min(0.5 * 2**svc.restarts, 15.0)
        svc.restarts += 1
        svc.restart_at = now + delay
        self.say(f"{svc.name} exited unexpectedly with code {code}; restart {svc.restarts}/{self.max_restarts} in {delay:g}s")

    def _supervise(self) -> int:
        for svc in self.services:
            self._spawn(svc)
        host = health_host(self.settings.zcbot_http_host)
        started = time.monotonic()
        announced = False
        progress_at = started + PROGRESS_EVERY
        while not self.stop_requested.is_set():
            now = time.monotonic()
            for svc in self.services:
                if svc.given_up:
                    continue
                if svc.restart_at is None and not svc.alive:
                    self._reap(svc, now)
                elif svc.restart_at is not None and now >= svc.restart_at:
                    self._spawn(svc)
                elif not svc.healthy and svc.alive:
                    state = readiness(host, svc.port, self.instance, timeout=0.5)
                    svc.healthy = state == "ready"
                    if svc.healthy and not announced:
                        self.printer.say(svc.name, "ready")  # quiet or not: one line per service
                    if state == FOREIGN and not svc.foreign_said:
                        svc.foreign_said = True
                        self.say(f"port {svc.port} ({svc.name}) answers, but not as this stack's {svc.name}: "
                                 f"another program holds it? (set {BY_NAME[svc.name].port_env})")
            if announced and any(s.given_up for s in self.services):
                self.say("a service gave up; stopping the stack")
                return 1
            if not announced:
                if all(s.healthy for s in self.services):
                    announced = True
                    self._announce(host)
                elif now >= progress_at:  # warm-ups (models, LibreOffice's first start) can take a while
                    progress_at = now + PROGRESS_EVERY
                    waiting = ", ".join(s.name for s in self.services if not s.healthy)
                    self.say(f"still starting ({now - started:.0f}s): waiting for {waiting} to be ready")
                elif any(s.given_up for s in self.services) or now - started > self.ready_timeout:
                    bad = ", ".join(s.name for s in self.services if not s.healthy)
                    self.say(f"not healthy after {now - started:.0f}s: {bad}; stopping")
                    return 1
            self.stop_requested.wait(0.2 if not announced else 0.5)
        return 0

    def _announce(self, host: str) -> None:
        netloc = f"[{host}]" if ":" in host else host
        where = f"  (admin credentials in {self.admin_file})" if self.admin_file else ""
        self.say(f"zcbot is up: http://{netloc}:{self.settings.zcbot_http_port}{where}")
        if any(s.name == "gateway" for s in self.services):
            threading.Thread(target=warm_previews, args=(self.env, self.say, self.stop_requested), name="preview-warm",
                             daemon=True).start()

    def _shutdown(self) -> None:
        stop_stack(self)
