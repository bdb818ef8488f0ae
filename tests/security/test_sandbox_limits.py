"""Layer 4, whole-sandbox limits (issue 19, item 6), cgroup half: memory and process count across ALL
of a user's processes on a host (warm runner, its shell children, background sandboxes), through
the real executor and bwrap, on this machine's cgroup (v1 here; see tests/executor/test_cgroups.py
for the v2 protocol)."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers.executor_stack import Stack as ExecutorStack

FORK_25 = """
import os, time
kids = []
for _ in range(25):
    try:
        pid = os.fork()
    except OSError:  # EAGAIN: the user's pids.max
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    kids.append(pid)
print("started", len(kids))
for pid in kids:
    os.kill(pid, 9)
"""
HOLD = "python3 -c \"b = b'x' * ({mb} * 1024 * 1024); import time; time.sleep({secs})\""


@pytest.mark.heavy  # ~4 GB allocated and an OOM kill: 5-12 s on 2 busy cores
async def test_memory_total_across_processes_is_enforced_and_reported(exec_stack: ExecutorStack) -> None:
    svc = await exec_stack.executor("h1", user_memory_mb=2048)
    assert svc.backend.cgroups is not None, "this machine has writable cgroups: the limit must be on"
    # 3 x 1.2 GB: each fits the per-process 2 GB RLIMIT_DATA, together they exceed the user's 2 GB.
    # One of them in a background sandbox of its own: the total covers it too.
    r = await exec_stack.call("shell", {"command": HOLD.format(mb=1200, secs=30), "background": True})
    assert r.ok, r.error
    proc_id = r.meta["proc_id"]
    try:
        await wait_members(svc.backend.cgroups, proc_id, 4)  # bwrap, wrapper, bash, python
        await asyncio.sleep(1.0)  # its 1.2 GB is resident
        other = asyncio.create_task(exec_stack.call(
            "shell", {"command": HOLD.format(mb=1200, secs=1) + " && echo other-ok"}, user="u2"))
        r = await exec_stack.call("shell", {"command": f"({HOLD.format(mb=1200, secs=2)}) & "
                                                       f"({HOLD.format(mb=1200, secs=2)}) & wait; echo waited"})
        assert not r.ok and r.meta.get("oom_killed") is True, r
        assert "out of memory" in r.error and "2048 MB" in r.error
        r2 = await other  # another user's sandbox: unaffected
        assert r2.ok and "other-ok" in r2.output, r2
    finally:
        await exec_stack.call("check_process", {"proc_id": proc_id, "action": "kill"})
    assert svc.backend.cgroups.pids("u1", proc_id) == set()


async def test_process_count_across_sandboxes_is_capped(exec_stack: ExecutorStack) -> None:
    svc = await exec_stack.executor("h1", user_max_procs=40)
    groups = svc.backend.cgroups
    assert groups is not None
    # 25 sleepers in a background sandbox, then 25 more from the warm runner: the total stops at 40
    # although each sandbox alone (RLIMIT_NPROC 256) would allow them all.
    r = await exec_stack.call("shell", {"command": "for i in $(seq 25); do sleep 4250 & done; wait", "background": True})
    assert r.ok, r.error
    proc_id = r.meta["proc_id"]
    try:
        await wait_members(groups, proc_id, 25)
        r = await exec_stack.call("run_python", {"code": FORK_25})
        assert r.ok, r.error
        started = int(r.output.split("started")[-1].split()[0])
        assert started < 25, r.output
        assert len(groups.pids("u1")) <= 40
    finally:
        r = await exec_stack.call("check_process", {"proc_id": proc_id, "action": "kill"})
    assert r.meta["status"] == "killed"
    assert groups.pids("u1", proc_id) == set()
    r = await exec_stack.call("shell", {"command": "for i in $(seq 20); do sleep 0.1 & done; wait; echo all-ok"})
    assert r.ok and "all-ok" in r.output  # the budget is back once they are gone


async def wait_members(groups, leaf: str, count: int, timeout: float = 10.0) -> None:  # noqa: ANN001
    """Wait until the leaf holds `count` processes (this test's own, not anything else on the host)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while len(groups.pids("u1", leaf)) < count:
        assert asyncio.get_running_loop().time() < deadline, groups.pids("u1", leaf)
        await asyncio.sleep(0.05)
