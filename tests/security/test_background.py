"""Layer 3, background processes (issue 19, item 5): the time limit and kills are enforced from
outside the process tree, in every state — a process that stops its own wrapper
(`kill -STOP $PPID; exec sleep N`) or forges its proc files does not outlive its limit, a kill,
a run cancel or a task deletion; such processes count against ZCBOT_MAX_BG_PROCS; starts do not
hang under uvloop."""

from __future__ import annotations

import asyncio
import os
import secrets
import time

import psutil
import uvloop

from tests.helpers.executor_stack import Stack as ExecutorStack
from tests.helpers.executor_stack import wait_no_processes, wait_processes, wait_status
from tests.helpers.stack import Stack
from zcbot_executor.sandbox.launch import kill_detached, launch_detached

# Durations unique to this session (e.g. `sleep 4241.004711`): process checks match the exact command
# line across the host, and other sessions may run this suite at the same time (another backend too).
RUN = f"{secrets.randbelow(10**6):06d}"
FREEZE = "kill -STOP $PPID; exec sleep {n}"  # stops the wrapper: no heartbeat, no limit, no kill file
# Claims that every proc of the user has exited (its files are in the user's own, writable tree).
FORGE = ("sleep 0.3; for p in /workspace/.zcbot_procs/*/*/; do echo 0 > ${{p}}exit_code; "
         "echo '{{\"reason\": \"exited\"}}' > ${{p}}end.json; done; exec sleep {n}")


def _n(base: int) -> str:
    return f"{base}.{RUN}"


def _exact(base: int):  # noqa: ANN202
    return lambda cmd: cmd == f"sleep {_n(base)}"


async def _start(s: ExecutorStack, command: str, **args) -> str:  # noqa: ANN003
    r = await s.call("shell", {"command": command, "background": True, **args})
    assert r.ok, r.error
    return r.meta["proc_id"]


def test_launch_returns_at_once_under_uvloop_and_leaks_no_fd() -> None:
    async def main() -> tuple[dict, float]:
        started = time.monotonic()
        private = await launch_detached(["/bin/sleep", _n(4240)], {"PATH": "/usr/bin:/bin"})
        return private, time.monotonic() - started

    private, took = uvloop.run(main())
    try:
        assert took < 3.0, took  # it used to return when the process exited (40 s timeouts)
        fds = sorted(int(fd) for fd in os.listdir(f"/proc/{private['pid']}/fd"))
        assert fds == [0, 1, 2], fds  # nothing of the executor reaches the sandbox
    finally:
        assert kill_detached(private, "sleep")
    deadline = time.monotonic() + 3
    while _running(private["pid"]):
        assert time.monotonic() < deadline, "the launched process survived its kill"
        time.sleep(0.02)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_frozen_wrapper_does_not_outlive_its_time_limit(exec_stack: ExecutorStack) -> None:
    await exec_stack.executor("h1")
    proc_id = await _start(exec_stack, FREEZE.format(n=_n(4241)), timeout=1)
    await wait_processes(_exact(4241))
    # the wrapper is stopped (T), so only the executor can enforce the limit (1 s + grace)
    assert await wait_no_processes(_exact(4241), timeout=8) == []
    r = await wait_status(exec_stack, proc_id, {"timed out"}, timeout=3)
    assert r.meta["exit_code"] == 124, r.output


async def test_kill_reaches_a_frozen_or_forged_process(exec_stack: ExecutorStack) -> None:
    await exec_stack.executor("h1")
    frozen = await _start(exec_stack, FREEZE.format(n=_n(4242)))
    forged = await _start(exec_stack, FORGE.format(n=_n(4243)))
    await wait_processes(_exact(4242))
    await wait_processes(_exact(4243))
    await asyncio.sleep(0.5)
    for proc_id, n in ((frozen, 4242), (forged, 4243)):
        r = await exec_stack.call("check_process", {"proc_id": proc_id, "action": "kill"})
        assert r.ok and r.meta["status"] == "killed", r.output
        assert await wait_no_processes(_exact(n), timeout=3) == []


async def test_frozen_and_forged_processes_count_against_the_cap(exec_stack: ExecutorStack) -> None:
    await exec_stack.executor("h1", max_bg_procs=2)
    first = await _start(exec_stack, FREEZE.format(n=_n(4244)))
    await _start(exec_stack, FORGE.format(n=_n(4245)))
    await wait_processes(_exact(4244))
    await wait_processes(_exact(4245))
    await asyncio.sleep(0.5)
    r = await exec_stack.call("shell", {"command": "true", "background": True})
    assert not r.ok and "too many background processes" in r.error and first in r.error, r
    await exec_stack.services[0][0].procs.stop_task("u1", "t1", "test cleanup")
    assert await wait_no_processes(lambda c: c in (f"sleep {_n(4244)}", f"sleep {_n(4245)}"), timeout=3) == []
    r = await exec_stack.call("shell", {"command": "true", "background": True})
    assert r.ok, r.error


def _background_turns(command_kill: str, command_keep: str) -> list[dict]:
    return [
        {"text": "Starting two jobs.", "tool_calls": [
            {"name": "shell", "arguments": {"command": command_kill, "background": True}},
            {"name": "shell", "arguments": {"command": command_keep, "background": True, "keep": True}}]},
        {"text": "Both started."},
    ]


async def _run(stack: Stack, token: str, task_id: str, key: str) -> None:
    r = await stack.post(token, task_id, f"{key} start the jobs")
    assert r.status_code == 202, r.text
    events = await stack.events(token, r.json()["events_url"], timeout=30)
    assert events[-1]["data"]["status"] == "ok", events[-1]


def _kill_exact(n: int) -> None:
    """Clean up a keep=true process the test started (by its exact command, sandbox uid only)."""
    for p in psutil.process_iter():
        try:
            if p.uids().real == 10001 and p.cmdline() == ["sleep", _n(n)]:
                p.kill()
        except psutil.Error:
            continue


async def test_task_deletion_kills_its_background_processes_unless_kept(stack: Stack) -> None:
    stack.fake.script("KEY-bg-delete", _background_turns(FREEZE.format(n=_n(4246)), f"exec sleep {_n(4247)}"))
    token = await stack.login("bgdel")
    task = await stack.create_task(token, "Jobs")
    await _run(stack, token, task["task_id"], "KEY-bg-delete")
    await wait_processes(_exact(4246))
    await wait_processes(_exact(4247))
    try:
        async with stack.client(token) as c:
            assert (await c.delete(f"/v1/tasks/{task['task_id']}")).status_code == 204
        assert await wait_no_processes(_exact(4246), timeout=5) == []
        await asyncio.sleep(0.5)
        assert await wait_no_processes(_exact(4247), timeout=0) == [f"sleep {_n(4247)}"]  # keep=true stays
    finally:
        _kill_exact(4247)


async def test_run_cancel_kills_the_runs_background_processes(stack: Stack) -> None:
    stack.fake.script("KEY-bg-cancel", [
        {"text": "Starting.", "tool_calls": [
            {"name": "shell", "arguments": {"command": FREEZE.format(n=_n(4248)), "background": True}}]},
        {"text": "Waiting.", "tool_calls": [{"name": "shell", "arguments": {"command": "sleep 20"}}]},
        {"text": "Done."},
    ])
    token = await stack.login("bgcancel")
    task = await stack.create_task(token, "Jobs")
    r = await stack.post(token, task["task_id"], "KEY-bg-cancel go")
    assert r.status_code == 202, r.text
    await wait_processes(_exact(4248))
    await wait_processes(lambda c: c == "sleep 20", timeout=15)
    async with stack.client(token) as c:
        assert (await c.post(f"/v1/tasks/{task['task_id']}/cancel")).status_code == 202
    assert await wait_no_processes(_exact(4248), timeout=5) == []


async def test_a_background_stop_needs_the_tasks_grant(exec_stack: ExecutorStack) -> None:
    """Issue 22: `BackgroundStop` is signed like a tool call. A bus client without the grant key (a
    runner identity, say) cannot stop another user's processes; the gateway's signed stop can."""
    from tests.helpers.executor_stack import GRANT_KEY
    from zcbot_core.bus import BackgroundStop, grants
    from zcbot_core.bus.codec import encode

    await exec_stack.executor("h1")
    await _start(exec_stack, FREEZE.format(n=_n(4249)))
    await wait_processes(_exact(4249))
    subject = exec_stack.topo.exec_background_stop_subject()
    forged = {
        "no grant": "",
        "another key": grants.issue("not-the-grant-key-" + "x" * 30, "", "u1", "t1"),
        "another user's grant": grants.issue(GRANT_KEY, "", "u2", "t1"),
        "another task's grant": grants.issue(GRANT_KEY, "", "u1", "t2"),
    }
    for case, grant in forged.items():
        await exec_stack.nc.publish(subject, encode(BackgroundStop(user_id="u1", task_id="t1", reason="forged",
                                                                   grant=grant)))
    await exec_stack.nc.flush()
    await asyncio.sleep(1.0)
    assert await wait_no_processes(_exact(4249), timeout=0) == [f"sleep {_n(4249)}"], "a forged stop was obeyed"
    signed = grants.issue(GRANT_KEY, "", "u1", "t1")
    await exec_stack.nc.publish(subject, encode(BackgroundStop(user_id="u1", task_id="t1", reason="task deleted",
                                                               grant=signed)))
    assert await wait_no_processes(_exact(4249), timeout=5) == []
