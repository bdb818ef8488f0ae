"""Fault: the executor process is killed (-9) while a tool call runs on it (DESIGN §3 tool calls, §5)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.helpers.executor_stack import wait_processes
from tests.helpers.wait import wait_for
from tests.reliability.faults_support import Harness, assert_consistent, fake_llm, harness, roles, task_status  # noqa: F401

pytestmark = pytest.mark.heavy

SLOW_TOOL = [
    {"tool_calls": [{"name": "shell", "arguments": {"command": "sleep 4.0427; echo late > late.txt"}}]},
    {"text": "the executor went away; I will retry later"},
]
AFTER = [
    {"tool_calls": [{"name": "shell", "arguments": {"command": "echo alive-again"}}]},
    {"text": "the sandbox works again"},
]


async def test_executor_kill9_mid_tool_gives_an_honest_result_and_a_restart_serves_again(harness: Harness) -> None:
    h = harness
    executor = h.process("executor")
    await h.gateway()
    await h.runner()
    await executor.wait_healthy_async(timeout=60)
    stack = h.stack()
    h.fake.script("KEY-ex-kill", SLOW_TOOL)
    h.fake.script("KEY-ex-after", AFTER)
    token = await stack.login("ek")
    task = await stack.create_task(token, "executor dies")
    run = (await stack.post(token, task["task_id"], "KEY-ex-kill go")).json()
    follower = h.follower(token, task["task_id"], run["run_id"])
    reader = asyncio.create_task(follower.run(timeout=60))
    await wait_for(lambda: "tool_call" in follower.names(), what="tool call sent")
    await wait_processes(lambda c: c == "sleep 4.0427")  # the command runs inside the sandbox now
    executor.kill9()
    killed_at = asyncio.get_running_loop().time()

    events = await asyncio.wait_for(reader, 40)
    results = [e["data"] for e in events if e["event"] == "tool_result"]
    assert len(results) == 1 and results[0]["name"] == "shell" and not results[0]["ok"], results
    assert "stopped during the call" in results[0]["preview"] and "may or may not" in results[0]["preview"]
    # The run went on to the model's next turn and finished normally.
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events
    assert [e["event"] for e in events].count("llm_start") == 2
    assert roles(h.db_url, task["task_id"]) == ["user", "assistant", "tool", "assistant"]

    # A restarted executor (same host name, so the user's sandbox lease still points at it) serves
    # the next run's tool call.
    again = h.process("executor")
    await again.wait_healthy_async(timeout=60)
    run2 = (await stack.post(token, task["task_id"], "KEY-ex-after try again")).json()
    events2 = await h.follower(token, task["task_id"], run2["run_id"]).run(timeout=40)
    results2 = [e["data"] for e in events2 if e["event"] == "tool_result"]
    assert len(results2) == 1 and results2[0]["ok"] and "alive-again" in results2[0]["preview"], results2
    assert events2[-1]["data"]["status"] == "ok"
    assert task_status(h.db_url, task["task_id"])[:2] == ("idle", None)
    assert roles(h.db_url, task["task_id"]) == ["user", "assistant", "tool", "assistant"] * 2
    assert_consistent(h.db_url)
    # The killed executor's sandboxed command died with it (it would have written late.txt 4 s in).
    await asyncio.sleep(max(0.0, killed_at + 5.0 - asyncio.get_running_loop().time()))
    assert not list(Path(h.env["ZCBOT_STORAGE_ROOT"]).rglob("late.txt"))
