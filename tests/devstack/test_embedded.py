"""EmbeddedNats / EmbeddedPostgres: start, stop, restart on the same data, stale pid files, no orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nats
import psutil
import psycopg
import pytest

from zcbot_devstack.embedded import EmbeddedNats, EmbeddedPostgres, EmbeddedServerError, free_port, port_is_free


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_free_port_is_bindable() -> None:
    port = free_port()
    assert port_is_free(port)


async def test_nats_start_stop_and_restart_keeps_streams(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path / "n") as server:
        assert server.url.startswith("nats://127.0.0.1:")
        assert server.running and server.process is not None
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        assert (await js.account_info()) is not None
        await js.add_stream(name="KEEP", subjects=["keep.>"])
        await js.publish("keep.a", b"hello")
        await nc.close()
        first_port = server.port
    assert server.process.returncode is not None
    assert port_is_free(first_port)
    assert "Server is ready" in (tmp_path / "n" / "nats-server.log").read_text()

    again = EmbeddedNats(tmp_path / "n").start()
    try:
        nc = await nats.connect(again.url)
        info = await nc.jetstream().stream_info("KEEP")
        assert info.state.messages == 1
        await nc.close()
    finally:
        again.stop()


def test_nats_requested_port_in_use_is_an_error(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path / "a") as first:
        with pytest.raises(EmbeddedServerError, match="in use"):
            EmbeddedNats(tmp_path / "b", port=first.port).start()


def test_postgres_restart_keeps_data_and_handles_stale_pid(os_tmp_dir: Path) -> None:
    data = os_tmp_dir / "pg"
    server = EmbeddedPostgres(data, fast=True).start()
    try:
        password = server.password_file.read_text().strip()
        assert server.url == f"postgresql://postgres:{password}@127.0.0.1:{server.port}/postgres"
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("create table kept (v text)")
            conn.execute("insert into kept values ('one')")
        # A second server on the same data dir is refused while the first runs.
        with pytest.raises(EmbeddedServerError, match="already running"):
            EmbeddedPostgres(data).start()
    finally:
        server.stop()
    assert server.process is not None and server.process.returncode == 0
    assert not (data / "postmaster.pid").exists()

    # Graceful restart: same data.
    server = EmbeddedPostgres(data, fast=True).start()
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("insert into kept values ('two')")
        conn.execute("checkpoint")
    # A crash leaves postmaster.pid behind; the next start must clear it.
    server.process.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
    server.process.wait()  # type: ignore[union-attr]
    assert (data / "postmaster.pid").exists()
    assert _gone(int((data / "postmaster.pid").read_text().split()[0]))
    server = EmbeddedPostgres(data, fast=True).start()
    try:
        with psycopg.connect(server.url) as conn:
            rows = conn.execute("select v from kept order by v").fetchall()
        assert rows == [("one",), ("two",)]
    finally:
        server.stop()

    # A pid file naming some unrelated live process (pid reuse) is stale too.
    (data / "postmaster.pid").write_text(f"{os.getpid()}\n{data}\n")
    with EmbeddedPostgres(data, fast=True) as server:
        with psycopg.connect(server.url) as conn:
            assert conn.execute("select count(*) from kept").fetchone() == (2,)
    assert (data / "postgres.log").exists()


def _refused_without_password(server: EmbeddedPostgres) -> None:
    """Over TCP and over the unix socket, no password or a wrong one is refused."""
    socket_dir = server._socket_dir
    assert socket_dir is not None
    for conninfo in (f"host=127.0.0.1 port={server.port} user=postgres dbname=postgres",
                     f"host={socket_dir} port={server.port} user=postgres dbname=postgres"):
        for password in (None, "wrong-password"):
            with pytest.raises(psycopg.OperationalError, match="password"):
                psycopg.connect(conninfo, password=password, connect_timeout=5).close()


def test_postgres_requires_its_generated_password(os_tmp_dir: Path) -> None:
    """Issue 22: no `trust` for local users; the superuser's password is generated and readable only
    by the owner of the data."""
    data = os_tmp_dir / "pg"
    with EmbeddedPostgres(data, fast=True) as server:
        _refused_without_password(server)
        with psycopg.connect(server.url) as conn:
            assert conn.execute("select current_user").fetchone() == ("postgres",)
        assert (data.stat().st_mode & 0o777) == 0o700
        assert (server.password_file.stat().st_mode & 0o777) == 0o600
        hba = [line for line in (data / "pg_hba.conf").read_text().splitlines() if line and not line.startswith("#")]
        assert hba and all(line.split()[-1] == "scram-sha-256" for line in hba)
        first_url = server.url
    with EmbeddedPostgres(data, fast=True) as server:  # the password is kept across restarts
        assert server.url.split("@")[0] == first_url.split("@")[0]


def test_postgres_data_from_before_passwords_gets_one(os_tmp_dir: Path) -> None:
    """A data dir made when the embedded server trusted local users: the next start sets a password
    (single-user mode, before the server listens) and rewrites pg_hba.conf; the data stays."""
    data = os_tmp_dir / "pg"
    with EmbeddedPostgres(data, fast=True) as server:
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("create table kept (v text)")
            conn.execute("alter role postgres password null")
    # As the earlier versions left it: trust for everyone, no password anywhere.
    (data / "pg_hba.conf").write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n")
    server.password_file.unlink()
    with EmbeddedPostgres(data, fast=True) as server:
        assert server.password_file.exists()
        _refused_without_password(server)
        with psycopg.connect(server.url) as conn:
            assert conn.execute("select count(*) from kept").fetchone() == (0,)


_CHILD = """
import sys, time
from pathlib import Path
from zcbot_devstack.embedded import EmbeddedNats, EmbeddedPostgres
root = Path(sys.argv[1])
n = EmbeddedNats(root / "nats").start()
p = EmbeddedPostgres(root / "pg", fast=True).start()
print(n.process.pid, p.process.pid, flush=True)
time.sleep(120)
"""


def test_servers_die_with_their_parent(os_tmp_dir: Path) -> None:
    """PR_SET_PDEATHSIG: a SIGKILLed owner leaves no nats-server or postgres behind."""
    parent = subprocess.Popen([sys.executable, "-c", _CHILD, str(os_tmp_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        nats_pid, pg_pid = (int(x) for x in line.split())
        pg_children = [c.pid for c in psutil.Process(pg_pid).children()]
        assert pg_children, "postgres should have background workers"
    finally:
        parent.kill()
        parent.wait()
    for pid in (nats_pid, pg_pid, *pg_children):
        assert _gone(pid), f"pid {pid} survived its parent"
