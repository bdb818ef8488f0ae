"""A run's grant stops working when the run ends (issue 22; bus/ended_runs.py).

Real NATS, real PostgreSQL, real executors (bwrap): the run state machine's transitions end runs
(`runstate.transitions`), and a client reusing the ended run's grant - what a runner identity
could do until the grant expired, 48 h later - is refused by every executor, also one started
after the end and also after someone published a delete marker for the mark. A live run, and a
run taken over by another runner, keep working.
"""

from __future__ import annotations

import asyncio
import secrets

import pytest
from nats.js.errors import APIError

from tests.helpers.executor_stack import GRANT_KEY, Stack, granted
from zcbot_core.bus import RunRequest, ToolCallReply, ToolCallRequest, decode, encode
from zcbot_core.bus.ended_runs import EndedRuns
from zcbot_core.db.models import Task, User
from zcbot_core.platform.service import Runtime
from zcbot_core.runstate.claim import claim_run
from zcbot_core.runstate.transitions import end_run, reap, request_cancel

ENDED = "the run has ended"


async def _task(rt: Runtime, user: str, task_id: str, run_id: str, status: str, owner: str | None = None) -> None:
    async with rt.sessions() as s, s.begin():
        s.add(User(user_id=user))
        await s.flush()
        s.add(Task(task_id=task_id, user_id=user, name=task_id, working_dir=task_id, run_status=status,
                   run_id=run_id, run_owner=owner))


async def _call(stack: Stack, host: str, user: str, task_id: str, run_id: str, tool: str,
                args: dict[str, object]) -> ToolCallReply:
    """One call with the run's grant, straight to `host` (each executor is asked, not one chosen by lease)."""
    req = granted(ToolCallRequest(call_id=secrets.token_hex(6), user_id=user, task_id=task_id, run_id=run_id,
                                  tool=tool, args=args, cwd=task_id, timeout=10))
    msg = await stack.request(stack.topo.exec_call_subject(host), encode(req), timeout=20)
    return decode(msg.data, ToolCallReply)


async def _refused_soon(stack: Stack, host: str, *call: object) -> ToolCallReply:
    """The end reaches an executor through its watch within moments of the transition."""
    for _ in range(40):
        reply = await _call(stack, host, *call)  # type: ignore[arg-type]
        if not reply.ok:
            return reply
        await asyncio.sleep(0.05)
    return reply


def _assert_refused(reply: ToolCallReply, what: str) -> None:
    assert not reply.ok and "refused" in (reply.error or "") and ENDED in (reply.error or ""), (what, reply)
    assert "secret-content" not in reply.output and "pwned" not in reply.output, (what, reply)


async def test_an_ended_runs_grant_is_refused_by_every_executor(rt: Runtime, exec_stack: Stack) -> None:
    user, task_id, run_id = "alice", "t-ended", secrets.token_hex(16)
    await _task(rt, user, task_id, run_id, "running", owner="runner-a")
    for host in ("h1", "h2"):
        await exec_stack.executor(host)
    # The live run works on both executors: a file written, read back, a shell.
    ok = await _call(exec_stack, "h1", user, task_id, run_id, "shell", {"command": "echo secret-content > notes.txt"})
    assert ok.ok, ok
    for host in ("h1", "h2"):
        read = await _call(exec_stack, host, user, task_id, run_id, "read", {"path": "notes.txt"})
        assert read.ok and "secret-content" in read.output, (host, read)

    outcome = await end_run(rt.autocommit, rt.sessions, rt.js, rt.topo, task_id=task_id, run_id=run_id,
                            status="ok", error=None, timings={"total": 1.0}, owner="runner-a")
    assert outcome.finished and not outcome.superseded

    # The adversary: the same grant (valid for 48 h more) for a file read, a shell, a background job.
    pwned = exec_stack.storage / user / task_id / "pwned"
    for host in ("h1", "h2"):
        _assert_refused(await _refused_soon(exec_stack, host, user, task_id, run_id, "read",
                                            {"path": "notes.txt"}), f"{host} read")
        _assert_refused(await _call(exec_stack, host, user, task_id, run_id, "shell",
                                    {"command": "touch pwned; echo pwned"}), f"{host} shell")
        _assert_refused(await _call(exec_stack, host, user, task_id, run_id, "shell",
                                    {"command": "touch pwned", "background": True}), f"{host} background")
        _assert_refused(await _call(exec_stack, host, user, task_id, run_id, "check_process",
                                    {"proc_id": "p1"}), f"{host} check_process")
    assert not pwned.exists()

    # A delete marker for the mark (any writer of the bucket could publish one) does not un-end the
    # run, the bucket refuses message deletes, and an executor started now (no watch event: it reads
    # the bucket) refuses the grant too.
    kv = await rt.js.key_value(rt.topo.ended_runs_bucket)
    await kv.delete(run_id)
    entry = await rt.js.get_last_msg(f"KV_{rt.topo.ended_runs_bucket}", f"$KV.{rt.topo.ended_runs_bucket}.{run_id}")
    with pytest.raises(APIError):  # the stream refuses deletes (deny_delete), whoever asks
        await rt.js.delete_msg(f"KV_{rt.topo.ended_runs_bucket}", entry.seq)
    await exec_stack.executor("h3")
    _assert_refused(await _call(exec_stack, "h3", user, task_id, run_id, "read", {"path": "notes.txt"}), "h3")
    _assert_refused(await _call(exec_stack, "h1", user, task_id, run_id, "shell", {"command": "echo pwned"}), "h1")
    assert not pwned.exists()


async def test_a_run_taken_over_by_another_runner_keeps_its_grant_until_it_ends(
        rt: Runtime, exec_stack: Stack) -> None:
    user, task_id, run_id = "bob", "t-takeover", secrets.token_hex(16)
    await _task(rt, user, task_id, run_id, "queued")
    await exec_stack.executor("h1")
    req = RunRequest(run_id=run_id, task_id=task_id, user_id=user, enqueued_at=0.0)
    assert await claim_run(rt.autocommit, req, "runner-a") is not None
    first = await _call(exec_stack, "h1", user, task_id, run_id, "shell", {"command": "echo by-a"})
    assert first.ok and "by-a" in first.output, first
    taken = await claim_run(rt.autocommit, req, "runner-b")  # runner-a's heartbeats were lost: redelivered
    assert taken is not None and taken.prior_owner == "runner-a"
    # The old owner's end is fenced: nothing ends, nothing is marked.
    stale = await end_run(rt.autocommit, rt.sessions, rt.js, rt.topo, task_id=task_id, run_id=run_id, status="ok",
                          error=None, timings={}, owner="runner-a")
    assert not stale.finished and stale.superseded
    await asyncio.sleep(0.3)  # a mark, had one been written, would have reached the executor by now
    live = await _call(exec_stack, "h1", user, task_id, run_id, "shell", {"command": "echo by-b"})
    assert live.ok and "by-b" in live.output, live
    # The new owner ends it: from then on the grant is refused.
    done = await end_run(rt.autocommit, rt.sessions, rt.js, rt.topo, task_id=task_id, run_id=run_id, status="ok",
                         error=None, timings={}, owner="runner-b")
    assert done.finished
    _assert_refused(await _refused_soon(exec_stack, "h1", user, task_id, run_id, "shell", {"command": "echo pwned"}),
                    "after the new owner's end")


async def test_reaped_and_cancelled_waiting_runs_are_ended_and_live_ones_are_not(rt: Runtime) -> None:
    reaped, waiting, live = (secrets.token_hex(16) for _ in range(3))
    await _task(rt, "carol", "t-reaped", reaped, "running", owner="dead-runner")
    async with rt.sessions() as s, s.begin():
        s.add(Task(task_id="t-waiting", user_id="carol", name="w", working_dir="w", run_status="waiting", run_id=waiting))
        s.add(Task(task_id="t-live", user_id="carol", name="l", working_dir="l", run_status="running", run_id=live,
                   run_owner="runner-a"))
    view = EndedRuns(rt.nc, rt.js, rt.topo)
    await view.start()
    try:
        assert not await view.has_ended(reaped) and not await view.has_ended(live)
        assert await reap(rt.sessions, rt.js, rt.topo, task_id="t-reaped", run_id=reaped, seen_status="running",
                          error="lost")
        _, was_waiting = await request_cancel(rt.sessions, rt.js, rt.nc, rt.topo, user_id="carol",
                                              task_id="t-waiting", grant_key=GRANT_KEY)
        assert was_waiting
        for _ in range(40):  # the reaped run: through the watch (its "running" verdict is fresh)
            if await view.has_ended(reaped) and await view.has_ended(waiting):
                break
            await asyncio.sleep(0.05)
        assert await view.has_ended(reaped) and await view.has_ended(waiting)
        assert not await view.has_ended(live)
        assert await view.refusal("") == "the call names no run"
    finally:
        await view.stop()
