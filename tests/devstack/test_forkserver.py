"""`zcbot up` with the real services (issue 28), hosted in its own process (the default) or with
`--separate` forked by the fork server: a run with a sandboxed shell call served, each service's lines
under its own name, Ctrl-C leaving no process behind. Hosted: no interpreter but `zcbot up`'s. Forked:
each service in its own process group under the server, the server holding no secret, a killed
service restarted and ready again."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from bench.startup import wait_line
from tests.helpers.sse import sse_events
from tests.helpers.stack import FAKE_KEY_ENV, write_fake_profile
from zcbot_core import __version__
from zcbot_devstack.embedded import free_port
from zcbot_devstack.forked import ForkServer, zygote_env
from zcbot_devstack.services import SERVICE_PORT_ENV
from zcbot_fakellm.control import push_script

pytestmark = pytest.mark.heavy

SECRETS = ("JWT_SECRET", "PLATFORM_KEY", "ZCBOT_RUN_GRANT_KEY", "ZCBOT_CHANNEL_SECRET_KEY", "ZCBOT_DB_URL",
           FAKE_KEY_ENV)


def test_the_fork_server_environment_holds_no_secret() -> None:
    env = {"PATH": "/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "DEEPSEEK_API_KEY": "sk", "JWT_SECRET": "j",
           "ZCBOT_DB_URL": "postgresql://u:p@h/db", "ZCBOT_TAVILY_API_KEY": "t", "ZCBOT_NATS_URL": "nats://h:1",
           "SOME_PASSWORD": "p", "GH_TOKEN": "g"}
    assert zygote_env(env) == {"PATH": "/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                               "ZCBOT_NATS_URL": "nats://h:1"}


def test_a_forked_command_gets_its_env_output_and_exit_code_and_a_failed_preload_is_skipped() -> None:
    said: list[str] = []
    server = ForkServer(["zcbot_devstack.cli", "zcbot_no_such_module"], dict(os.environ), said.append)
    server.start()
    try:
        version = server.spawn("--version", {"PATH": os.environ["PATH"]})
        assert version.wait(60) == 0 and __version__ in version.stdout.read().decode()
        # The service reads the environment handed to the child, not the server's.
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZCBOT_")} | {"ZCBOT_HTTP_PORT": "notaport"}
        gateway = server.spawn("gateway", env)
        assert gateway.wait(60) != 0 and "ZCBOT_HTTP_PORT" in gateway.stdout.read().decode()
        assert any("not preloading zcbot_no_such_module" in line for line in said), said
        before = server._proc.pid if server._proc else None
        server._proc.kill()  # the server gone: the next spawn starts another one
        server._proc.wait()
        again = server.spawn("--version", {"PATH": os.environ["PATH"]})
        assert again.wait(60) == 0 and server._proc is not None and server._proc.pid != before
    finally:
        server.stop()


async def _one_run(base: str, platform_key: str) -> list[dict[str, object]]:
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        login = await c.post("/v1/auth/login", json={"user_id": "fork-user", "platform_key": platform_key})
        assert login.status_code == 200, login.text
        c.headers["Authorization"] = f"Bearer {login.json()['token']}"
        task = await c.post("/v1/tasks", json={"name": "hello"})
        posted = await c.post(f"/v1/tasks/{task.json()['task_id']}/messages", json={"content": "KEY-FORK hello"})
        assert posted.status_code == 202, posted.text
        async with asyncio.timeout(60), c.stream("GET", posted.json()["events_url"]) as r:
            return [event async for event in sse_events(r)]


def _services(up: subprocess.Popen[bytes]) -> tuple[psutil.Process, dict[str, psutil.Process]]:
    server = next(p for p in psutil.Process(up.pid).children() if "zcbot_devstack.forkserver_main" in " ".join(p.cmdline()))
    return server, {p.name().removeprefix("zcbot-"): p for p in server.children()}


@pytest.fixture
def fake_base(os_tmp_dir: Path) -> Iterator[str]:
    """The fake model's base URL (its process stopped after the test)."""
    out = os_tmp_dir / "fake.out"
    fake = subprocess.Popen([sys.executable, "-m", "zcbot_fakellm"], stdout=out.open("wb"))
    try:
        yield f"http://127.0.0.1:{int(wait_line(out, 'READY ', fake, 30).split()[1])}/v1"
    finally:
        fake.terminate()
        fake.wait(10)


def _wait_restarted(port: int, old_pid: int, up: subprocess.Popen[bytes], out: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = _services(up)[1].get("scheduler")
        with contextlib.suppress(httpx.HTTPError):
            if now is not None and now.pid != old_pid and httpx.get(f"http://127.0.0.1:{port}/readyz").is_success:
                return
        time.sleep(0.3)
    raise AssertionError(out.read_text()[-3000:])


@pytest.mark.parametrize("separate", [False, True], ids=["hosted", "separate"])
def test_up_runs_the_services_serves_a_run_and_stops_cleanly(os_tmp_dir: Path, fake_base: str, separate: bool) -> None:
    home, out = os_tmp_dir / "home", os_tmp_dir / "up.out"
    ports = {name: free_port() for name in SERVICE_PORT_ENV}
    write_fake_profile(os_tmp_dir / "models", fake_base)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZCBOT_", "JWT_SECRET", "PLATFORM_KEY"))}
    env.update({"ZCBOT_HOME": str(home), "ZCBOT_MODELS_DIR": str(os_tmp_dir / "models"),
                "ZCBOT_DEFAULT_MODEL": "fake", FAKE_KEY_ENV: "sk-fake",
                **{SERVICE_PORT_ENV[n]: str(p) for n, p in ports.items()}})
    up = subprocess.Popen([sys.executable, "-m", "zcbot_devstack.cli", "up", "--verbose", *(["--separate"] if separate else [])],
                          env=env, stdout=out.open("wb"), stderr=subprocess.STDOUT)
    try:
        wait_line(out, "zcbot is up", up, 150)
        if separate:
            server, services = _services(up)
            assert sorted(services) == sorted(SERVICE_PORT_ENV), services
            for proc in services.values():
                assert os.getpgid(proc.pid) == proc.pid  # its own group, as Popen(process_group=0)
            server_env = server.environ()
            assert not [k for k in SECRETS if k in server_env], sorted(server_env)
            assert server_env["PYTHONUNBUFFERED"] == "1"  # the services' stdout, set up by the server's interpreter
        else:  # the embedded servers are the only processes: every service is in `zcbot up`'s
            children = {p.name() for p in psutil.Process(up.pid).children()}
            assert children == {"nats-server", "postgres"}, children

        # A tool call: the forked runner asks the forked executor (sandbox) to write and read a file.
        asyncio.run(push_script(fake_base, "KEY-FORK", [
            {"tool_calls": [{"name": "shell", "arguments": {"command": "echo forked > f.txt && cat f.txt"}}]},
            {"text": "done"}]))
        secrets = dict(line.split("=", 1) for line in (home / "secrets.env").read_text().splitlines() if "=" in line)
        events = asyncio.run(_one_run(f"http://127.0.0.1:{ports['gateway']}", secrets["PLATFORM_KEY"]))
        assert [e["event"] for e in events][-1] == "done" and events[-1]["data"]["status"] == "ok", events
        result = next(e["data"] for e in events if e["event"] == "tool_result")
        assert result["ok"] is True and result["preview"] == "forked\n", result

        if separate:
            services["scheduler"].kill()
            wait_line(out, "scheduler exited unexpectedly with code -9; restart 1/5", up, 30)
            _wait_restarted(ports["scheduler"], services["scheduler"].pid, up, out)
        tree = psutil.Process(up.pid).children(recursive=True)
        up.send_signal(signal.SIGINT)
        assert up.wait(60) == 0
    finally:
        if up.poll() is None:
            up.kill()
    _, alive = psutil.wait_procs(tree, timeout=5)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive
    text = out.read_text()
    assert text.rstrip().endswith("stopped")
    for name in SERVICE_PORT_ENV:
        assert f"{name:<9} | info  service started" in text or f"{name:<9} | info  gateway started" in text, name
