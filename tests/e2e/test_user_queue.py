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


# ---- issue 34: the queue's edges through HTTP -------------------------------------------------------

@pytest.fixture
def one_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZCBOT_MAX_RUNS_PER_USER", "1")


def _history(stack: Stack, task_id: str) -> list[tuple[str, str]]:
    rows = db_rows(stack.settings.zcbot_db_url, "select payload from messages where task_id=:t order by idx", t=task_id)
    return [(p["role"], p["content"]) for (p,) in rows]


async def test_an_interrupt_of_a_waiting_run_takes_its_place_and_both_are_answered(one_slot: None, stack: Stack) -> None:
    stack.fake.script("KEY-long", [{"text": "long " * 20, "chunks": ["long "] * 20, "chunk_delay": 0.1}])
    token = await stack.login("iris")
    busy, waiting_task, later_task = [await stack.create_task(token, name) for name in ("busy", "waits", "later")]
    r = await stack.post(token, busy["task_id"], "KEY-long talk for a while")
    busy_events = asyncio.create_task(stack.events(token, r.json()["events_url"]))
    first = await stack.post(token, waiting_task["task_id"], "first question")
    later = await stack.post(token, later_task["task_id"], "a later task")
    assert [(x.json()["status"], x.json()["position"]) for x in (first, later)] == [("waiting", 1), ("waiting", 2)]
    replaced = asyncio.create_task(stack.events(token, first.json()["events_url"], timeout=20))

    # The interrupt takes the waiting run's place (still first in the queue), the waiting run is answered.
    interrupt = await stack.post(token, waiting_task["task_id"], "never mind, this instead", multitask="interrupt")
    assert interrupt.status_code == 202, interrupt.text
    assert (interrupt.json()["status"], interrupt.json()["position"]) == ("waiting", 1)
    old = await asyncio.wait_for(replaced, 20)
    assert old[-1]["event"] == "done" and old[-1]["data"]["status"] == "cancelled", old
    row = db_rows(stack.settings.zcbot_db_url, "select run_status, run_id from tasks where task_id=:t",
                  t=waiting_task["task_id"])
    assert row == [("waiting", interrupt.json()["run_id"])]

    # Then it runs, before the later task (its place), and is answered; nothing is left cancelling.
    new = await stack.events(token, interrupt.json()["events_url"], timeout=30)
    assert new[-1]["event"] == "done" and new[-1]["data"]["status"] == "ok", new
    assert (await asyncio.wait_for(busy_events, 30))[-1]["data"]["status"] == "ok"
    later_events = await stack.events(token, later.json()["events_url"], timeout=30)
    assert later_events[-1]["data"]["status"] == "ok"
    assert _history(stack, waiting_task["task_id"]) == [
        ("user", "first question"), ("assistant", "(stopped)"),  # answered in history as a runner answers a stopped run
        ("user", "never mind, this instead"), ("assistant", "ok: never mind, this instead")]
    assert db_rows(stack.settings.zcbot_db_url, "select count(*) from tasks where user_id='iris' and run_status <> 'idle'"
                   ) == [(0,)]


async def test_a_cancelled_waiting_run_lets_the_message_behind_it_run(one_slot: None, stack: Stack) -> None:
    stack.fake.script("KEY-long", [{"text": "long " * 20, "chunks": ["long "] * 20, "chunk_delay": 0.1}])
    token = await stack.login("cato")
    busy, task = [await stack.create_task(token, name) for name in ("busy", "waits")]
    r = await stack.post(token, busy["task_id"], "KEY-long talk for a while")
    busy_events = asyncio.create_task(stack.events(token, r.json()["events_url"]))
    waiting = await stack.post(token, task["task_id"], "first question")
    behind = await stack.post(token, task["task_id"], "and a follow-up", multitask="enqueue")
    assert (waiting.json()["status"], behind.json()["status"]) == ("waiting", "pending")

    async with stack.client(token) as c:
        cancel = await c.post(f"/v1/tasks/{task['task_id']}/cancel")
    assert (cancel.status_code, cancel.json()["status"]) == (202, "cancelled"), cancel.text
    # The follow-up waits in the cancelled run's place, then runs once the slot frees, and is answered.
    row = db_rows(stack.settings.zcbot_db_url, "select run_status, run_id, pending_inputs from tasks where task_id=:t",
                  t=task["task_id"])
    assert row == [("waiting", behind.json()["run_id"], [])]
    follow_up = await stack.events(token, behind.json()["events_url"], timeout=30)
    assert follow_up[-1]["event"] == "done" and follow_up[-1]["data"]["status"] == "ok", follow_up
    assert (await asyncio.wait_for(busy_events, 30))[-1]["data"]["status"] == "ok"
    assert _history(stack, task["task_id"]) == [
        ("user", "first question"), ("assistant", "(cancelled)"),  # the cancelled waiting run, answered in history
        ("user", "and a follow-up"), ("assistant", "ok: and a follow-up")]
