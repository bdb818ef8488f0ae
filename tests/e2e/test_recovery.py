"""Crash recovery and horizontal scale: runner kill -9, SIGTERM hand-back, two gateways (issue 3, 10).

The two runner faults start runners as processes (~20 s each on 2 cores): marked `heavy`, they run in
the full run (`pytest -m heavy`, .ci/run)."""

from __future__ import annotations

import asyncio

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
