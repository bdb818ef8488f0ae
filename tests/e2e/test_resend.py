"""Edit-and-resend and regenerate (issue 37): `POST /v1/tasks/{id}/messages/{idx}/resend` replaces the
conversation from a user message on. Nothing is deleted: the replaced messages stay in the history
with a `superseded:` kind, and the model no longer sees them. Also the model-profile list the page's
per-task picker reads (`GET /v1/models`) and its refusal. One stack for the module."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.db import db_rows
from tests.helpers.stack import Stack


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


def stored(stack: Stack, task_id: str) -> list[tuple[int, str, str, str]]:
    return [(r[0], r[1], r[2], r[3]) for r in db_rows(
        stack.settings.zcbot_db_url,
        "select idx, kind, payload->>'role', coalesce(payload->>'content', '') from messages"
        " where task_id=:t order by idx", t=task_id)]


async def run(stack: Stack, token: str, url: str) -> str:
    events = await stack.events(token, url)
    assert events[-1]["event"] == "done", events[-3:]
    return str(events[-1]["data"]["status"])


def seen_by_model(stack: Stack) -> list[tuple[str, str]]:
    """The roles and texts of the model's last request (the system prompt left out)."""
    last = stack.fake.requests[-1]["messages"]
    return [(m["role"], m["content"] if isinstance(m["content"], str) else str(m["content"]))
            for m in last if m["role"] != "system"]


async def resend(stack: Stack, token: str, task_id: str, idx: int, **body: Any) -> Any:
    async with stack.client(token) as c:
        return await c.post(f"/v1/tasks/{task_id}/messages/{idx}/resend", json=body)


async def test_regenerate_and_edit_replace_the_later_conversation_without_deleting_it(stack: Stack) -> None:
    stack.fake.script("KEY-rs1", [{"text": "答一"}])
    stack.fake.script("KEY-rs2", [{"text": "答二"}])
    token = await stack.login("resender")
    task = (await stack.create_task(token, "重发"))["task_id"]
    for text in ("KEY-rs1 第一问", "KEY-rs2 第二问"):
        r = await stack.post(token, task, text)
        assert r.status_code == 202, r.text
        assert await run(stack, token, r.json()["events_url"]) == "ok"

    # Regenerate the last answer: the same question again, the old answer kept but replaced.
    stack.fake.script("KEY-rs2", [{"text": "答二·新"}])
    r = await resend(stack, token, task, 2)
    assert r.status_code == 202 and r.json()["message_idx"] == 4, r.text
    assert await run(stack, token, r.json()["events_url"]) == "ok"
    assert stored(stack, task) == [
        (0, "chat", "user", "KEY-rs1 第一问"), (1, "chat", "assistant", "答一"),
        (2, "superseded:chat", "user", "KEY-rs2 第二问"), (3, "superseded:chat", "assistant", "答二"),
        (4, "chat", "user", "KEY-rs2 第二问"), (5, "chat", "assistant", "答二·新")]
    assert seen_by_model(stack) == [("user", "KEY-rs1 第一问"), ("assistant", "答一"), ("user", "KEY-rs2 第二问")]

    # Edit the first question: everything after it is replaced; the model sees only the new text.
    stack.fake.script("KEY-rs3", [{"text": "答三"}])
    r = await resend(stack, token, task, 0, content="KEY-rs3 改过的问题")
    assert r.status_code == 202, r.text
    assert await run(stack, token, r.json()["events_url"]) == "ok"
    rows = stored(stack, task)
    assert [k for _, k, _, _ in rows[:6]] == ["superseded:chat"] * 6
    assert rows[6:] == [(6, "chat", "user", "KEY-rs3 改过的问题"), (7, "chat", "assistant", "答三")]
    assert seen_by_model(stack) == [("user", "KEY-rs3 改过的问题")]
    # The history page still lists every message, in order, the replaced ones marked.
    async with stack.client(token) as c:
        page = (await c.get(f"/v1/tasks/{task}/messages")).json()
    assert [m["kind"] for m in page["items"]] == ["superseded:chat"] * 6 + ["chat", "chat"]


async def test_resend_refusals_are_json_with_a_code_and_change_nothing(stack: Stack) -> None:
    stack.fake.script("KEY-rs-slow", [{"text": "慢", "first_delay": 1.5}])
    token = await stack.login("refusedresend")
    task = (await stack.create_task(token, "拒绝"))["task_id"]
    r = await stack.post(token, task, "KEY-rs-slow 问")
    assert r.status_code == 202
    # While the run is active: 409 run_conflict, nothing marked.
    busy = await resend(stack, token, task, 0)
    assert busy.status_code == 409 and busy.json()["code"] == "run_conflict", busy.text
    assert all(k == "chat" for _, k, _, _ in stored(stack, task))
    assert await run(stack, token, r.json()["events_url"]) == "ok"

    for idx, status, code in ((1, 404, "message_not_found"), (99, 404, "message_not_found")):
        out = await resend(stack, token, task, idx)
        assert (out.status_code, out.json()["code"]) == (status, code), out.text
        assert out.headers["content-type"].startswith("application/problem+json")
    assert (await resend(stack, token, task, 0, content="")).status_code == 422
    assert (await resend(stack, token, task, -1)).status_code == 422
    other = await stack.login("otherresend")
    stranger = await resend(stack, other, task, 0)
    assert (stranger.status_code, stranger.json()["code"]) == (404, "task_not_found")
    assert all(k == "chat" for _, k, _, _ in stored(stack, task))

    stack.fake.script("KEY-rs-slow", [{"text": "再答"}])
    assert (await resend(stack, token, task, 0)).status_code == 202
    await stack.settle()
    again = await resend(stack, token, task, 0)  # replaced already
    assert (again.status_code, again.json()["code"]) == (409, "message_not_resendable"), again.text


async def test_model_profiles_listed_and_an_unknown_one_refused(stack: Stack) -> None:
    token = await stack.login("modelpicker")
    task = (await stack.create_task(token, "模型"))["task_id"]
    async with stack.client(token) as c:
        listed = (await c.get("/v1/models")).json()
        names = [m["name"] for m in listed["items"]]
        assert names == sorted(names) and listed["default"] in names and listed["total"] == len(names)
        assert [m["name"] for m in listed["items"] if m["default"]] == [listed["default"]]
        assert all(set(m) == {"name", "model", "default", "thinking", "max_context"} for m in listed["items"])
        other = next(n for n in names if n != listed["default"]) if len(names) > 1 else names[0]
        ok = await c.patch(f"/v1/tasks/{task}", json={"model_profile": other})
        assert ok.status_code == 200 and ok.json()["model_profile"] == other
        bad = await c.patch(f"/v1/tasks/{task}", json={"model_profile": "没有这个模型"})
        assert bad.status_code == 400 and bad.json()["code"] == "unknown_model_profile", bad.text
        assert (await c.get(f"/v1/tasks/{task}")).json()["model_profile"] == other
        back = await c.patch(f"/v1/tasks/{task}", json={"model_profile": None})
        assert back.json()["model_profile"] is None
        assert (await c.get("/v1/models")).status_code == 200
    async with stack.client() as anon:
        assert (await anon.get("/v1/models")).status_code == 401
