"""Over the per-user cap a run waits in its user's FIFO (issue 26 item 2, Slark D-5), through the real
gateway, runner, NATS and PostgreSQL: its stream says `queued` with its place, a cancel ends it at
once, only a full queue answers 429, and a waiting run starts when the user's slot frees."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers.db import db_rows
from tests.helpers.stack import Stack


@pytest.fixture
def one_slot_one_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before `stack` builds its settings (fixtures are set up in argument order).
    monkeypatch.setenv("ZCBOT_MAX_RUNS_PER_USER", "1")
    monkeypatch.setenv("ZCBOT_MAX_WAITING_RUNS_PER_USER", "1")


async def test_a_run_over_the_cap_waits_says_its_place_and_starts_when_the_slot_frees(
        one_slot_one_waiting: None, stack: Stack) -> None:
    stack.fake.script("KEY-long", [{"text": "long " * 30, "chunks": ["long "] * 30, "chunk_delay": 0.1}])
    token = await stack.login("quinn")
    busy, first, second = [await stack.create_task(token, name) for name in ("busy", "first", "second")]
    r = await stack.post(token, busy["task_id"], "KEY-long talk for a while")
    assert (r.status_code, r.json()["status"]) == (202, "queued"), r.text
    busy_events = asyncio.create_task(stack.events(token, r.json()["events_url"]))

    waiting = await stack.post(token, first["task_id"], "hello")
    assert (waiting.status_code, waiting.json()["status"], waiting.json()["position"]) == (202, "waiting", 1)
    full = await stack.post(token, second["task_id"], "hello")
    assert full.status_code == 429 and "waiting" in full.json()["detail"], full.text

    # A cancel while waiting ends the run at once; its stream said where it stood, then the end.
    reader = asyncio.create_task(stack.events(token, waiting.json()["events_url"], timeout=10))
    await asyncio.sleep(0.5)
    async with stack.client(token) as c:
        cancel = await c.post(f"/v1/tasks/{first['task_id']}/cancel")
    assert (cancel.status_code, cancel.json()["status"]) == (202, "cancelled")
    cancelled = await asyncio.wait_for(reader, 10)
    assert [e["event"] for e in cancelled] == ["queued", "done"]
    assert cancelled[0]["data"]["position"] == 1 and cancelled[-1]["data"]["status"] == "cancelled"

    # Its place is free again: the next message waits, its stream says so, then runs once the slot frees.
    response, events = await stack.post_stream(token, second["task_id"], "after the long one", timeout=30)
    assert response.headers["x-run-status"] == "waiting" and response.headers["x-queue-position"] == "1"
    names = [e["event"] for e in events]
    assert names[0] == "queued" and events[0]["data"]["position"] == 1
    assert "run_start" in names and names[-1] == "done" and events[-1]["data"]["status"] == "ok", names
    busy_done = await asyncio.wait_for(busy_events, 10)
    assert busy_done[-1]["data"]["status"] == "ok"
    started = db_rows(stack.settings.zcbot_db_url,
                      "select task_id, run_status, run_started_at from tasks where user_id='quinn' and task_id in "
                      "(:a, :b)", a=busy["task_id"], b=second["task_id"])
    assert {row[1] for row in started} == {"idle"}
