"""Task search by message text (issue 37): `GET /v1/tasks?q=` finds a task by its name, description
or the text of its user and assistant messages, Chinese substrings included, only among the caller's
own tasks, and names the message that matched."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from zcbot_core.db.models import Message

pytestmark = pytest.mark.asyncio


async def new_task(client: httpx.AsyncClient, headers: dict[str, str], name: str) -> str:
    resp = await client.post("/v1/tasks", headers=headers, json={"name": name})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["task_id"])


async def add_messages(client: httpx.AsyncClient, task_id: str, *payloads: dict[str, Any]) -> None:
    async with client.app.state.rt.sessions() as s:  # type: ignore[attr-defined]
        for idx, payload in enumerate(payloads):
            s.add(Message(task_id=task_id, idx=idx, payload=payload))
        await s.commit()


async def search(client: httpx.AsyncClient, headers: dict[str, str], q: str, **params: Any) -> list[dict[str, Any]]:
    resp = await client.get("/v1/tasks", headers=headers, params={"q": q, **params})
    assert resp.status_code == 200, resp.text
    return list(resp.json()["items"])


async def test_search_finds_message_text_in_own_tasks_only(app_client: httpx.AsyncClient, make_user) -> None:
    alice = await make_user(app_client, "search-alice")
    bob = await make_user(app_client, "search-bob")
    misc = await new_task(app_client, alice, "杂项")
    weekly = await new_task(app_client, alice, "周报")
    await add_messages(app_client, misc,
                       {"role": "user", "content": "请帮我整理季度报告初稿，重点写\n第三季度的增长"},
                       {"role": "assistant", "content": None,
                        "tool_calls": [{"id": "c1", "type": "function",
                                        "function": {"name": "write", "arguments": "{\"path\": \"机密代号.md\"}"}}]},
                       {"role": "tool", "tool_call_id": "c1", "content": "写入了 机密代号.md"},
                       {"role": "assistant", "content": "已完成 Quarterly Report 的初稿。"})
    bobs = await new_task(app_client, bob, "别人的")
    await add_messages(app_client, bobs, {"role": "user", "content": "季度报告 也在这里"})

    found = await search(app_client, alice, "季度报告")
    assert [t["task_id"] for t in found] == [misc]  # bob's task with the same words is not alice's
    match = found[0]["match"]
    assert match["idx"] == 0 and match["role"] == "user"
    assert match["snippet"] == "请帮我整理季度报告初稿，重点写 第三季度的增长"  # one line

    # Any case, in an assistant message; the latest matching message is the one named.
    hit = await search(app_client, alice, "quarterly report")
    assert [(t["task_id"], t["match"]["idx"], t["match"]["role"]) for t in hit] == [(misc, 3, "assistant")]
    # Tool results and tool-call arguments are not the conversation's text.
    assert await search(app_client, alice, "机密代号") == []
    # A name match is found as before, without a message match.
    by_name = await search(app_client, alice, "周报")
    assert [(t["task_id"], t["match"]) for t in by_name] == [(weekly, None)]
    # LIKE wildcards are literal.
    assert await search(app_client, alice, "%") == []
    assert await search(app_client, alice, "_") == []
    # Without q there is no match field value.
    resp = await app_client.get("/v1/tasks", headers=alice)
    assert {t["task_id"]: t["match"] for t in resp.json()["items"]} == {misc: None, weekly: None}
    # The total over pages, also past the last one.
    resp = await app_client.get("/v1/tasks", headers=alice, params={"q": "季度", "page": 1, "page_size": 1})
    assert (resp.json()["total"], len(resp.json()["items"])) == (1, 1)
    resp = await app_client.get("/v1/tasks", headers=alice, params={"q": "季度", "page": 3, "page_size": 1})
    assert (resp.json()["total"], resp.json()["items"]) == (1, [])
    # Bob finds his own.
    assert [t["task_id"] for t in await search(app_client, bob, "季度")] == [bobs]


async def test_search_snippet_is_cut_around_the_hit_and_deleted_tasks_stay_in_the_trash(
        app_client: httpx.AsyncClient, make_user) -> None:
    headers = await make_user(app_client, "search-carol")
    task = await new_task(app_client, headers, "长文")
    long_text = "开头" * 60 + "关键句在这里" + "结尾" * 60
    await add_messages(app_client, task, {"role": "user", "content": long_text})
    [found] = await search(app_client, headers, "关键句")
    text = found["match"]["snippet"]
    assert text.startswith("…") and text.endswith("…") and "关键句在这里" in text
    assert len(text) <= 92

    resp = await app_client.delete(f"/v1/tasks/{task}", headers=headers)
    assert resp.status_code == 204
    assert await search(app_client, headers, "关键句") == []
    assert [t["task_id"] for t in await search(app_client, headers, "关键句", deleted="true")] == [task]
