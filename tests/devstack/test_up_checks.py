"""`zcbot up`'s checks before and while it starts (stand-in services): busy ports refused at once,
another program's answer never taken for ours, the model word, and `zcbot user` against the running
stack through its state file."""

from __future__ import annotations

import json
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from tests.devstack.test_stack import UpProcess, _env_seen, _stack_env
from zcbot_devstack.embedded import free_port


def _zcbot(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zcbot_devstack.cli", *args], env=env, capture_output=True,
                          text=True, timeout=60)


def test_a_busy_port_stops_up_before_anything_starts(os_tmp_dir: Path) -> None:
    home, state = os_tmp_dir / "home", os_tmp_dir / "state"
    state.mkdir()
    ports = {"gateway": free_port(), "runner": free_port()}
    with socket.socket() as other:
        other.bind(("127.0.0.1", ports["runner"]))
        other.listen()
        started = time.monotonic()
        up = UpProcess(_stack_env(home, state, ports), os_tmp_dir / "up.out", only=["gateway", "runner"])
        rc, text = up.until_exit(30)
    assert rc == 1, text
    assert time.monotonic() - started < 15  # no restarts, no waiting for health
    assert f"port {ports['runner']} (runner) is already in use" in text and "ZCBOT_RUNNER_PORT" in text
    assert "zcbot is up" not in text and not (home / "pg").exists() and not (home / "nats").exists()
    assert not (state / "gateway.env.json").exists()  # no service was started


@pytest.mark.heavy  # `zcbot up` with stand-ins as processes, ~9 s: the full run (`pytest -m heavy`)
def test_another_programs_answer_is_not_taken_for_ours(os_tmp_dir: Path) -> None:
    home, state = os_tmp_dir / "home", os_tmp_dir / "state"
    state.mkdir()
    ports = {"gateway": free_port()}
    env = _stack_env(home, state, ports, STANDIN_FOREIGN="gateway")
    rc, text = UpProcess(env, os_tmp_dir / "up.out", only=["gateway"], ready_timeout=6.0).until_exit()
    assert rc == 1, text
    assert "zcbot is up" not in text
    assert f"port {ports['gateway']} (gateway) answers, but not as this stack's gateway" in text
    assert "not healthy after" in text


@pytest.mark.heavy  # `zcbot up` with stand-ins as processes, ~8 s: the full run (`pytest -m heavy`)
def test_a_service_that_gives_up_after_up_stops_the_stack(os_tmp_dir: Path) -> None:
    home, state = os_tmp_dir / "home", os_tmp_dir / "state"
    state.mkdir()
    ports = {"gateway": free_port(), "runner": free_port()}
    env = _stack_env(home, state, ports, STANDIN_EXIT_AFTER="gateway:1.5")
    rc, text = UpProcess(env, os_tmp_dir / "up.out", only=["gateway", "runner"], max_restarts=1).until_exit()
    assert rc == 1, text
    assert text.index("zcbot is up") < text.index("gave up after 1 restarts")
    assert "a service gave up; stopping the stack" in text and text.rstrip().endswith("stopped")


@pytest.mark.heavy  # `zcbot up` plus five `zcbot user` processes, ~11 s: the full run (`pytest -m heavy`)
def test_user_commands_reach_the_running_stack_and_keep_an_admin(os_tmp_dir: Path) -> None:
    home, state = os_tmp_dir / "home", os_tmp_dir / "state"
    state.mkdir()
    ports = {"gateway": free_port()}
    env = _stack_env(home, state, ports)
    env.pop("DEEPSEEK_API_KEY", None)
    up = UpProcess(env, os_tmp_dir / "up.out", only=["gateway"])
    try:
        text = up.wait_for("zcbot is up")
        # The model word comes before anything starts, with the exact variable to export.
        assert "default model profile: deepseek_v4.flash" in text and "export DEEPSEEK_API_KEY=" in text
        assert text.index("default model profile") < text.index("starting embedded")
        assert "PDF and previews: " in text and text.index("PDF and previews") < text.index("starting embedded")
        stack_file = home / "stack.json"
        assert stat.S_IMODE(stack_file.stat().st_mode) == 0o600
        seen = _env_seen(state, "gateway")
        assert json.loads(stack_file.read_text())["db_url"] == seen["ZCBOT_DB_URL"]

        cli_env = {k: v for k, v in env.items() if k != "ZCBOT_DB_URL"}  # only ZCBOT_HOME, as the README
        run = _zcbot(cli_env, "user", "add", "--email", "Bob@Example.com", "--password", "bob-secret-1")
        assert run.returncode == 0 and "bob@example.com" in run.stdout and "created with role user" in run.stdout, run
        again = _zcbot(cli_env, "user", "add", "--email", "bob@example.com", "--password", "other-secret-2")
        assert again.returncode == 2 and "already exists" in again.stderr and "--update" in again.stderr
        updated = _zcbot(cli_env, "user", "add", "--email", "bob@example.com", "--password", "other-secret-2",
                         "--role", "admin", "--update")
        assert updated.returncode == 0 and "password changed, role user -> admin" in updated.stdout, updated
        assert _zcbot(cli_env, "user", "role", "--email", "bob@example.com", "--role", "user").returncode == 0
        # admin@localhost is now the only admin: neither a demotion nor disabling may remove it.
        for args in (("role", "--email", "admin@localhost", "--role", "user"),
                     ("disable", "--email", "admin@localhost"),
                     ("add", "--email", "admin@localhost", "--password", "new-admin-pw", "--update")):
            refused = _zcbot(cli_env, "user", *args)
            assert refused.returncode == 2 and "only admin" in refused.stderr, (args, refused)
        assert _zcbot(cli_env, "user", "passwd", "--email", "admin@localhost",
                      "--password", "new-admin-pw").returncode == 0
        assert _zcbot(cli_env, "user", "disable", "--email", "bob@example.com").returncode == 0
        listed = _zcbot(cli_env, "user", "list").stdout
        assert any(line.split()[:2] == ["admin@localhost", "admin"] for line in listed.splitlines())
        assert any(line.split()[:3] == ["bob@example.com", "-", "disabled"] for line in listed.splitlines())
        assert _zcbot(cli_env, "user", "role", "--email", "nobody@example.com", "--role", "user").returncode == 2
        with psycopg.connect(seen["ZCBOT_DB_URL"]) as conn:
            assert conn.execute("select role, password_hash is null from users where email = 'bob@example.com'"
                                ).fetchone() == ("disabled", True)
        assert up.stop(signal.SIGINT) == 0
    finally:
        up.kill()
    assert not (home / "stack.json").exists()  # a stopped stack leaves no state behind
    gone = _zcbot({k: v for k, v in env.items() if k != "ZCBOT_DB_URL"}, "user", "list")
    assert gone.returncode == 2 and "start `zcbot up` with the same ZCBOT_HOME" in gone.stderr
