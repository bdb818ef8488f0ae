"""Fault: the runner process is killed (-9) mid-stream and mid-tool; another runner resumes (DESIGN §4.3)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.helpers.db import db_rows
from tests.helpers.stream import stored_events
from tests.helpers.wait import wait_for
from tests.reliability.faults_support import (  # noqa: F401
    ACK_WAIT_SECONDS,
    Harness,
    assert_consistent,
    fake_llm,
    harness,
    roles,
    task_status,
)
from zcbot_core.agent.loop import RESTARTED_RESULT
from zcbot_core.bus import events as ev
from zcbot_runner import execution

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


@pytest.mark.parametrize("takeover_message", [True, False], ids=["takeover-message", "ownership-check"])
async def test_a_runner_that_stops_heartbeating_yields_the_run_to_the_runner_that_took_it_over(
        harness: Harness, monkeypatch: pytest.MonkeyPatch, takeover_message: bool) -> None:
    """A runner stalled or cut off from NATS past ack_wait (alive, still executing) while JetStream
    redelivers its run to another runner (issue 23: a leader election longer than ack_wait): exactly
    one of them records the run's steps and ends it, and the stalled one stops at once and publishes
    nothing more, so the stream holds one copy of the answer. Without the takeover message (lost),
    the stalled runner's ownership check stops it within one ack_wait."""
    h = harness
    await h.gateway()
    stalled = await h.runner()

    async def no_heartbeats(active: object) -> None:
        await asyncio.Event().wait()

    stalled.service.executor._heartbeat = no_heartbeats  # keeps executing, never extends ack_wait
    async def off(*args: object, **kwargs: object) -> None:
        return None

    # Each path alone: the takeover message without the ownership check, and the check with the message lost.
    monkeypatch.setattr(execution, "watch_ownership" if takeover_message else "announce_takeover", off)
    chunks = [f"z{i} " for i in range(45)]
    h.fake.script("KEY-stall", [{"chunks": chunks, "chunk_delay": 0.1}])
    stack = h.stack()
    token = await stack.login("st")
    task = await stack.create_task(token, "stalled runner")
    run = (await stack.post(token, task["task_id"], "KEY-stall talk")).json()
    follower = h.follower(token, task["task_id"], run["run_id"])
    reader = asyncio.create_task(follower.run(timeout=60))
    await wait_for(lambda: "text" in follower.names(), what="first runner streaming")
    await stalled.service.worker.stop()  # it takes no new deliveries: the redelivery goes to the other
    other = await h.runner()

    stalled_sink = stalled.service.executor.active[task["task_id"]].sink
    await wait_for(lambda: task["task_id"] in other.service.executor.active, timeout=20, what="redelivered")
    await wait_for(lambda: [e["event"] for e in follower.events].count("run_start") == 2, what="attempt 2 started")
    taken = time.monotonic()
    # The message stops it at once; the ownership check runs every ack_wait/3.
    limit = 1.5 if takeover_message else float(ACK_WAIT_SECONDS) / 3 + 1.5
    await wait_for(lambda: not stalled.service.executor.active, timeout=limit + 5, what="stalled execution stopped")
    stopped_after = time.monotonic() - taken
    assert stopped_after < limit, stopped_after
    assert stalled_sink.discarded
    sent_when_stopped = stalled_sink.seq

    events = await asyncio.wait_for(reader, 60)
    await wait_for(lambda: not other.service.executor.active, what="both executions over")
    # Attempt 2 or 3: a pull request the stalled runner left open may take delivery 2 (it keeps its
    # execution: "redelivery of a run in progress here"), the other runner then gets delivery 3.
    attempts = [e["data"]["attempt"] for e in events if e["event"] == "run_start"]
    assert len(attempts) == 2 and attempts[0] == 1 and attempts[1] >= 2, attempts
    assert [e["event"] for e in events].count("done") == 1 and events[-1]["data"]["status"] == "ok"
    # What the stream stored: after attempt 2 started, one copy of the answer, no chunk of the
    # superseded execution interleaved, and nothing after the one `done`.
    await asyncio.sleep(0.5)  # anything the stalled runner still had queued would land by now
    stored = await stored_events(other.service.rt.js, other.service.rt.topo, task["task_id"])
    starts = [i for i, e in enumerate(stored) if isinstance(e, ev.RunStart)]
    assert [stored[i].attempt for i in starts] == attempts
    assert stalled_sink.seq == sent_when_stopped  # nothing published by the stalled runner once stopped
    after = "".join(e.delta for e in stored[starts[1]:] if isinstance(e, ev.TextDelta))
    if takeover_message:
        assert after == "".join(chunks)
    else:  # a lost message: the chunks the stalled runner sent until its ownership check, no more
        assert len(after) - len("".join(chunks)) <= len("".join(chunks[:int(limit / 0.1)]))
    assert [type(e) for e in stored].count(ev.Done) == 1 and isinstance(stored[-1], ev.Done)
    assert not any(isinstance(e, ev.Cancelled) for e in stored)  # the stop is silent: not the user's cancel
    # The first runner's late answer was fenced off: one answer stored, the run ended once.
    assert roles(h.db_url, task["task_id"]) == ["user", "assistant"]
    assert task_status(h.db_url, task["task_id"])[:2] == ("idle", None)
    assert_consistent(h.db_url)
