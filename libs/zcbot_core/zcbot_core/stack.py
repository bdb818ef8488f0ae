"""`zcbot up`: the whole stack on one machine (DESIGN §8).

Order of things:
1. NATS: `ZCBOT_NATS_URL`, else an embedded server under `ZCBOT_HOME/nats` (port 4322 if free).
2. PostgreSQL: `ZCBOT_DB_URL`, else an embedded server under `ZCBOT_HOME/pg` (port 5433 if free)
   with a database `zcbot`. The chosen embedded ports are kept in `ZCBOT_HOME/ports.json` so a
   rerun reuses them. Then migrations.
3. Secrets (`config.ensure_local_secrets`, env wins) and a first admin (`admin@localhost`, random
   password in `ZCBOT_HOME/admin-credentials.txt`, mode 0600; only the path is ever printed).
4. The five services as child processes, each in its own process group, their output re-printed
   with a `name      | ` prefix (JSON log lines rendered as `level msg key=value`). A service that
   exits unexpectedly is restarted with backoff, at most `max_restarts` times in a row.
5. Once every service answers `/healthz`: `zcbot is up: http://HOST:PORT`.
6. SIGINT/SIGTERM/SIGHUP: SIGTERM every service group, wait up to 20 s, SIGKILL leftovers, then stop
   PostgreSQL and NATS gracefully. A second signal skips the wait.

One `zcbot up` per ZCBOT_HOME at a time (an flock on `ZCBOT_HOME/up.lock`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from zcbot_core.config import Settings, ensure_local_secrets, get_settings
from zcbot_core.embedded import (
    EmbeddedNats,
    EmbeddedPostgres,
    EmbeddedServerError,
    death_signal_preexec,
    free_port,
    port_is_free,
)

SERVICES = ("gateway", "runner", "executor", "scheduler", "channels")
#: The env var holding each service's HTTP (health/metrics) port.
SERVICE_PORT_ENV = {
    "gateway": "ZCBOT_HTTP_PORT",
    "runner": "ZCBOT_RUNNER_PORT",
    "executor": "ZCBOT_EXECUTOR_PORT",
    "scheduler": "ZCBOT_SCHEDULER_PORT",
    "channels": "ZCBOT_CHANNELS_PORT",
}
DEFAULT_NATS_PORT = 4322
DEFAULT_PG_PORT = 5433
DB_NAME = "zcbot"
PORTS_FILE = "ports.json"
ADMIN_EMAIL = "admin@localhost"
ADMIN_CREDENTIALS_FILE = "admin-credentials.txt"
LOCK_FILE = "up.lock"

ServiceCmd = Callable[[str], list[str]]


def default_service_cmd(name: str) -> list[str]:
    return [sys.executable, "-m", "zcbot_core.cli", name]


def service_port(settings: Settings, name: str) -> int:
    return {
        "gateway": settings.zcbot_http_port,
        "runner": settings.zcbot_runner_port,
        "executor": settings.zcbot_executor_port,
        "scheduler": settings.zcbot_scheduler_port,
        "channels": settings.zcbot_channels_port,
    }[name]


def up(only: list[str] | None = None) -> int:
    """`zcbot up [--only NAME...]`: run the stack in the foreground until a signal; returns 0."""
    return run_stack(only=only)


def run_stack(
    only: Sequence[str] | None = None,
    *,
    service_cmd: ServiceCmd = default_service_cmd,
    settings: Settings | None = None,
    ready_timeout: float = 60.0,
    stop_timeout: float = 20.0,
    max_restarts: int = 5,
    out: IO[str] | None = None,
) -> int:
    """`up` with its seams exposed (tests pass stand-in `service_cmd`s)."""
    stack = Stack(
        settings or get_settings(),
        only=list(only) if only else list(SERVICES),
        service_cmd=service_cmd,
        ready_timeout=ready_timeout,
        stop_timeout=stop_timeout,
        max_restarts=max_restarts,
        out=out or sys.stdout,
    )
    return stack.run()


# ---- output ----------------------------------------------------------------------------------

_COLORS = {"gateway": "36", "runner": "32", "executor": "33", "scheduler": "35", "channels": "34", "zcbot": "1"}
_PREFIX_WIDTH = max(len(n) for n in (*SERVICES, "zcbot"))
# Noise for a human reader: routing keys, and uvicorn's/litellm's decorations of log records.
_DROP_KEYS = ("ts", "service", "logger", "taskName", "color_message", "litellm_redacted")


def render_line(line: str) -> str:
    """A JSON log line as `level msg key=value ...` (+ traceback lines); other lines unchanged."""
    text = line.rstrip("\r\n")
    if not text.startswith("{"):
        return text
    try:
        body = json.loads(text)
    except ValueError:
        return text
    if not isinstance(body, dict) or "msg" not in body:
        return text
    level = str(body.pop("level", "info"))
    msg = str(body.pop("msg"))
    exc = body.pop("exc", None)
    for key in _DROP_KEYS:
        body.pop(key, None)
    parts = [f"{level:<5} {msg}"]
    for key, value in body.items():
        rendered = value if isinstance(value, str) and value and " " not in value else json.dumps(value, default=str)
        parts.append(f"{key}={rendered}")
    result = " ".join(parts)
    if exc:
        result += "\n" + str(exc).rstrip()
    return result


class Printer:
    """Thread-safe prefixed output; colors only on a terminal (and never with NO_COLOR)."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.lock = threading.Lock()
        isatty = getattr(out, "isatty", lambda: False)
        self.color = bool(isatty()) and not os.environ.get("NO_COLOR")

    def prefix(self, name: str) -> str:
        label = f"{name:<{_PREFIX_WIDTH}} |"
        if self.color:
            label = f"\x1b[{_COLORS.get(name, '0')}m{label}\x1b[0m"
        return label

    def emit(self, name: str, text: str) -> None:
        prefix = self.prefix(name)
        lines = text.split("\n")
        with self.lock:
            try:
                for line in lines:
                    self.out.write(f"{prefix} {line}\n")
                self.out.flush()
            except (BrokenPipeError, ValueError):
                pass


# ---- ports, secrets, admin ------------------------------------------------------------------
# The executor (root, next to the sandboxes) never signs or checks a token nor opens the database:
# it is started without the secrets and with a database URL that names nothing (as in deploy/).
EXECUTOR_WITHOUT = ("JWT_SECRET", "PLATFORM_KEY", "ZCBOT_CHANNEL_SECRET_KEY")
EXECUTOR_DB_URL = "postgresql://no-database@executor.invalid/none"


def service_env(name: str, env: dict[str, str]) -> dict[str, str]:
    """A child service's environment: the stack's, less what that service must not hold."""
    if name != "executor":
        return env
    out = {k: v for k, v in env.items() if k not in EXECUTOR_WITHOUT}
    out["ZCBOT_DB_URL"] = EXECUTOR_DB_URL
    return out



def choose_port(home: Path, key: str, default: int) -> int:
    """The port remembered in ports.json if still free, else `default` if free, else any free port."""
    path = home / PORTS_FILE
    try:
        ports: dict[str, int] = json.loads(path.read_text())
    except (OSError, ValueError):
        ports = {}
    remembered = ports.get(key)
    if isinstance(remembered, int) and remembered > 0 and port_is_free(remembered):
        return remembered
    port = default if port_is_free(default) else free_port()
    ports[key] = port
    path.write_text(json.dumps(ports, indent=2, sort_keys=True) + "\n")
    return port


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(text)


def ensure_admin(db_url: str, home: Path) -> Path | None:
    """Create `admin@localhost` with a random password when the DB has no admin yet.

    The password goes only to ZCBOT_HOME/admin-credentials.txt (0600), written before the user so
    a crash in between never leaves an admin whose password nobody knows. Returns the file's path
    when it exists.
    """
    from zcbot_core.users_admin import add_user, admin_exists

    path = home / ADMIN_CREDENTIALS_FILE
    if admin_exists(db_url):
        return path if path.exists() else None
    password = secrets.token_urlsafe(18)
    _write_private(
        path,
        "# first admin, created by `zcbot up`; change the password after the first login\n"
        f"email: {ADMIN_EMAIL}\npassword: {password}\n",
    )
    add_user(db_url, ADMIN_EMAIL, password, "admin")
    return path


def ensure_database(admin_url: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_url, autocommit=True) as conn:
        if conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone() is None:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))


def _health_host(host: str) -> str:
    return {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)


def _healthy(host: str, port: int, timeout: float = 1.0) -> bool:
    netloc = f"[{host}]" if ":" in host else host
    try:
        with urllib.request.urlopen(f"http://{netloc}:{port}/healthz", timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (OSError, ValueError):
        return False


def group_leftovers(pgid: int) -> list[int]:
    """Pids still in process group `pgid` other than a (dead) leader: grandchildren left behind."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid"]):
        pid = proc.info["pid"]
        if pid == pgid:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            if os.getpgid(pid) == pgid:
                found.append(pid)
    return found


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signal the process group led by `proc` (started with process_group=0).

    While `proc` is unreaped its pid (= the pgid) cannot be reused, so killpg is safe; once it is
    reaped, the remaining members are found and signalled one by one instead.
    """
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        return
    for pid in group_leftovers(proc.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


# ---- the supervisor -------------------------------------------------------------------------


class _Interrupted(Exception):
    """A stop signal arrived before the services were being supervised."""


@dataclass
class _Service:
    name: str
    port: int
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    restart_at: float | None = None
    given_up: bool = False
    healthy: bool = False
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
    ) -> None:
        unknown = [n for n in only if n not in SERVICES]
        if unknown:
            raise ValueError(f"unknown services: {', '.join(unknown)}")
        self.settings = settings
        self.home = settings.home
        self.service_cmd = service_cmd
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.max_restarts = max_restarts
        self.printer = Printer(out)
        self.services = [_Service(n, service_port(settings, n)) for n in SERVICES if n in only]
        self.nats: EmbeddedNats | None = None
        self.pg: EmbeddedPostgres | None = None
        self.env: dict[str, str] = {}
        self.admin_file: Path | None = None
        self.stop_requested = threading.Event()
        self.force = False
        self._supervising = False
        self._signals = 0

    def say(self, text: str) -> None:
        self.printer.emit("zcbot", text)

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
        self.home.mkdir(parents=True, exist_ok=True)
        lock = open(self.home / LOCK_FILE, "w")  # noqa: SIM115 - held for the stack's lifetime
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            self.say(f"another `zcbot up` is already running with ZCBOT_HOME={self.home}")
            return 1
        previous = self._install_signals()
        code = 0
        try:
            try:
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
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            lock.close()
        return code

    def _prepare(self) -> None:
        s = self.settings
        nats_url = s.zcbot_nats_url
        if not nats_url:
            port = choose_port(self.home, "nats", DEFAULT_NATS_PORT)
            self.say(f"starting embedded NATS (JetStream) on port {port}, data in {self.home / 'nats'}")
            self.nats = EmbeddedNats(self.home / "nats", port)
            self.nats.start()
            nats_url = self.nats.url
        db_url = s.zcbot_db_url
        if not db_url:
            port = choose_port(self.home, "postgres", DEFAULT_PG_PORT)
            self.say(f"starting embedded PostgreSQL on port {port}, data in {self.home / 'pg'}")
            # Four services with a database pool each (ZCBOT_DB_POOL_SIZE + ZCBOT_DB_MAX_OVERFLOW).
            self.pg = EmbeddedPostgres(self.home / "pg", port, options={"max_connections": "300"})
            self.pg.start()
            ensure_database(self.pg.url, DB_NAME)
            db_url = self.pg.url_for(DB_NAME)
        from zcbot_core.db.migrate import upgrade

        self.say("applying database migrations")
        upgrade(db_url)
        secret_env = ensure_local_secrets(self.home)
        self.admin_file = ensure_admin(db_url, self.home)
        env = dict(os.environ)
        env.update(secret_env)
        env.update(
            {
                "ZCBOT_DB_URL": db_url,
                "ZCBOT_NATS_URL": nats_url,
                "ZCBOT_HOME": str(self.home),
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "PYTHONUNBUFFERED": "1",
            }
        )
        for name in SERVICES:
            env[SERVICE_PORT_ENV[name]] = str(service_port(s, name))
        self.env = env

    # ---- children ------------------------------------------------------------------------------
    def _spawn(self, svc: _Service) -> None:
        cmd = self.service_cmd(svc.name)
        svc.proc = subprocess.Popen(
            cmd,
            env=service_env(svc.name, self.env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,
            preexec_fn=death_signal_preexec(signal.SIGKILL),
            close_fds=True,
        )
        svc.started_at = time.monotonic()
        svc.restart_at = None
        svc.healthy = False
        reader = threading.Thread(target=self._pump, args=(svc.name, svc.proc), name=f"out-{svc.name}", daemon=True)
        reader.start()
        svc.readers.append(reader)

    def _pump(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            self.printer.emit(name, render_line(raw.decode(errors="replace")))
        proc.stdout.close()

    def _reap(self, svc: _Service, now: float) -> None:
        """A service exited on its own: clean its group, schedule a restart or give up."""
        assert svc.proc is not None
        code = svc.proc.returncode
        for pid in group_leftovers(svc.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
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
        host = _health_host(self.settings.zcbot_http_host)
        started = time.monotonic()
        announced = False
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
                    svc.healthy = _healthy(host, svc.port, timeout=0.5)
            if not announced:
                if all(s.healthy for s in self.services):
                    announced = True
                    self._announce(host)
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

    def _shutdown(self) -> None:
        running = [s for s in self.services if s.proc is not None]
        if running:
            self.say("stopping services")
        for svc in running:
            assert svc.proc is not None
            if svc.alive:
                signal_group(svc.proc, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        while any(s.alive for s in running) and time.monotonic() < deadline and not self.force:
            time.sleep(0.05)
        for svc in running:
            assert svc.proc is not None
            if svc.alive:
                self.say(f"{svc.name} did not stop within {self.stop_timeout:g}s; killing it")
            signal_group(svc.proc, signal.SIGKILL)  # also whatever it left behind in its group
            svc.proc.wait()
            for reader in svc.readers:
                reader.join(timeout=2.0)
        if self.pg is not None:
            self.say("stopping PostgreSQL")
            self.pg.stop()
        if self.nats is not None:
            self.say("stopping NATS")
            self.nats.stop()
        self.say("stopped")
