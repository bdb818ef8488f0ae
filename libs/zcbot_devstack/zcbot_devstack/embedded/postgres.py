"""Embedded PostgreSQL: the `postgres` binary of the `pgserver` package run DIRECTLY (not through
pg_ctl), so the postmaster is our child and we own its lifetime. `initdb` runs once (UTF-8,
superuser `postgres`); later starts reuse the data. PostgreSQL refuses to run as root, so when we
are root it runs as the system user `pgserver` (created on demand, as pgserver does).

Authentication (issue 22): the superuser has a generated password (`PASSWORD_FILE` in the data
directory, which is 0700 and the file 0600: only the owner of the data reads it) and every
connection, TCP or unix socket, must give it (scram-sha-256; `pg_hba.conf` is rewritten at each
start, so no `trust` line survives). A data directory made before this (trust for any local user)
gets a password at its next start, set in single-user mode before the server listens."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Self

from zcbot_devstack.embedded.process import (
    LOOPBACK,
    EmbeddedServer,
    EmbeddedServerError,
    death_signal_preexec,
    log_tail,
    port_is_free,
    tcp_open,
    terminate,
)

PG_SYSTEM_USER = "pgserver"
_pg_permissions_done = False
SUPERUSER = "postgres"
PASSWORD_FILE = "zcbot-superuser.password"
# Every connection authenticates; nothing is trusted by being local.
PG_HBA = (
    "# written by zcbot at each start: every connection gives the password (scram-sha-256)\n"
    "local all all scram-sha-256\n"
    "host all all 127.0.0.1/32 scram-sha-256\n"
    "host all all ::1/128 scram-sha-256\n"
)


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


class EmbeddedPostgres(EmbeddedServer):
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
        self._password: str | None = None

    # ---- public --------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        if not self.port or self._password is None:
            raise EmbeddedServerError("EmbeddedPostgres has no port yet: call start() first")
        return f"postgresql://{SUPERUSER}:{self._password}@{LOOPBACK}:{self.port}/{database}"

    @property
    def password_file(self) -> Path:
        return self.data_dir / PASSWORD_FILE

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
        self._password = self._ensure_password(user)
        self._write_hba()
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
            terminate(proc, signal.SIGINT, 5.0, signal.SIGQUIT)
            self.process, self.port = None, self.requested_port
            self._cleanup_socket_dir()
            last_error = log_tail(self.log_path, offset)
        raise EmbeddedServerError(f"postgres did not start (log {self.log_path}):\n{last_error}")

    def stop(self, timeout: float = 20.0) -> None:
        """SIGINT = fast shutdown (abort transactions, checkpoint, exit); then SIGQUIT, then SIGKILL."""
        if self.process is None:
            return
        terminate(self.process, signal.SIGINT, timeout, signal.SIGQUIT)
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
            password = secrets.token_hex(24)  # URL-safe: it goes into the database URL as is
            # initdb wants an empty data dir, so the password file it reads lives elsewhere meanwhile.
            pw_dir = Path(tempfile.mkdtemp(prefix="zcpg-init-"))
            try:
                pw_tmp = pw_dir / "pw"
                pw_tmp.write_text(password + "\n")
                if user:
                    _chown_tree(pw_dir, user)
                cmd = [
                    str(postgres_bin_dir() / "initdb"),
                    "-D", str(self.data_dir),
                    "--auth=scram-sha-256",
                    f"--pwfile={pw_tmp}",
                    "--encoding=UTF8",
                    "--no-locale",
                    "-U", SUPERUSER,
                ]  # fmt: skip
                if self.fast:
                    cmd.append("--no-sync")
                result = subprocess.run(cmd, capture_output=True, cwd=self.data_dir, env=self._env(), **self._run_as(user))  # type: ignore[call-overload]
            finally:
                shutil.rmtree(pw_dir, ignore_errors=True)
            (self.data_dir / "initdb.log").write_bytes(result.stdout + result.stderr)
            if result.returncode != 0:
                raise EmbeddedServerError(f"initdb failed:\n{(result.stdout + result.stderr).decode(errors='replace')[-4000:]}")
            self._store_password(password)
        elif user:
            # Data created by an earlier run must stay owned by the server user.
            import pwd

            if self.data_dir.stat().st_uid != pwd.getpwnam(user).pw_uid:
                _chown_tree(self.data_dir, user)

    def _store_password(self, password: str) -> None:
        fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(password + "\n")

    def _ensure_password(self, user: str | None) -> str:
        """The superuser's password; a data dir from before passwords gets one now, set in
        single-user mode (no server listens, so no connection ever ran without it)."""
        try:
            return self.password_file.read_text().strip()
        except FileNotFoundError:
            pass
        password = secrets.token_hex(24)
        cmd = [str(postgres_bin_dir() / "postgres"), "--single", "-D", str(self.data_dir), "-j", SUPERUSER]
        result = subprocess.run(  # type: ignore[call-overload]
            cmd, input=f"ALTER ROLE {SUPERUSER} PASSWORD '{password}';\n\n".encode(), capture_output=True,
            cwd=self.data_dir, env=self._env(), **self._run_as(user))
        if result.returncode != 0:
            raise EmbeddedServerError(
                f"could not set the postgres password:\n{(result.stdout + result.stderr).decode(errors='replace')[-4000:]}")
        self._store_password(password)
        return password

    def _write_hba(self) -> None:
        # Truncating the existing file keeps its owner (the server user when we are root).
        with (self.data_dir / "pg_hba.conf").open("w") as fh:
            fh.write(PG_HBA)

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
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}  # the server's: no stray PG* of ours
        env["LC_ALL"] = "C"
        return env

    def _spawn(self, port: int, user: str | None) -> subprocess.Popen[bytes]:
        assert self._socket_dir is not None
        cmd = [
            str(postgres_bin_dir() / "postgres"),
            "-D", str(self.data_dir),
            "-p", str(port),
            "-h", LOOPBACK,
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
        conninfo = f"host={LOOPBACK} port={port} user={SUPERUSER} dbname=postgres connect_timeout=2"
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            if tcp_open(port):
                try:
                    with psycopg.connect(conninfo, password=self._password) as conn:
                        row = conn.execute("show data_directory").fetchone()
                    # Make sure we reached OUR server, not another one that won the port race.
                    return row is not None and Path(row[0]).resolve() == self.data_dir
                except psycopg.OperationalError:
                    pass
            time.sleep(0.05)
        return False
