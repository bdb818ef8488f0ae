"""Fault: the gateway process dies (-9) while a client streams a run; the client resumes on the new one."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers.wait import wait_for
from tests.reliability.faults_support import Harness, assert_consistent, fake_llm, harness, roles, task_status  # noqa: F401

pytestmark = pytest.mark.heavy


async def test_gateway_kill9_and_restart_the_client_resumes_with_last_event_id_and_misses_nothing(
        harness: Harness) -> None:
    h = harness
    gateway = h.process("gateway")
    await h.runner()
    await gateway.wait_healthy_async(timeout=60)
    stack = h.stack()
    h.fake.script("KEY-gw-kill", [
        {"text": "first", "tool_calls": [{"name": "load_skill", "arguments": {"name": "no-such-skill"}}]},
        {"chunks": [f"g{i} " for i in range(60)], "chunk_delay": 0.1},
    ])
    token = await stack.login("gk")
    task = await stack.create_task(token, "gateway restart")
    run = (await stack.post(token, task["task_id"], "KEY-gw-kill stream")).json()
    follower = h.follower(token, task["task_id"], run["run_id"])  # reconnects with Last-Event-ID, like EventSource
    reader = asyncio.create_task(follower.run(timeout=60))
    await wait_for(lambda: follower.names().count("text") >= 5, what="client streaming")
    seen_before = len(follower.events)
    gateway.kill9()
    restarted = h.process("gateway")  # a new process on the same address
    await restarted.wait_healthy_async(timeout=60)

    events = await asyncio.wait_for(reader, 60)
    assert follower.connections >= 2 and follower.errors, (follower.connections, follower.errors)
    assert len(events) > seen_before and events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok"
    # The stream the client pieced together equals the full stream replayed by ?run_id=.
    full = await stack.events(token, run["events_url"])
    assert [e["id"] for e in events] == [e["id"] for e in full]
    assert [(e["event"], e["data"]) for e in events] == [(e["event"], e["data"]) for e in full]
    text = "".join(e["data"]["delta"] for e in events if e["event"] == "text")
    assert text.endswith("".join(f"g{i} " for i in range(60)))
    assert task_status(h.db_url, task["task_id"])[:2] == ("idle", None)
    assert roles(h.db_url, task["task_id"]) == ["user", "assistant", "tool", "assistant"]
    assert_consistent(h.db_url)
