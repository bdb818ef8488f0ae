"""`zcbot up` (zcbot_devstack.stack) with stand-in services: health, restarts, shutdown, persistence."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import psycopg
import pytest

from zcbot_devstack.bootstrap import choose_port
from zcbot_devstack.embedded import free_port, port_is_free
from zcbot_devstack.output import quiet_drops, render_line
from zcbot_devstack.services import NAMES, SERVICE_PORT_ENV

STANDIN = Path(__file__).resolve().parents[1] / "helpers" / "standin_service.py"

# run_stack in a child process, with stand-in services instead of the real ones.
_UP = """
import json, sys
from zcbot_devstack.services import SERVICE_PORT_ENV
from zcbot_devstack.stack import run_stack
opts = json.loads(sys.argv[1])
standin = opts.pop("standin")
failing = opts.pop("failing", [])
def cmd(name):
    if name in failing:
        return [sys.executable, "-c", "import sys; print('boom', flush=True); sys.exit(7)"]
    return [sys.executable, standin, name, SERVICE_PORT_ENV[name]]
sys.exit(run_stack(service_cmd=cmd, **opts))
"""


class UpProcess:
    def __init__(self, env: dict[str, str], out: Path, **opts: object) -> None:
        self.out = out
        opts = {"standin": str(STANDIN), "stop_timeout": 10.0, **opts}
        with out.open("wb") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _UP, json.dumps(opts)], env=env, stdout=fh, stderr=subprocess.STDOUT
            )

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            if needle in text:
                return text
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} not seen (rc={self.proc.poll()}):\n{self.text()}")

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def until_exit(self, timeout: float = 60.0) -> tuple[int, str]:
        """For a stack expected to stop by itself: its exit code and output (killed if it does not)."""
        try:
            rc = self.proc.wait(timeout)
        finally:
            self.kill()
        return rc, self.text()


def _stack_env(home: Path, state: Path, ports: dict[str, int], **extra: str) -> dict[str, str]:
    # Fresh embedded ports unless the test remembered its own: the defaults (4322/5433) race with the
    # stacks of other test sessions on the machine between `choose_port`'s check and the server's bind.
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "ports.json").exists():
        (home / "ports.json").write_text(json.dumps({"nats": free_port(), "postgres": free_port()}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZCBOT_", "JWT_SECRET", "PLATFORM_KEY"))}
    env.update(
        ZCBOT_HOME=str(home),
        STANDIN_DIR=str(state),
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        **{SERVICE_PORT_ENV[n]: str(p) for n, p in ports.items()},
        **extra,
    )
    return env


def _healthz(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _all_gone(procs: list[psutil.Process], timeout: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    alive = procs
    while time.monotonic() < deadline:
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.05)
    return alive


def _env_seen(state: Path, name: str) -> dict[str, str]:
    return json.loads((state / f"{name}.env.json").read_text())


def _name(process: psutil.Process) -> str | None:
    try:
        return process.name()
    except psutil.NoSuchProcess:
        return None


def test_up_starts_all_restarts_a_crash_and_stops_without_orphans(os_tmp_dir: Path) -> None:
    home, state = os_tmp_dir / "home", os_tmp_dir / "state"
    state.mkdir()
    ports = {name: free_port() for name in NAMES}
    env = _stack_env(home, state, ports, STANDIN_CRASH_ONCE="runner")
    up = UpProcess(env, os_tmp_dir / "up.out")
    try:
        text = up.wait_for("zcbot is up")
        creds = home / "admin-credentials.txt"
        assert f"zcbot is up: http://127.0.0.1:{ports['gateway']}  (admin credentials in {creds})" in text
        assert all(_healthz(port) for port in ports.values())
        # The crashed runner was reported and restarted; output is prefixed and JSON is rendered.
        assert "runner exited unexpectedly with code 3" in text
        assert "runner    | crashing on purpose" in text
        assert "gateway   | info  service started port=" in text

        # Admin credentials: private file, password never printed.
        assert stat.S_IMODE(creds.stat().st_mode) == 0o600
        password = next(line.split(": ", 1)[1] for line in creds.read_text().splitlines() if line.startswith("password"))
        assert password not in text
        # Secrets: generated once, private, handed to the services.
        secrets_file = home / "secrets.env"
        assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
        stored = dict(line.split("=", 1) for line in secrets_file.read_text().splitlines() if "=" in line)
        seen = _env_seen(state, "gateway")
        assert seen["JWT_SECRET"] == stored["JWT_SECRET"] and seen["PLATFORM_KEY"] == stored["PLATFORM_KEY"]
        assert stored["JWT_SECRET"] not in text
        assert seen["ZCBOT_DB_URL"].endswith("/zcbot") and seen["ZCBOT_NATS_URL"].startswith("nats://127.0.0.1:")
        assert seen["ZCBOT_HOME"] == str(home.resolve())
        # ... but not to the executor (root, beside the sandboxes): no secret, no database credentials.
        executor_env = _env_seen(state, "executor")
        assert all(executor_env.get(k) is None for k in ("JWT_SECRET", "PLATFORM_KEY", "ZCBOT_CHANNEL_SECRET_KEY"))
        assert stored["JWT_SECRET"] not in json.dumps(executor_env) and ".invalid/" in executor_env["ZCBOT_DB_URL"]
        # The admin exists in the stack's database.
        with psycopg.connect(seen["ZCBOT_DB_URL"]) as conn:
            assert conn.execute("select role from users where email = 'admin@localhost'").fetchone() == ("admin",)

        tree = up.descendants()
        names = {_name(p) for p in tree}  # a PostgreSQL backend may exit between the listing and here
        assert {"nats-server", "postgres"} <= names
        grandchildren = [int(line.split()[1]) for n in NAMES for line in (state / f"{n}.pids").read_text().splitlines()]
        assert set(grandchildren) <= {p.pid for p in tree}

        assert up.stop(signal.SIGTERM) == 0
    finally:
        up.kill()
    assert _all_gone(tree) == []
    assert all(port_is_free(port) for port in ports.values())
    assert "stopping PostgreSQL" in up.text() and up.text().rstrip().endswith("stopped")


def test_second_up_reuses_home_ports_and_data_and_env_secrets_win(os_tmp_dir: Path) -> None:
    home, state = os_tmp_dir / "home", os_tmp_dir / "state"
    home.mkdir()
    state.mkdir()
    remembered = {"nats": free_port(), "postgres": free_port()}
    (home / "ports.json").write_text(json.dumps(remembered))
    ports = {"gateway": free_port()}

    first = UpProcess(_stack_env(home, state, ports), os_tmp_dir / "up1.out", only=["gateway"])
    try:
        first.wait_for("zcbot is up")
        seen = _env_seen(state, "gateway")
        assert seen["ZCBOT_NATS_URL"] == f"nats://127.0.0.1:{remembered['nats']}"
        assert f"127.0.0.1:{remembered['postgres']}/zcbot" in seen["ZCBOT_DB_URL"]
        with psycopg.connect(seen["ZCBOT_DB_URL"], autocommit=True) as conn:
            admin_id = conn.execute("select user_id from users where email = 'admin@localhost'").fetchone()
            conn.execute("insert into users (user_id, email, role) values ('u-keep', 'keep@example.com', 'user')")
        assert not (state / "runner.env.json").exists(), "only= must restrict the services"
        assert first.stop(signal.SIGINT) == 0
    finally:
        first.kill()
    creds_before = (home / "admin-credentials.txt").read_text()
    stored = (home / "secrets.env").read_text()

    env_secret = "from-the-environment-" + "x" * 40
    second = UpProcess(_stack_env(home, state, ports, JWT_SECRET=env_secret), os_tmp_dir / "up2.out", only=["gateway"])
    try:
        text = second.wait_for("zcbot is up")
        assert "admin credentials in" in text
        seen2 = _env_seen(state, "gateway")
        assert seen2["ZCBOT_DB_URL"] == seen["ZCBOT_DB_URL"] and seen2["ZCBOT_NATS_URL"] == seen["ZCBOT_NATS_URL"]
        assert seen2["JWT_SECRET"] == env_secret  # the environment wins
        assert seen2["PLATFORM_KEY"] == seen["PLATFORM_KEY"]  # the stored one is reused
        with psycopg.connect(seen2["ZCBOT_DB_URL"]) as conn:
            assert conn.execute("select user_id from users where email = 'admin@localhost'").fetchone() == admin_id
            assert conn.execute("select count(*) from users where user_id = 'u-keep'").fetchone() == (1,)
        assert second.stop(signal.SIGTERM) == 0
    finally:
        second.kill()
    assert (home / "admin-credentials.txt").read_text() == creds_before  # no new admin, same password
    assert (home / "secrets.env").read_text() == stored  # persisted once; env values are not written


def test_up_gives_up_on_a_service_that_keeps_crashing(os_tmp_dir: Path) -> None:
    home, state = os_tmp_dir / "home", os_tmp_dir / "state"
    state.mkdir()
    ports = {"gateway": free_port(), "runner": free_port()}
    up = UpProcess(
        _stack_env(home, state, ports), os_tmp_dir / "up.out", only=["gateway", "runner"], failing=["runner"], max_restarts=1
    )
    rc, text = up.until_exit()
    assert rc == 1, text
    assert "runner    | boom" in text and "gave up after 1 restarts" in text
    assert "zcbot is up" not in text and text.rstrip().endswith("stopped")
    assert port_is_free(ports["gateway"])


@pytest.mark.parametrize(("line", "dropped"), [
    ('{"level": "info", "msg": "Uvicorn running on http://127.0.0.1:9"}', True),
    ('{"level": "debug", "msg": "tick"}', True),
    ('{"level": "info", "msg": "stopping 1 background job…", "announce": true}', False),
    ('{"level": "warning", "msg": "disk quota: no kernel enforcement"}', False),
    ("info is a word, not a log record", False),
])
def test_quiet_output_drops_only_unannounced_debug_and_info_records(line: str, dropped: bool) -> None:
    assert quiet_drops(line + "\n") is dropped
    assert "announce" not in render_line(line)


def test_render_line_compacts_json_logs() -> None:
    line = json.dumps({"ts": 1.0, "level": "warning", "service": "runner", "logger": "x", "msg": "slow run", "run_id": "r1", "n": 3})
    assert render_line(line + "\n") == 'warning slow run run_id=r1 n=3'
    assert render_line("plain text\n") == "plain text"
    assert render_line('{"not": "a log"}') == '{"not": "a log"}'
    with_exc = render_line(json.dumps({"level": "error", "msg": "failed", "exc": "Traceback\n  boom"}))
    assert with_exc == "error failed\nTraceback\n  boom"


def test_choose_port_prefers_remembered_then_default(tmp_path: Path) -> None:
    default = free_port()
    assert choose_port(tmp_path, "nats", default) == default
    assert json.loads((tmp_path / "ports.json").read_text()) == {"nats": default}
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", default))
        busy.listen()
        other = choose_port(tmp_path, "nats", default)
        assert other != default
    assert choose_port(tmp_path, "nats", default) == other  # remembered wins over the default


@pytest.mark.parametrize("bad", [["nope"]])
def test_unknown_service_is_rejected(bad: list[str]) -> None:
    from zcbot_core.platform.config import Settings
    from zcbot_devstack.stack import run_stack

    with pytest.raises(ValueError, match="unknown services"):
        run_stack(only=bad, settings=Settings())
