"""Crash recovery and horizontal scale: runner kill -9, SIGTERM hand-back, two gateways (issue 3, 10).

The two runner faults start runners as processes (~20 s each on 2 cores): marked `heavy`, they run in
the full run (`pytest -m heavy`, .ci/run)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.helpers.db import db_rows
from tests.helpers.procs import ServiceProcess
from tests.helpers.stack import Stack, start_gateway
from tests.helpers.wait import wait_for

SLOW_TWO_STEPS = [
    {"text": "step one", "tool_calls": [{"name": "write", "arguments": {"path": "a.txt", "content": "A"}}]},
    {"chunks": [f"w{i} " for i in range(40)], "chunk_delay": 0.1},
]


def _runner(start_service, stack: Stack) -> ServiceProcess:
    return start_service("runner", stack.env, wait=False)


@pytest.mark.heavy
async def test_runner_killed_mid_run_is_recovered_by_another(bare_stack: Stack, start_service) -> None:
    stack = bare_stack
    stack.fake.script("KEY-crash", SLOW_TWO_STEPS)
    first = _runner(start_service, stack)
    await first.wait_healthy_async(timeout=60)
    token = await stack.login("kim")
    task = await stack.create_task(token, "Crash")
    r = await stack.post(token, task["task_id"], "KEY-crash work")
    url = r.json()["events_url"]
    reader = asyncio.create_task(stack.events(token, url, timeout=60))
    url_db = stack.settings.zcbot_db_url

    def streaming_second_step() -> bool:
        rows = db_rows(url_db, "select count(*) from messages where task_id=:t", t=task["task_id"])
        return rows[0][0] >= 3  # user, assistant(tool call), tool result persisted

    await wait_for(streaming_second_step, what="the first step's tool result stored")
    await asyncio.sleep(0.5)  # the second LLM call is streaming now
    first.kill9()
    second = _runner(start_service, stack)
    await second.wait_healthy_async(timeout=60)
    events = await asyncio.wait_for(reader, 60)
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok"
    starts = [e for e in events if e["event"] == "run_start"]
    assert [s["data"]["attempt"] for s in starts] == [1, 2]
    rows = db_rows(url_db, "select idx, payload->>'role' from messages where task_id=:t order by idx", t=task["task_id"])
    assert [r[1] for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert [r[0] for r in rows] == [0, 1, 2, 3]  # contiguous, nothing lost or duplicated
    status = db_rows(url_db, "select run_status, run_owner from tasks where task_id=:t", t=task["task_id"])
    assert status[0] == ("idle", None)


@pytest.mark.heavy
async def test_sigterm_hands_the_run_back_to_another_runner(bare_stack: Stack, start_service) -> None:
    stack = bare_stack
    stack.fake.script("KEY-drain", [{"chunks": [f"d{i} " for i in range(60)], "chunk_delay": 0.1}])
    first = _runner(start_service, stack)
    await first.wait_healthy_async(timeout=60)
    second = _runner(start_service, stack)
    await second.wait_healthy_async(timeout=60)
    token = await stack.login("lee")
    task = await stack.create_task(token, "Drain")
    r = await stack.post(token, task["task_id"], "KEY-drain go")
    reader = asyncio.create_task(stack.events(token, r.json()["events_url"], timeout=60))
    url_db = stack.settings.zcbot_db_url
    await wait_for(lambda: db_rows(url_db, "select run_status from tasks where task_id=:t",
                                   t=task["task_id"])[0][0] == "running", what="the run claimed by a runner")
    await asyncio.sleep(0.5)
    owner = db_rows(url_db, "select run_owner from tasks where task_id=:t", t=task["task_id"])[0][0]
    victim = first if str(first.pid) in owner else second
    await asyncio.get_running_loop().run_in_executor(None, victim.terminate)
    assert victim.returncode == 0
    events = await asyncio.wait_for(reader, 60)
    assert events[-1]["data"]["status"] == "ok"
    assert len([e for e in events if e["event"] == "run_start"]) == 2
    rows = db_rows(url_db, "select payload->>'role' from messages where task_id=:t order by idx", t=task["task_id"])
    assert [r[0] for r in rows] == ["user", "assistant"]


async def test_two_gateways_serve_the_same_run(stack: Stack, settings_env: dict[str, str]) -> None:
    from zcbot_devstack.embedded import free_port

    port = free_port()
    task2, server2 = await start_gateway(stack.settings, port)
    try:
        stack.fake.script("KEY-two-gw", [{"chunks": [f"g{i} " for i in range(20)], "chunk_delay": 0.05}])
        token = await stack.login("max")
        task = await stack.create_task(token, "Two gateways")
        r = await stack.post(token, task["task_id"], "KEY-two-gw hi")
        url = r.json()["events_url"]
        other = Stack(settings=stack.settings, base_url=f"http://127.0.0.1:{port}", fake=stack.fake)
        a, b = await asyncio.gather(stack.events(token, url), other.events(token, url))
        assert [e["id"] for e in a] == [e["id"] for e in b]
        assert a[-1]["event"] == "done"
    finally:
        server2.should_exit = True
        await asyncio.wait({task2}, timeout=15)


@pytest.mark.heavy
@pytest.mark.parametrize("while_dead", ["nothing", "interrupt", "cancel"])
async def test_runner_killed_mid_run_leaves_no_message_behind_it_stranded(bare_stack: Stack, start_service,
                                                                           while_dead: str) -> None:
    """Issue 34's soak: the runner is killed while a run streams and a message waits behind it (and,
    while no runner lives, the user interrupts or cancels): the run is taken over by the redelivery (or
    ends), and every message behind it runs and ends; nothing is left pending."""
    stack = bare_stack
    stack.fake.script("KEY-long", [{"chunks": [f"l{i} " for i in range(60)], "chunk_delay": 0.1}])
    stack.fake.script("KEY-behind", [{"text": "the message behind it"}])
    stack.fake.script("KEY-now", [{"text": "the interrupting message"}])
    first = _runner(start_service, stack)
    await first.wait_healthy_async(timeout=60)
    token = await stack.login("noa")
    task = await stack.create_task(token, "Killed with a queue")
    tid, url_db = task["task_id"], stack.settings.zcbot_db_url
    long = (await stack.post(token, tid, "KEY-long go")).json()
    await wait_for(lambda: db_rows(url_db, "select run_status from tasks where task_id=:t", t=tid)[0][0] == "running",
                   what="the long run claimed")
    behind = await stack.post(token, tid, "KEY-behind next", multitask="enqueue")
    assert behind.status_code == 202 and behind.json()["status"] == "pending", behind.text
    await asyncio.sleep(0.5)
    first.kill9()
    posted = [long, behind.json()]
    if while_dead == "interrupt":
        r = await stack.post(token, tid, "KEY-now stop that", multitask="interrupt")
        assert r.status_code == 202, r.text
        posted.append(r.json())
    elif while_dead == "cancel":
        async with stack.client(token) as c:
            r = await c.post(f"/v1/tasks/{tid}/cancel")
        assert r.status_code == 202, r.text
    second = _runner(start_service, stack)
    await second.wait_healthy_async(timeout=60)
    ends = {}
    for p in posted:
        events = await stack.events(token, p["events_url"], timeout=90)
        ends[p["run_id"]] = events[-1]["data"].get("status") if events and events[-1]["event"] == "done" else events[-1:]
    assert all(status in ("ok", "cancelled") for status in ends.values()), (ends, second.log_tail())
    if while_dead == "nothing":
        assert list(ends.values()) == ["ok", "ok"], ends  # the long run taken over, not reaped
    rows = db_rows(url_db, "select run_status, run_owner, pending_inputs from tasks where task_id=:t", t=tid)
    assert rows[0][0] == "idle" and rows[0][1] is None and not rows[0][2], rows
    roles = db_rows(url_db, "select payload->>'role', payload->>'content' from messages where task_id=:t order by idx",
                    t=tid)
    interrupting = ["KEY-now stop that"] if while_dead == "interrupt" else []
    assert [c for role, c in roles if role == "user"] == ["KEY-long go", *interrupting, "KEY-behind next"], roles


@pytest.mark.parametrize("marked", [True, False])
async def test_a_run_whose_runner_died_after_ending_it_gets_its_done_from_the_redelivery(bare_stack: Stack,
                                                                                         marked: bool) -> None:
    """Found by the soak (issue 34): a runner commits a run's end, then publishes `done`, then acks; killed
    between the end and `done`, the run is over in PostgreSQL but its stream never says so, and a client
    following it waits on keep-alives forever. The redelivery's claim finds the run over: that runner
    publishes the `done` (the outcome from the ended mark, or from the database when the runner died
    before the mark too) instead of acking it away in silence."""
    from zcbot_core.bus import RunRequest, decode
    from zcbot_core.platform.service import close_runtime, open_runtime
    from zcbot_core.runstate import sql
    from zcbot_core.runstate.claim import claim_run
    from zcbot_core.runstate.transitions import end_params, end_run

    stack = bare_stack
    token = await stack.login("ola")
    task = await stack.create_task(token, "Died after the end")
    tid = task["task_id"]
    posted = (await stack.post(token, tid, "hello")).json()  # queued: no runner is up yet
    reader = asyncio.create_task(stack.events(token, posted["events_url"], timeout=40))
    dead = await open_runtime("runner", stack.settings)  # plays the runner that dies
    try:
        psub = await dead.js.pull_subscribe_bind(durable=dead.topo.runners_consumer, stream=dead.topo.runs_stream)
        msg = (await psub.fetch(1, timeout=10))[0]
        req = decode(msg.data, RunRequest)
        assert await claim_run(dead.autocommit, req, "dead-runner") is not None
        if marked:  # the end as the runner writes it: PostgreSQL, then the ended mark
            ended = await end_run(dead.autocommit, dead.sessions, dead.js, dead.topo, task_id=tid, run_id=req.run_id,
                                  status="cancelled", error=None, timings={}, owner="dead-runner")
            assert ended.finished
        else:  # killed between the commit and the mark: an errored run
            async with dead.autocommit.connect() as conn:
                params = end_params(tid, req.run_id, "error", "it failed", {}, "dead-runner")
                assert (await conn.execute(sql.END_RUN[True], params)).first() is not None
    finally:
        await close_runtime(dead)  # no `done`, no ack: JetStream redelivers the request after ack_wait (3 s)
    await stack.add_runner()
    events = await asyncio.wait_for(reader, 40)
    assert events[-1]["event"] == "done", events
    assert events[-1]["data"] == {**events[-1]["data"], "run_id": req.run_id,
                                  "status": "cancelled" if marked else "error"}, events


async def _queued_run(stack: Stack, user: str, name: str) -> tuple[str, str, "asyncio.Task[list[dict[str, Any]]]"]:
    """A message posted while no runner is up (its run stays queued), and a reader of its events."""
    token = await stack.login(user)
    tid = (await stack.create_task(token, name))["task_id"]
    posted = (await stack.post(token, tid, "hello")).json()
    return token, tid, asyncio.create_task(stack.events(token, posted["events_url"], timeout=40))


async def test_a_cancelled_run_taken_over_after_its_answer_was_stored_ends_cancelled(bare_stack: Stack) -> None:
    """Found by the fault suite (issue 42, seeds 13 and 14): the user cancels, the runner stores the
    cancelled answer and dies before it ends the run; the redelivery's history already ends in that
    answer, and the takeover used to end the run `ok` without a model call. It ends `cancelled`, and
    history keeps the one cancelled answer."""
    from zcbot_core.bus import RunRequest, decode
    from zcbot_core.platform.service import close_runtime, open_runtime
    from zcbot_core.runstate.claim import claim_run
    from zcbot_runner.store import DbStepStore

    stack = bare_stack
    token, tid, reader = await _queued_run(stack, "oda", "Cancelled, then its runner died")
    url_db = stack.settings.zcbot_db_url
    dead = await open_runtime("runner", stack.settings)  # plays the runner that dies
    try:
        psub = await dead.js.pull_subscribe_bind(durable=dead.topo.runners_consumer, stream=dead.topo.runs_stream)
        req = decode((await psub.fetch(1, timeout=10))[0].data, RunRequest)
        claim = await claim_run(dead.autocommit, req, "dead-runner")
        assert claim is not None
        async with stack.client(token) as c:
            assert (await c.post(f"/v1/tasks/{tid}/cancel")).status_code == 202
        store = DbStepStore(dead.sessions, task_id=tid, user_id=claim.task.user_id, run_id=req.run_id,
                            profile="fake", owner="dead-runner", autocommit=dead.autocommit)
        await store.append({"role": "assistant", "content": "half an answer\n\n（已取消）"}, kind="cancelled")
    finally:
        await close_runtime(dead)  # no end, no `done`, no ack: JetStream redelivers after ack_wait (3 s)
    await stack.add_runner()
    events = await asyncio.wait_for(reader, 40)
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "cancelled", events[-4:]
    assert "cancelled" in [e["event"] for e in events], events
    rows = db_rows(url_db, "select payload->>'role', kind from messages where task_id=:t order by idx", t=tid)
    assert rows == [("user", "chat"), ("assistant", "cancelled")], rows
    status = db_rows(url_db, "select run_status, run_owner, pending_inputs from tasks where task_id=:t", t=tid)
    assert status[0][0] == "idle" and status[0][1] is None and not status[0][2], status


async def test_a_cancel_sent_before_any_runner_claimed_the_run_keeps_its_reason(bare_stack: Stack) -> None:
    """The runner reads a cancel's reason from KV only when its claim finds the run `cancelling`
    (issue 43: no KV read or delete for the runs nobody cancelled): a scheduled run's timeout sent
    while the run was queued still ends it as a timeout, and the KV entry goes with the run."""
    from nats.js.errors import KeyNotFoundError

    from zcbot_core.bus.topology import kv_bucket
    from zcbot_core.platform.service import close_runtime, open_runtime
    from zcbot_core.runstate.transitions import request_cancel

    stack = bare_stack
    _, tid, reader = await _queued_run(stack, "pia", "Cancelled while queued")
    url_db = stack.settings.zcbot_db_url
    user_id = db_rows(url_db, "select user_id from tasks where task_id=:t", t=tid)[0][0]
    rt = await open_runtime("scheduler", stack.settings)  # the scheduler's timeout, as it sends it
    try:
        await request_cancel(rt.sessions, rt.js, rt.nc, rt.topo, user_id=user_id, task_id=tid, grant_key=None,
                             reason="timeout")
        await stack.add_runner()
        events = await asyncio.wait_for(reader, 40)
        assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "error", events[-3:]
        assert any(e["event"] == "error" and e["data"].get("code") == "timeout" for e in events), events
        kv = await kv_bucket(rt.js, rt.topo.cancel_bucket)

        async def cancel_gone() -> bool:
            try:
                return (await kv.get(rt.topo.kv_key(tid))).value in (None, b"")
            except KeyNotFoundError:
                return True

        await wait_for(cancel_gone, what="the cancel's KV entry deleted with the run")
    finally:
        await close_runtime(rt)

