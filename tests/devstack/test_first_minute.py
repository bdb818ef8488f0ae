"""A newcomer's first minute with the real `zcbot up` as a process (issue 39): `--demo` answers a first
message with a whole run (streamed text, tool calls, a file and a deck by the ppt skill) without any
API key; `--port N` places every service; the output is quiet (one line per service when ready, no
health port as a URL); a second `zcbot up` names the running one; `zcbot user` without a terminal,
`list`, `disable`/`enable`/`passwd`; a refused start names each busy port and leaves nothing behind."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from bench.startup import wait_line
from tests.helpers.sse import sse_events
from zcbot_devstack.embedded import free_port, port_is_free
from zcbot_devstack.services import NAMES, derived_ports
from zcbot_gateway.previews import office_available

CLI = [sys.executable, "-m", "zcbot_devstack.cli"]


def _free_base() -> int:
    """A port N with N..N+4 free (the stacks of other test sessions share the machine)."""
    for _ in range(200):
        base = random.randrange(20000, 60000)
        if all(port_is_free(base + i, "127.0.0.1") for i in range(len(NAMES))):
            return base
    raise AssertionError("no five consecutive free ports")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ZCBOT_", "JWT_SECRET", "PLATFORM_KEY", "DEEPSEEK_"))}
    env["ZCBOT_HOME"] = str(home)
    return env


def _zcbot(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)  # no terminal, as in a script or CI


async def _demo_run(base: str, email: str, password: str) -> list[dict[str, object]]:
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        login = await c.post("/v1/auth/login_password", json={"email": email, "password": password})
        assert login.status_code == 200, login.text
        c.headers["Authorization"] = f"Bearer {login.json()['token']}"
        task = await c.post("/v1/tasks", json={"name": "first"})
        posted = await c.post(f"/v1/tasks/{task.json()['task_id']}/messages", json={"content": "你好，试试看"})
        assert posted.status_code == 202, posted.text
        async with asyncio.timeout(60), c.stream("GET", posted.json()["events_url"]) as r:
            return [event async for event in sse_events(r)]


async def _preview(base: str, email: str, password: str, path: str) -> bytes:
    async with httpx.AsyncClient(base_url=base, timeout=120) as c:
        login = await c.post("/v1/auth/login_password", json={"email": email, "password": password})
        c.headers["Authorization"] = f"Bearer {login.json()['token']}"
        r = await c.get("/v1/files/preview", params={"path": path})
        assert r.status_code == 200, r.text
        return r.content


async def _login(base: str, email: str, password: str) -> int:
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        return (await c.post("/v1/auth/login_password", json={"email": email, "password": password})).status_code


def test_derived_ports_leave_each_set_variable_alone() -> None:
    assert derived_ports(9000, {}) == {"ZCBOT_HTTP_PORT": "9000", "ZCBOT_RUNNER_PORT": "9001",
                                       "ZCBOT_EXECUTOR_PORT": "9002", "ZCBOT_SCHEDULER_PORT": "9003",
                                       "ZCBOT_CHANNELS_PORT": "9004"}
    kept = derived_ports(9000, {"ZCBOT_EXECUTOR_PORT": "7000", "ZCBOT_HTTP_PORT": "7001"})
    assert "ZCBOT_EXECUTOR_PORT" not in kept and kept["ZCBOT_HTTP_PORT"] == "9000"  # the flag is the gateway's
    with pytest.raises(ValueError, match="--port"):
        derived_ports(65533, {})


@pytest.mark.parametrize("demo", [[], ["--demo"]], ids=["plain", "demo"])
def test_a_refused_start_names_each_busy_port_and_leaves_nothing(os_tmp_dir: Path, demo: list[str]) -> None:
    base = _free_base()
    home = os_tmp_dir / "new-home"
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", base + 1))
        b.bind(("127.0.0.1", base + 3))
        a.listen()
        b.listen()
        done = subprocess.run([*CLI, "up", "--port", str(base), *demo], env=_env(home), capture_output=True,
                              text=True, timeout=60)
    assert done.returncode == 1, done
    lines = done.stdout.splitlines()
    busy = [line for line in lines if "is already in use" in line]
    assert len(busy) == 2, done.stdout
    assert f"port {base + 1} (runner)" in busy[0] and busy[0].rstrip().endswith("set ZCBOT_RUNNER_PORT")
    assert f"port {base + 3} (scheduler)" in busy[1] and busy[1].rstrip().endswith("set ZCBOT_SCHEDULER_PORT")
    assert "--port N" in done.stdout and "Traceback" not in done.stdout + done.stderr
    assert not home.exists()  # no empty up.lock, demo profile or home left by a start that never ran


@pytest.mark.heavy  # a fresh `zcbot up --demo` (initdb, migrations), a run, seven CLI calls: ~50 s on 2 shared cores
def test_the_demo_answers_a_first_message_and_the_cli_has_no_sharp_edges(os_tmp_dir: Path) -> None:
    base = _free_base()
    home = os_tmp_dir / "home"
    home.mkdir()
    # Fresh embedded ports: the defaults race with other test sessions' stacks on this machine.
    (home / "ports.json").write_text(json.dumps({"nats": free_port(), "postgres": free_port()}))
    env = _env(home)
    out = os_tmp_dir / "up.out"
    started = time.monotonic()
    up = subprocess.Popen([*CLI, "up", "--demo", "--port", str(base)], env=env, stdout=out.open("wb"),
                          stderr=subprocess.STDOUT)
    tree: list[psutil.Process] = []
    try:
        text = wait_line(out, "zcbot is up", up, 120)
        print(f"first minute: launch to ready {time.monotonic() - started:.1f}s")
        gateway = f"http://127.0.0.1:{base}"
        assert f"zcbot is up: {gateway}" in text and "default model profile: demo" in text
        # Quiet: one line per service when ready, no service's info lines, no health port as a URL.
        for name in NAMES:
            assert [line for line in text.splitlines() if line.startswith(f"{name} ") and line.endswith("| ready")]
        assert "Uvicorn running" not in text
        assert not [p for p in range(base + 1, base + 5) if f":{p}" in text], text
        for name, port in zip(NAMES, range(base, base + 5)):
            assert not port_is_free(port, "127.0.0.1"), (name, port)  # --port placed every service

        admin_pw = (home / "admin-credentials.txt").read_text().split("password: ")[1].split()[0]
        t0 = time.monotonic()
        events = asyncio.run(_demo_run(gateway, "admin@localhost", admin_pw))
        print(f"first minute: demo run {time.monotonic() - t0:.1f}s")
        kinds = [e["event"] for e in events]
        assert kinds[0] == "run_start" and events[0]["data"]["model_profile"] == "demo"  # type: ignore[index]
        assert kinds[-1] == "done" and events[-1]["data"]["status"] == "ok", events[-1]  # type: ignore[index]
        streamed = "".join(str(e["data"]["delta"]) for e in events if e["event"] == "text")  # type: ignore[index]
        assert kinds.count("text") >= 5 and "演示模型" in streamed
        calls = [e["data"]["name"] for e in events if e["event"] == "tool_call"]  # type: ignore[index]
        assert calls == ["write", "write", "shell"]
        assert all(e["data"]["ok"] for e in events if e["event"] == "tool_result")  # type: ignore[index]
        assert "demo/demo.pptx" in str(events[-1]["data"]["final_text"])  # type: ignore[index]
        assert len(list((home / "users").glob("*/*/demo/hello.md"))) == 1
        decks = list((home / "users").glob("*/*/demo/demo.pptx"))
        assert len(decks) == 1 and decks[0].stat().st_size > 10_000
        if office_available():  # LibreOffice and bubblewrap here: warmed at start, and the deck previews
            assert "document previews ready" in wait_line(out, "document previews ready", up, 120)
            t0 = time.monotonic()
            pdf = asyncio.run(_preview(gateway, "admin@localhost", admin_pw, "first/demo/demo.pptx"))
            print(f"first minute: the deck's preview {time.monotonic() - t0:.1f}s")
            assert pdf.startswith(b"%PDF")
        else:
            assert "warming up document previews" not in out.read_text()

        # A second `zcbot up` on the same home says where the running one is.
        second = subprocess.run([*CLI, "up", "--demo"], env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert "already running" in second.stdout and gateway in second.stdout and f"pid {up.pid}" in second.stdout

        # `zcbot user` without a terminal: an error saying what to pass, never a traceback.
        bare = _zcbot(env, "user", "add", "--email", "new@example.com")
        assert bare.returncode == 2 and "no terminal" in bare.stderr and "--generate" in bare.stderr, bare
        assert "Traceback" not in bare.stderr
        made = _zcbot(env, "user", "add", "--email", "new@example.com", "--generate")
        assert made.returncode == 0 and "shown once" in made.stdout, made
        password = made.stdout.rsplit(": ", 1)[1].strip()
        assert asyncio.run(_login(gateway, "new@example.com", password)) == 200
        assert _zcbot(env, "user", "disable", "--email", "new@example.com").returncode == 0
        refused = _zcbot(env, "user", "passwd", "--email", "new@example.com", "--password", "another-pw-1")
        assert refused.returncode == 2 and "is disabled" in refused.stderr and "user enable" in refused.stderr
        listed = _zcbot(env, "user", "list").stdout.splitlines()
        assert listed[0].split() == ["EMAIL", "ROLE", "STATUS", "CREATED", "ID"]
        assert [line.split()[:3] for line in listed if line.startswith("new@")] == [["new@example.com", "-",
                                                                                    "disabled"]]
        assert [line.split()[:3] for line in listed if line.startswith("admin@")] == [["admin@localhost", "admin",
                                                                                      "active"]]
        enabled = _zcbot(env, "user", "enable", "--email", "new@example.com", "--password", "enabled-pw-1")
        assert enabled.returncode == 0 and "enabled" in enabled.stdout, enabled
        assert asyncio.run(_login(gateway, "new@example.com", "enabled-pw-1")) == 200

        tree = psutil.Process(up.pid).children(recursive=True)
        up.send_signal(signal.SIGINT)  # Ctrl-C
        assert up.wait(60) == 0
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    left = [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], [(p.pid, p.name()) for p in left]
    assert out.read_text().rstrip().endswith("stopped")
