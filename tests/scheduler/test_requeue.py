"""The queued-run sweep (issue 23 item 7): a run PostgreSQL says is `queued` whose request is gone
from the runs stream (here: deleted, as a power cut before the disk sync would lose it) is published
again by the scheduler and runs to its end, tool call included (the sweep signs a fresh grant)."""

from __future__ import annotations

import asyncio

import zcbot_core.llm.client  # noqa: F401,E402  (imported now: importing LiteLLM mid-test blocks the loop for seconds)
import zcbot_runner.service  # noqa: F401,E402
from tests.helpers.db import db_rows_async
from tests.helpers.stack import Stack, bare_stack, fake_llm  # noqa: F401  (fixtures)
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
