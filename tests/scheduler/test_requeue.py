"""The queued-run sweep (issue 23 item 7): a run PostgreSQL says is `queued` whose request is gone
from the runs stream (here: deleted, as a power cut before the disk sync would lose it) is published
again by the scheduler and runs to its end, tool call included (the sweep signs a fresh grant)."""

from __future__ import annotations

import asyncio

import zcbot_core.llm.client  # noqa: F401,E402  (imported now: importing LiteLLM mid-test blocks the loop for seconds)
import zcbot_runner.service  # noqa: F401,E402
from tests.helpers.db import db_rows_async
from tests.helpers.stack import Stack, bare_stack, fake_llm  # noqa: F401  (fixtures)
from tests.helpers.wait import wait_for
from zcbot_core.bus import Topology
from zcbot_core.bus.topology import connect
from zcbot_core.platform.service import close_runtime, open_runtime
from zcbot_scheduler.config import SchedulerConfig
from zcbot_scheduler.service import SchedulerService


async def test_a_queued_run_whose_request_was_lost_is_published_again_and_runs(bare_stack: Stack) -> None:
    stack = bare_stack
    stack.fake.script("KEY-requeue", [
        {"text": "writing", "tool_calls": [{"name": "write", "arguments": {"path": "q.txt", "content": "Q"}}]},
        {"text": "requeued and done"},
    ])
    token = await stack.login("requeue")
    task = await stack.create_task(token, "Requeue")
    r = await stack.post(token, task["task_id"], "KEY-requeue go")
    assert r.status_code == 202 and r.json()["status"] == "queued", r.text
    reader = asyncio.create_task(stack.events(token, r.json()["events_url"], timeout=120))
    topo = Topology(stack.settings.zcbot_bus_prefix)
    nc = await connect(stack.settings.zcbot_nats_url or "", "requeue-test")
    rt = await open_runtime("scheduler", stack.settings)
    try:
        js = nc.jetstream()
        lost = await js.get_last_msg(topo.runs_stream, topo.run_subject(task["task_id"]))
        await js.delete_msg(topo.runs_stream, lost.seq)  # no runner will ever see it now
        svc = SchedulerService(config=SchedulerConfig.defaults(tick_seconds=0, requeue_after_seconds=0.5))
        await svc.start(rt)
        await asyncio.sleep(0.6)
        assert (await svc.tick()).requeued == 1
        assert (await svc.tick()).requeued == 0  # in the stream again: left alone
        again = await js.get_last_msg(topo.runs_stream, topo.run_subject(task["task_id"]))
        assert again.headers["Nats-Msg-Id"] == f"{r.json()['run_id']}:requeue:1"
        await stack.add_runner()
        events = await asyncio.wait_for(reader, 120)
        await svc.drain()
    finally:
        await close_runtime(rt)
        await nc.close()
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events[-3:]
    results = [e for e in events if e["event"] == "tool_result"]
    assert results and results[0]["data"]["ok"] is True  # the executor took the fresh grant
    rows = await db_rows_async(stack.settings.zcbot_db_url, "select run_status from tasks where task_id=%s",
                               task["task_id"])
    assert rows == [("idle",)]
    answers = await db_rows_async(stack.settings.zcbot_db_url,
                                  "select payload->>'content' from messages where task_id=%s and payload->>'role'='assistant' order by idx",
                                  task["task_id"])
    assert answers[-1][0] == "requeued and done"


async def test_a_message_queued_behind_a_run_whose_runner_died_after_its_end_starts_promptly(bare_stack: Stack) -> None:
    """Issue 42: the runner ends a run (which queues the next enqueued message's run in the same
    transaction), publishes `done` and dies before publishing the next request. The scheduler saw
    the `done`: the queued run is published again seconds later, not after the sweep's minute."""
    from zcbot_core.bus import RunRequest, decode, encode
    from zcbot_core.bus import events as ev
    from zcbot_core.runstate.claim import claim_run
    from zcbot_core.runstate.transitions import end_run

    stack = bare_stack
    stack.fake.script("KEY-behind", [{"text": "the one behind ran"}])
    token = await stack.login("behind")
    tid = (await stack.create_task(token, "Behind a dead runner"))["task_id"]
    first = (await stack.post(token, tid, "hello")).json()  # queued: no runner is up yet
    behind = await stack.post(token, tid, "KEY-behind next", multitask="enqueue")
    assert behind.status_code == 202, behind.text
    rt = await open_runtime("scheduler", stack.settings.model_copy(update={"zcbot_run_publish_retry_seconds": 1.0}))
    dead = await open_runtime("runner", stack.settings)  # plays the runner that dies
    svc = SchedulerService(config=SchedulerConfig.defaults(tick_seconds=0.5, requeue_after_seconds=60))
    try:
        await svc.start(rt)
        psub = await dead.js.pull_subscribe_bind(durable=dead.topo.runners_consumer, stream=dead.topo.runs_stream)
        req = decode((await psub.fetch(1, timeout=10))[0].data, RunRequest)
        assert req.run_id == first["run_id"] and await claim_run(dead.autocommit, req, "dead-runner") is not None
        outcome = await end_run(dead.autocommit, dead.sessions, dead.js, dead.topo, task_id=tid, run_id=req.run_id,
                                status="ok", error=None, timings={}, owner="dead-runner")
        nxt = outcome.next_request
        assert nxt is not None and nxt.run_id == behind.json()["run_id"]  # queued; the dying runner never publishes it
        await dead.js.publish(dead.topo.event_subject(tid), encode(ev.Done(run_id=req.run_id, status="ok")))
        await close_runtime(dead)  # no next request, no ack
        dead = None
        started = asyncio.get_running_loop().time()

        async def republished() -> bool:
            try:
                msg = await rt.js.get_last_msg(rt.topo.runs_stream, rt.topo.run_subject(tid))
            except Exception:
                return False
            return msg.headers is not None and msg.headers.get("Nats-Msg-Id") == f"{nxt.run_id}:requeue:1"

        await wait_for(republished, timeout=15, what="the queued run published again")
        waited = asyncio.get_running_loop().time() - started
        assert waited < 10, waited  # 1 s publish retry + 2 s, and the tick: far from the sweep's 60 s
        reader = asyncio.create_task(stack.events(token, behind.json()["events_url"], timeout=60))
        await stack.add_runner()
        events = await asyncio.wait_for(reader, 60)
        await svc.drain()
    finally:
        if dead is not None:
            await close_runtime(dead)
        await close_runtime(rt)
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events[-3:]
    rows = await db_rows_async(stack.settings.zcbot_db_url, "select run_status from tasks where task_id=%s", tid)
    assert rows == [("idle",)]
