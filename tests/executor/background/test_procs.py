"""Background processes: start, check, kill, time limit, per-user cap, detachment, sweeping."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from pathlib import Path

import psutil

from tests.helpers.executor_stack import (
    Stack,
    drain,
    sandbox_processes,
    wait_no_processes,
    wait_processes,
    wait_status,
)
from zcbot_executor.background import stop_left_behind
from zcbot_executor.background.files import PROCS_DIR, STALE_SECONDS
from zcbot_executor.background.sweep import sweep_procs

# Durations unique to the run: the leftover scans see every session's processes on the machine.
_SLEEP_BASE = secrets.randbelow(80_000) + 10_000
SLEEP_31, SLEEP_32, SLEEP_33, SLEEP_34, SLEEP_35, SLEEP_36 = (f"sleep {_SLEEP_BASE + i}" for i in range(6))



async def test_background_start_check_kill(one: Stack) -> None:
    r = await one.call("shell", {"command": f"echo started-bg; {SLEEP_31}; echo never", "background": True})
    assert r.ok, r.error
    proc_id = r.meta["proc_id"]
    assert proc_id in r.output and r.meta["background"] is True
    proc_dir = one.storage / "u1" / PROCS_DIR / "t1" / proc_id
    assert json.loads((proc_dir / "proc.json").read_text())["kind"] == "shell"
    r = await wait_status(one, proc_id, {"running"}, "started-bg")
    assert "output (last 50 lines):\nstarted-bg" in r.output
    await wait_processes(lambda c: c == SLEEP_31)
    sleeper = sandbox_processes(lambda c: c == SLEEP_31)[0]
    assert os.getpid() not in {p.pid for p in sleeper.parents()}  # detached from the executor
    r = await one.call("check_process", {"proc_id": proc_id, "action": "kill"})
    assert r.ok and r.meta["status"] == "killed" and r.meta["exit_code"] == 137, r.output
    assert await wait_no_processes(lambda c: c == SLEEP_31, timeout=3) == []
    assert (proc_dir / "exit_code").read_text().strip() == "137"
    r = await one.call("check_process", {"proc_id": "p000000000000"})
    assert not r.ok and "no background process" in r.error
    r = await one.call("check_process", {"proc_id": "../../etc"})
    assert not r.ok and "proc id" in r.error


async def test_background_exit_codes_and_time_limit(one: Stack) -> None:
    r = await one.call("run_python", {"code": "import sys\nprint('py-bg-done')\nsys.exit(3)", "background": True})
    assert r.ok, r.error
    done = await wait_status(one, r.meta["proc_id"], {"exited"})
    assert done.meta["exit_code"] == 3 and "py-bg-done" in done.output
    r = await one.call("shell", {"command": SLEEP_32, "background": True, "timeout": 1})
    assert r.ok and r.meta["time_limit"] == 1
    limited = await wait_status(one, r.meta["proc_id"], {"timed out"})
    assert limited.meta["exit_code"] == 124
    assert await wait_no_processes(lambda c: c == SLEEP_32, timeout=3) == []


async def test_background_cap_per_user(stack: Stack) -> None:
    await stack.executor("h1", max_bg_procs=2)
    ids = []
    for _ in range(2):
        r = await stack.call("shell", {"command": SLEEP_33, "background": True})
        assert r.ok, r.error
        ids.append(r.meta["proc_id"])
    r = await stack.call("shell", {"command": SLEEP_33, "background": True})
    assert not r.ok and "too many background processes" in r.error and ids[0] in r.error
    r = await stack.call("shell", {"command": SLEEP_33, "background": True}, user="u2")
    assert r.ok  # the cap is per user
    ids2 = [r.meta["proc_id"]]
    r = await stack.call("check_process", {"proc_id": ids[0], "action": "kill"})
    assert r.meta["status"] == "killed"
    r = await stack.call("shell", {"command": "echo again", "background": True})
    assert r.ok
    for pid in ids[1:]:
        await stack.call("check_process", {"proc_id": pid, "action": "kill"})
    await stack.call("check_process", {"proc_id": ids2[0], "action": "kill"}, user="u2")
    assert await wait_no_processes(lambda c: c == SLEEP_33, timeout=3) == []


async def test_background_outlives_its_executor(stack: Stack) -> None:
    first = await stack.executor("h1")
    r = await stack.call("shell", {"command": SLEEP_34, "background": True})
    proc_id = r.meta["proc_id"]
    await wait_processes(lambda c: c == SLEEP_34)
    await drain(stack, first)  # closes every warm sandbox of h1
    await asyncio.sleep(0.3)
    assert sandbox_processes(lambda c: c == SLEEP_34), "background process died with its executor"
    await stack.executor("h2")
    r = await wait_status(stack, proc_id, {"running"})
    assert r.host == "h2"
    r = await stack.call("check_process", {"proc_id": proc_id, "action": "kill"})
    assert r.meta["status"] == "killed"  # through the kill file: any host can stop it
    assert await wait_no_processes(lambda c: c == SLEEP_34, timeout=3) == []


async def test_an_executor_told_to_stops_its_background_jobs_with_it(stack: Stack) -> None:
    """ZCBOT_BG_STOP_WITH_EXECUTOR (what `zcbot up` sets): draining kills every job, keep=true too,
    recorded as stopped by shutdown (issue 34)."""
    first = await stack.executor("h1", bg_stop_with_executor=True)
    started = [await stack.call("shell", {"command": SLEEP_35, "background": True, **extra})
               for extra in ({}, {"keep": True})]
    await wait_processes(lambda c: c == SLEEP_35, count=2)
    await drain(stack, first)
    assert await wait_no_processes(lambda c: c == SLEEP_35, timeout=1) == []
    await stack.executor("h2")
    for r in started:
        done = await stack.call("check_process", {"proc_id": r.meta["proc_id"]})
        assert done.meta["status"] == "stopped by shutdown" and done.meta["exit_code"] == 137, done.output


async def test_jobs_a_killed_executor_left_are_stopped_from_its_records(stack: Stack) -> None:
    """`zcbot up`'s last resort (background.stop_left_behind): an executor killed before it could stop
    its jobs left them running; its records alone are enough to kill them and record why."""
    first = await stack.executor("h1", bg_stop_with_executor=True)
    r = await stack.call("shell", {"command": SLEEP_36, "background": True})
    await wait_processes(lambda c: c == SLEEP_36)
    await stack.crash(first)  # no drain: the job runs on
    assert sandbox_processes(lambda c: c == SLEEP_36)
    said: list[int] = []
    assert await stop_left_behind(first.config, said.append) == [r.meta["proc_id"]]
    assert said == [1]
    assert await wait_no_processes(lambda c: c == SLEEP_36, timeout=1) == []
    assert await stop_left_behind(first.config, said.append) == [] and said == [1]  # nothing left, nothing said
    await stack.executor("h2")
    done = await stack.call("check_process", {"proc_id": r.meta["proc_id"]})
    assert done.meta["status"] == "stopped by shutdown", done.output


async def test_lost_process_and_sweeper(one: Stack, tmp_path: Path) -> None:
    base = one.storage / "u1" / PROCS_DIR / "t9"
    lost = base / "p0123456789ab"
    lost.mkdir(parents=True)
    (lost / "proc.json").write_text(json.dumps({"kind": "shell", "started_at": time.time() - 100}))
    (lost / "heartbeat").touch()
    old = time.time() - STALE_SECONDS - 5
    os.utime(lost / "heartbeat", (old, old))
    (lost / "output.log").symlink_to("/etc/passwd")  # planted: must never be read by the executor
    r = await one.call("check_process", {"proc_id": "p0123456789ab"})
    assert r.ok and r.meta["status"] == "lost" and "root:" not in r.output
    assert (lost / "exit_code").exists()
    # sweeping: terminal folders older than the retention go, the rest stays
    week = 8 * 86400
    for name, terminal, age in (("paaaaaaaaaaaa", True, week), ("pbbbbbbbbbbbb", True, 0), ("pcccccccccccc", False, week)):
        d = base / name
        d.mkdir()
        (d / "proc.json").write_text("{}")
        if terminal:
            (d / "exit_code").write_text("0\n")
            os.utime(d / "exit_code", (time.time() - age, time.time() - age))
    assert sweep_procs(one.storage, 7 * 86400) == 1
    assert sorted(p.name for p in base.iterdir()) == ["p0123456789ab", "pbbbbbbbbbbbb", "pcccccccccccc"]
    assert psutil.pid_exists(os.getpid())


async def test_a_setsid_child_does_not_outlive_its_job_without_cgroups(stack: Stack) -> None:
    """With no per-user cgroup, a child that leaves the job's process group and session (`setsid`)
    used to outlive the job: the wrapper killed only the group, and bwrap's namespace init kept the
    child alive after the launched bwrap had exited. The wrapper (a subreaper) kills it at the
    limit and when the job ends; the executor kills it from outside when the wrapper was killed."""
    await stack.executor("h1", env={"ZCBOT_SANDBOX_CGROUP": "off"})
    limited, ended, orphaned = (f"sleep {_SLEEP_BASE + 100 + i}" for i in range(3))
    cases = [  # (command, time limit, final status, the setsid child's command line)
        (f"setsid sh -c '{limited}' & {SLEEP_31}", 1, "timed out", limited),
        (f"setsid sh -c '{ended}' & sleep 0.5; exit 0", 30, "exited", ended),
        # the job kills its wrapper: only the executor's kill of the sandbox's pid namespace is left
        (f"setsid sh -c '{orphaned}' & sleep 0.5; kill -9 $PPID; {SLEEP_32}", 1, "timed out", orphaned),
    ]
    for command, limit, status, child in cases:
        r = await stack.call("shell", {"command": command, "background": True, "timeout": limit})
        assert r.ok, r.error
        await wait_processes(lambda c, child=child: c == child)
        done = await wait_status(stack, r.meta["proc_id"], {status})
        assert done.meta["exit_code"] == (0 if status == "exited" else 124), done.output
        assert await wait_no_processes(lambda c, child=child: c == child, timeout=5) == [], command
