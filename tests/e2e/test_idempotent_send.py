"""A message resent with its `Idempotency-Key` after the 503 "saved, send again" (issue 42, fault
suite seed 4202): the saved message's own run is queued again instead of a second copy being stored;
a resend of a message that ran answers with that run; another key is another message. The bus
refusal is injected at the one publish call of the submit path (the rest of the stack is real)."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers.bus_faults import bus_refuses_once
from tests.helpers.db import db_rows
from tests.helpers.stack import Stack
from zcbot_core.runstate import submit


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def stored(stack: Stack, task_id: str) -> list[tuple[int, str, str]]:
    return [(r[0], r[1], r[2]) for r in db_rows(
        stack.settings.zcbot_db_url,
        "select idx, payload->>'role', coalesce(payload->>'content', '') from messages where task_id=:t order by idx",
        t=task_id)]


def run_state(stack: Stack, task_id: str) -> tuple[str, str, str | None]:
    row = db_rows(stack.settings.zcbot_db_url, "select run_status, run_id, run_error from tasks where task_id=:t",
                  t=task_id)[0]
    return row[0], row[1], row[2]


async def send(stack: Stack, token: str, task_id: str, content: str, key: str) -> httpx.Response:
    async with stack.client(token) as c:
        return await c.post(f"/v1/tasks/{task_id}/messages", json={"content": content},
                            headers={"Idempotency-Key": key})


async def run_ends_ok(stack: Stack, token: str, url: str) -> None:
    events = await stack.events(token, url)
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events[-3:]


async def test_a_resend_with_the_same_key_runs_the_saved_message_once(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    stack.fake.script("KEY-idem1", [{"text": "答一"}])
    token = await stack.login("idem-sender")
    task = (await stack.create_task(token, "重试"))["task_id"]
    refused = bus_refuses_once(monkeypatch)

    r = await send(stack, token, task, "KEY-idem1 问题", "k-1")
    assert r.status_code == 503, r.text
    assert "Idempotency-Key" in r.json()["detail"] or "Idempotency-Key" in r.text
    assert stored(stack, task) == [(0, "user", "KEY-idem1 问题")]
    assert run_state(stack, task) == ("error", refused[0], submit.UNPUBLISHED_ERROR)
    calls = len(stack.fake.requests)

    # The retry: the same message's run, queued again; nothing new stored.
    r = await send(stack, token, task, "KEY-idem1 问题", "k-1")
    assert r.status_code == 202, r.text
    out = r.json()
    assert (out["run_id"], out["status"], out["message_idx"]) == (refused[0], "queued", 0)
    await run_ends_ok(stack, token, out["events_url"])
    assert stored(stack, task) == [(0, "user", "KEY-idem1 问题"), (1, "assistant", "答一")]
    assert len(stack.fake.requests) == calls + 1  # one run, one model call
    seen = [m for m in stack.fake.requests[-1]["messages"] if m["role"] != "system"]
    assert seen == [{"role": "user", "content": "KEY-idem1 问题"}]  # once, and without the key

    # Sent once more with the key (a lost answer): the run that ran, nothing stored, nothing run.
    r = await send(stack, token, task, "KEY-idem1 问题", "k-1")
    assert r.status_code == 200, r.text
    assert (r.json()["run_id"], r.json()["status"], r.json()["message_idx"]) == (refused[0], "ended", 0)
    assert len(stored(stack, task)) == 2 and len(stack.fake.requests) == calls + 1
    # The page's way (the answer is the run's event stream): that run's events, to its `done`.
    async with stack.client(token) as c, c.stream(
            "POST", f"/v1/tasks/{task}/messages", json={"content": "KEY-idem1 问题"},
            headers={"Idempotency-Key": "k-1", "Accept": "text/event-stream"}) as resp:
        body = (await resp.aread()).decode()
    assert resp.status_code == 200 and resp.headers["x-run-id"] == refused[0], body
    assert "答一" in body and "event: done" in body, body
    assert len(stored(stack, task)) == 2 and len(stack.fake.requests) == calls + 1

    # Another key is another message, even with the same text.
    r = await send(stack, token, task, "KEY-idem1 问题", "k-2")
    assert r.status_code == 202, r.text
    assert r.json()["run_id"] != refused[0]
    await run_ends_ok(stack, token, r.json()["events_url"])
    assert [row[1:] for row in stored(stack, task)] == [("user", "KEY-idem1 问题"), ("assistant", "答一")] * 2


async def test_the_key_is_per_task_and_checked(stack: Stack) -> None:
    stack.fake.script("KEY-idem2", [{"text": "答二"}])
    token = await stack.login("idem-two")
    first, second = [(await stack.create_task(token, name))["task_id"] for name in ("甲", "乙")]
    for task in (first, second):  # one key, two tasks: two messages
        r = await send(stack, token, task, "KEY-idem2 问", "same-key")
        assert r.status_code == 202, r.text
        await run_ends_ok(stack, token, r.json()["events_url"])
        assert len(stored(stack, task)) == 2
    r = await send(stack, token, first, "KEY-idem2 问", "bad key with spaces")
    assert 400 <= r.status_code < 500 and r.status_code != 404, r.text
    r = await send(stack, token, first, "KEY-idem2 另一个问题", "same-key")  # the key of another message
    assert r.status_code == 409 and r.json()["code"] == "idempotency_key_reused", r.text
    assert len(stored(stack, first)) == 2


async def test_a_resend_of_a_message_waiting_behind_the_active_run_is_not_queued_twice(stack: Stack) -> None:
    stack.fake.script("KEY-idem3", [{"text": "慢", "first_delay": 2.0}])
    stack.fake.script("KEY-idem4", [{"text": "后"}])
    token = await stack.login("idem-queue")
    task = (await stack.create_task(token, "排队"))["task_id"]
    first = await send(stack, token, task, "KEY-idem3 先", "q-1")
    assert first.status_code == 202, first.text
    behind = []
    for _ in range(2):
        async with stack.client(token) as c:
            r = await c.post(f"/v1/tasks/{task}/messages", json={"content": "KEY-idem4 后", "multitask": "enqueue"},
                             headers={"Idempotency-Key": "q-2"})
        behind.append(r)
    assert [r.status_code for r in behind] == [202, 200], [r.text for r in behind]
    assert behind[0].json()["run_id"] == behind[1].json()["run_id"] and behind[1].json()["status"] == "pending"
    await run_ends_ok(stack, token, first.json()["events_url"])
    await run_ends_ok(stack, token, behind[0].json()["events_url"])
    assert [row[1:] for row in stored(stack, task)] == [
        ("user", "KEY-idem3 先"), ("assistant", "慢"), ("user", "KEY-idem4 后"), ("assistant", "后")]
    # The started message kept its key: sent again now, it answers with its run, nothing stored.
    r = await send(stack, token, task, "KEY-idem4 后", "q-2")
    assert r.status_code == 200 and r.json()["run_id"] == behind[0].json()["run_id"], r.text
    assert len(stored(stack, task)) == 4
