"""Fault: the runner process is killed (-9) mid-stream and mid-tool; another runner resumes (DESIGN §4.3)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.helpers.db import db_rows
from tests.helpers.wait import wait_for
from tests.reliability.faults_support import Harness, assert_consistent, fake_llm, harness, roles, task_status  # noqa: F401
from zcbot_core.agent.loop import RESTARTED_RESULT

pytestmark = pytest.mark.heavy

STREAM = [{"chunks": [f"s{i} " for i in range(40)], "chunk_delay": 0.1}]
TOOL = [
    {"text": "writing the marker", "tool_calls": [{"name": "shell", "arguments": {"command": "sleep 3; echo done > marker"}}]},
    {"text": "the marker step is over"},
]


async def test_runner_kill9_mid_stream_and_mid_tool_is_resumed_by_another_runner(harness: Harness) -> None:
    h = harness
    await h.executor()
    await h.gateway()
    victim = h.process("runner")
    await victim.wait_healthy_async(timeout=60)
    stack = h.stack()
    h.fake.script("KEY-kill-stream", STREAM)
    h.fake.script("KEY-kill-tool", TOOL)
    token = await stack.login("rk")
    streaming = await stack.create_task(token, "mid-stream")
    tooling = await stack.create_task(token, "mid-tool")
    r1 = (await stack.post(token, streaming["task_id"], "KEY-kill-stream talk")).json()
    r2 = (await stack.post(token, tooling["task_id"], "KEY-kill-tool work")).json()
    f1 = h.follower(token, streaming["task_id"], r1["run_id"])
    f2 = h.follower(token, tooling["task_id"], r2["run_id"])
    readers = [asyncio.create_task(f.run(timeout=60)) for f in (f1, f2)]

    # Both runs are in flight on the victim: one streaming text, one waiting on `sleep 3`.
    await wait_for(lambda: f1.names().count("text") >= 3 and "tool_call" in f2.names(), what="both runs in flight")
    assert "tool_result" not in f2.names()
    victim.kill9()
    assert not victim.alive

    await h.runner()  # another runner: JetStream redelivers both requests after ack_wait
    await asyncio.wait_for(asyncio.gather(*readers), 60)

    for f in (f1, f2):
        assert f.done is not None and f.done["data"]["status"] == "ok", f.events
        assert [e["data"]["attempt"] for e in f.events if e["event"] == "run_start"] == [1, 2]
    # The interrupted call got the honest "may or may not have run" result (its real result was lost
    # with the runner), and the model's next turn ran.
    assert f2.done["data"]["final_text"] == "the marker step is over"
    url = h.db_url
    assert roles(url, tooling["task_id"]) == ["user", "assistant", "tool", "assistant"]
    assert roles(url, streaming["task_id"]) == ["user", "assistant"]
    content = db_rows(url, "select payload->>'content' from messages where task_id=:t and idx=2", t=tooling["task_id"])[0][0]
    assert content == RESTARTED_RESULT, content  # the dead runner never recorded a real result
    # ... and "may or may not" is the truth: the sandboxed command outlived the runner and ran.
    storage = Path(h.env["ZCBOT_STORAGE_ROOT"])
    markers = await wait_for(lambda: list(storage.rglob("marker")), timeout=10, what="marker written")
    assert markers[0].read_text().strip() == "done"
    for tid in (streaming["task_id"], tooling["task_id"]):
        assert task_status(url, tid)[:2] == ("idle", None)
    assert_consistent(url)


async def test_a_runner_that_stops_heartbeating_yields_the_run_to_the_runner_that_took_it_over(harness: Harness) -> None:
    """A runner stalled or cut off from NATS past ack_wait (alive, still executing) while JetStream
    redelivers its run to another runner: exactly one of them records the run's steps and ends it."""
    h = harness
    await h.gateway()
    stalled = await h.runner()

    async def no_heartbeats(active: object) -> None:
        await asyncio.Event().wait()

    stalled.service.executor._heartbeat = no_heartbeats  # keeps executing, never extends ack_wait
    h.fake.script("KEY-stall", [{"chunks": [f"z{i} " for i in range(45)], "chunk_delay": 0.1}])
    stack = h.stack()
    token = await stack.login("st")
    task = await stack.create_task(token, "stalled runner")
    run = (await stack.post(token, task["task_id"], "KEY-stall talk")).json()
    follower = h.follower(token, task["task_id"], run["run_id"])
    reader = asyncio.create_task(follower.run(timeout=60))
    await wait_for(lambda: "text" in follower.names(), what="first runner streaming")
    await stalled.service.worker.stop()  # it takes no new deliveries: the redelivery goes to the other
    other = await h.runner()

    events = await asyncio.wait_for(reader, 60)
    # Let both executions play out before looking at what was recorded.
    await wait_for(lambda: not stalled.service.executor.active and not other.service.executor.active,
                   what="both executions over")
    assert [e["data"]["attempt"] for e in events if e["event"] == "run_start"] == [1, 2]
    assert [e["event"] for e in events].count("done") == 1 and events[-1]["data"]["status"] == "ok"
    # The first runner's late answer was fenced off: one answer stored, the run ended once.
    assert roles(h.db_url, task["task_id"]) == ["user", "assistant"]
    assert task_status(h.db_url, task["task_id"])[:2] == ("idle", None)
    assert_consistent(h.db_url)
