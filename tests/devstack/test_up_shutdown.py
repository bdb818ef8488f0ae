"""Ctrl-C and SIGTERM stop everything `zcbot up` started (issue 34): the real `zcbot up` (embedded NATS
and PostgreSQL, the five services hosted, the fake model behind a profile file), a background job
started through the real API (a scripted run calling `shell` with background=true), a run still in
a foreground call and one in a model stream that never ends; then SIGINT to `zcbot up`'s process group (what a terminal's Ctrl-C does) or SIGTERM
to its pid. Within 15 s `zcbot up` has exited and no process of it is left: not its children, not the
background job's detached sandbox (bwrap, the proc wrapper, the `sleep`); the job is recorded as
stopped by the shutdown, and `zcbot up` said what it was waiting for."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from bench.startup import wait_line
from tests.helpers.sse import sse_events
from tests.helpers.stack import FAKE_KEY_ENV, write_fake_profile
from tests.helpers.wait import wait_for
from zcbot_devstack.embedded import free_port
from zcbot_devstack.services import SERVICE_PORT_ENV
from zcbot_executor.background.files import PROCS_DIR, proc_status
from zcbot_fakellm import FakeLLM

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(240)]

STOP_BUDGET = 15.0  # seconds from the signal until nothing of the stack is left (issue 34)


def _secret(home: Path, name: str) -> str:
    for line in (home / "secrets.env").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == name:
            return value.strip()
    raise AssertionError(f"{name} not in {home / 'secrets.env'}")


def _sandbox_chain(marker: str) -> list[psutil.Process]:
    """The processes running `marker` and their ancestors up to (not including) init or one of this
    test's own ancestors: the sleep, the proc wrapper, bwrap (inner and outer)."""
    ours = {1}
    with_test = psutil.Process()
    while with_test is not None:
        ours.add(with_test.pid)
        with_test = with_test.parent()
    chain: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        if marker not in " ".join(proc.info["cmdline"] or []):
            continue
        node: psutil.Process | None = proc
        while node is not None and node.pid not in ours:
            chain[node.pid] = node
            node = node.parent()
    return list(chain.values())


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    left = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except psutil.NoSuchProcess:
            pass
    return left


def _describe(procs: list[psutil.Process]) -> list[tuple[int, str]]:
    out = []
    for proc in procs:
        try:
            out.append((proc.pid, " ".join(proc.cmdline())[:120]))
        except psutil.Error:
            out.append((proc.pid, "?"))
    return out


async def _post(c: httpx.AsyncClient, task_id: str, content: str) -> dict[str, Any]:
    r = await c.post(f"/v1/tasks/{task_id}/messages", json={"content": content})
    assert r.status_code == 202, r.text
    return dict(r.json())


async def _events(c: httpx.AsyncClient, url: str, until: str | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(60), c.stream("GET", url) as r:
        async for event in sse_events(r):
            out.append(event)
            if until is not None and event["event"] == until:
                break
    return out


@pytest.mark.parametrize("how", ["sigint-group", "sigterm-pid", "sigint-group-separate"])
async def test_stop_leaves_no_process_of_the_stack(os_tmp_dir: Path, how: str) -> None:
    fake = FakeLLM(strict=True)
    await fake.start()
    job_marker = f"{300 + secrets.randbelow(10_000) / 10_000:.4f}"  # `sleep 300.xxxx`: this test's own
    call_marker = f"{250 + secrets.randbelow(10_000) / 10_000:.4f}"
    fake.script("KEY-bg", [
        {"tool_calls": [{"name": "shell", "arguments": {"command": f"sleep {job_marker}", "background": True}}]},
        {"text": "the job runs"},
    ])
    fake.script("KEY-fg", [{"tool_calls": [{"name": "shell", "arguments": {"command": f"sleep {call_marker}"}}]},
                           {"text": "slept"}])
    fake.script("KEY-hang", [{"text": "thinking", "hang": True}])  # a model stream that never ends
    home = os_tmp_dir / "home"
    write_fake_profile(os_tmp_dir / "models", fake.base_url)
    ports = {name: free_port() for name in SERVICE_PORT_ENV}
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ZCBOT_", "JWT_SECRET", "PLATFORM_KEY", "DEEPSEEK_"))}
    env.update({"ZCBOT_HOME": str(home), "ZCBOT_MODELS_DIR": str(os_tmp_dir / "models"),
                "ZCBOT_DEFAULT_MODEL": "fake", FAKE_KEY_ENV: "sk-fake",
                **{SERVICE_PORT_ENV[n]: str(p) for n, p in ports.items()}})
    out = os_tmp_dir / "up.out"
    # Its own process group, as a shell's job control starts a foreground command.
    separate = ["--separate"] if how.endswith("-separate") else []  # each service a process of its own
    up = subprocess.Popen([sys.executable, "-m", "zcbot_devstack.cli", "up", *separate], env=env, stdin=subprocess.DEVNULL,
                          stdout=out.open("wb"), stderr=subprocess.STDOUT, process_group=0)
    try:
        await asyncio.to_thread(wait_line, out, "zcbot is up", up, 150)
        base = f"http://127.0.0.1:{ports['gateway']}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as c:
            login = await c.post("/v1/auth/login", json={"user_id": "una",
                                                         "platform_key": _secret(home, "PLATFORM_KEY")})
            assert login.status_code == 200, login.text
            c.headers["Authorization"] = f"Bearer {login.json()['token']}"
            job_task = (await c.post("/v1/tasks", json={"name": "job"})).json()["task_id"]
            busy_task = (await c.post("/v1/tasks", json={"name": "busy"})).json()["task_id"]
            stuck_task = (await c.post("/v1/tasks", json={"name": "stuck"})).json()["task_id"]
            started = await _post(c, job_task, "KEY-bg start a job")
            events = await _events(c, started["events_url"])
            assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events[-3:]
            results = [e["data"] for e in events if e["event"] == "tool_result"]
            assert results and results[0]["ok"], results
            # A second run stays in a foreground call while the stack stops.
            busy = await _post(c, busy_task, "KEY-fg sleep in the foreground")
            await _events(c, busy["events_url"], until="tool_call")
            stuck = await _post(c, stuck_task, "KEY-hang think forever")  # and a third in a model call
            await _events(c, stuck["events_url"], until="text")
        job = await wait_for(lambda: _sandbox_chain(f"sleep {job_marker}"), 20, what="the background job's sleep")
        call = await wait_for(lambda: _sandbox_chain(f"sleep {call_marker}"), 20, what="the foreground call's sleep")
        # The job's sandbox is detached from `zcbot up` (it outlives an executor restart): not a descendant.
        stack = [psutil.Process(up.pid), *psutil.Process(up.pid).children(recursive=True)]
        assert not {p.pid for p in job} & {p.pid for p in stack}, "the job's sandbox is not detached"
        assert len(job) >= 3, _describe(job)  # sleep, the proc wrapper, bwrap
        everything = {p.pid: p for p in [*stack, *job, *call]}
        signalled = time.monotonic()
        if how.startswith("sigint-group"):
            os.killpg(up.pid, signal.SIGINT)
        else:
            up.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(up.wait, STOP_BUDGET + 5)
        took = time.monotonic() - signalled
        try:
            await wait_for(lambda: not _alive(list(everything.values())),
                           max(0.1, STOP_BUDGET - (time.monotonic() - signalled)), what="every process of the stack gone")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {_describe(_alive(list(everything.values())))}") from None
        text = out.read_text(errors="replace")
        print(f"{how}: zcbot up exited in {took:.1f}s; it said:\n" + text[text.rfind("zcbot is up"):])
        assert code == 0, text[-3000:]
        assert took <= STOP_BUDGET, (took, text[-3000:])
        assert "stopping 1 background job" in text, text[-3000:]
        assert text.rstrip().endswith("stopped"), text[-2000:]
        # The job is recorded as stopped by the shutdown (what check_process and /v1/procs say).
        folders = list((home / "users" / "una" / PROCS_DIR).glob("*/p*"))
        statuses = [proc_status(folder) for folder in folders]
        assert [s["status"] for s in statuses] == ["stopped by shutdown"], statuses
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        for proc in _alive([*_sandbox_chain(f"sleep {job_marker}"), *_sandbox_chain(f"sleep {call_marker}")]):
            proc.kill()
        await fake.stop()
