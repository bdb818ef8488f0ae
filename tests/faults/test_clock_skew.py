"""Clock skew on the fault suite's cluster (issue 42): the run grant's expiry judged by a skewed executor.

The grant (`bus/grants.py`) carries an absolute expiry signed by whoever accepted the message (a
gateway on the true clock, 48 h ahead); the executor compares it with its own clock. The executor runs
under libfaketime (Debian `faketime`: `LD_PRELOAD`, `FAKETIME=±N` seconds), the only skewed process.
A time namespace (`unshare --time`) cannot move CLOCK_REALTIME, which grants and the ended-runs marks
use, and nats-server (Go, no libc clock calls) ignores libfaketime, so a skewed NATS node is not
simulated. For an executor 1 h ahead and one 1 h behind:

- a run's `write` call is served and the run ends `ok`;
- the ended run's grant, presented again, is refused: the ended-runs mark in KV, no clock involved;
- a grant of a run that has not ended, expiring 30 min from now (true clock), is refused by the
  executor ahead ("expired": a fast clock shortens every grant by its skew); one that expired 30 min
  ago is served by the executor behind (a slow clock lengthens every grant by its skew).

A skew past the grant's 48 h would refuse every call as expired (a stated tool error the model is
told). Measured with `FAKETIME=+176400` the executor stopped answering on the bus (tool calls met "no
executor service is serving"; its direct subject refused the grant as expired), a libfaketime effect
not diagnosed, so that case is not a scenario here.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from pathlib import Path

import pytest

from tests.faults.conftest import FaultEnv
from tests.faults.nemesis import Nemesis
from tests.faults.test_hosts import User, results
from zcbot_core.bus import ToolCallReply, ToolCallRequest, decode, encode, grants
from zcbot_core.tools.executor_client import probe_host

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(300)]

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
SKEWS = [("1 h ahead", "+3600", 3600), ("1 h behind", "-3600", -3600)]
HALF_HOUR = 1800


async def present(env: FaultEnv, host: str, user: User, run_id: str, expires_in: float = grants.GRANT_TTL_SECONDS) -> str:
    """A `read` call of `run_id` straight to `host`, with a grant of it expiring `expires_in` seconds
    from now on the true clock; "served" or the executor's refusal."""
    key = env.stack.base_env["ZCBOT_RUN_GRANT_KEY"]
    grant = grants.issue(key, run_id, user.name, user.task_id, now=time.time() + expires_in - grants.GRANT_TTL_SECONDS)
    req = ToolCallRequest(call_id=uuid.uuid4().hex, user_id=user.name, task_id=user.task_id, run_id=run_id,
                          tool="read", args={"path": "skew.txt"}, cwd="", timeout=10, grant=grant)
    nc = await env.cluster.admin()
    try:
        msg = await nc.request(env.cluster.topo.exec_call_subject(host), encode(req), timeout=15)
    finally:
        await nc.close()
    reply = decode(msg.data, ToolCallReply)
    # Past the grant check, the call ran (the file lives in the task's folder, not at the user's root).
    return reply.error if not reply.ok and reply.error.startswith("refused") else "served"


async def serving(env: FaultEnv, host: str, timeout: float = 15.0) -> bool:
    """`host` answers its probe (its subscriptions reached every node of the cluster)."""
    nc = await env.cluster.admin()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await probe_host(nc, env.cluster.topo, host, timeout=2.0) is True:
                return True
            await asyncio.sleep(0.2)
        return False
    finally:
        await nc.close()


async def test_a_skewed_executor_judges_run_grants(fault_env: FaultEnv, nemesis: Nemesis) -> None:
    if not LIBFAKETIME.exists():
        pytest.fail("the clock skew scenario needs libfaketime (Debian package `faketime`)")
    stack = fault_env.stack
    for proc in [p for p in stack.procs if p.name == "executor"]:
        proc.terminate(timeout=20)
        stack.procs.remove(proc)
    seen: dict[str, dict[str, object]] = {}
    for label, skew, seconds in SKEWS:
        host = f"skew{secrets.token_hex(3)}"
        # The wall clock only: with the monotonic clock moved too, the executor froze after its start
        # (libfaketime 0.9.10: its timed waits); a time.sleep of the process fails with EINVAL this way,
        # which none of the executor's paths used here reach.
        executor = stack.service("executor", ZCBOT_EXECUTOR_HOST=host, LD_PRELOAD=str(LIBFAKETIME), FAKETIME=skew,
                                 FAKETIME_DONT_FAKE_MONOTONIC="1", FAKETIME_NO_CACHE="1")
        try:
            await asyncio.to_thread(executor.wait_healthy, None, 60.0)
            assert await serving(fault_env, host), f"{host} does not answer on the bus"
            user = User(fault_env, f"sk{secrets.token_hex(3)}")
            await user.login()
            follower = await user.send(f"KEY-skew-{user.name}", [
                {"tool_calls": [{"name": "write", "arguments": {"path": "skew.txt", "content": label}}]},
                {"text": "done writing"}])
            await asyncio.wait_for(follower.run(timeout=60), 70)
            res = results(follower)
            done = (follower.done or {}).get("data", {})
            again = await present(fault_env, host, user, follower.run_id)
            live = uuid.uuid4().hex  # a run that never ended: only the expiry can refuse its grant
            soon = await present(fault_env, host, user, live, expires_in=HALF_HOUR)
            past = await present(fault_env, host, user, live, expires_in=-HALF_HOUR)
            seen[label] = {"tool_ok": bool(res and res[0]["ok"]), "tool": (res[0]["preview"][:90] if res else None),
                           "done": done.get("status"), "ended_grant": again[:90],
                           "grant_left_30_min": soon[:60], "grant_expired_30_min_ago": past[:60]}
            nemesis.record(f"executor {label}", **seen[label])
        finally:
            executor.terminate(timeout=20)  # kept in `procs` until the end: each has a log file of its own
        assert done.get("status") == "ok", (label, follower.events[-3:])
        assert len(res) == 1 and res[0]["ok"], (label, res)
        assert "the run has ended" in again, (label, again)
        if seconds > HALF_HOUR:  # its clock is past the grant's expiry
            assert "the run grant has expired" in soon and "the run grant has expired" in past, seen[label]
        else:  # its clock is before it
            assert soon == "served" and past == "served", seen[label]
    for proc in [p for p in stack.procs if p.name == "executor"]:
        stack.procs.remove(proc)
    # An executor on the true clock again, for any scenario after this one.
    stack.service("executor").wait_healthy(timeout=60)
    print(f"clock skew: {seen}")
