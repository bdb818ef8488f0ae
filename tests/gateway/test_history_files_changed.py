"""The stored history carries, per run on the page, how many files that run changed (issue 29): the
page rendered after a reload offers "undo this run's file changes" from it. Counted from data_events
of this user's task only; runs without changes are absent; documented in the OpenAPI schema."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers.gateway import create_task, db
from zcbot_core import filehistory
from zcbot_core.db.models import Message

pytestmark = pytest.mark.asyncio


def change(path: str, kind: str = "create") -> filehistory.Change:
    return filehistory.Change(path, kind, 1, None, None)


async def test_messages_carry_files_changed_per_run(app_client: httpx.AsyncClient, make_user) -> None:
    h = await make_user(app_client, "hana")
    task = await create_task(app_client, h, name="H")
    tid = task["task_id"]
    other_task = await create_task(app_client, h, name="H2")
    async with db(app_client) as s:
        for idx, (run, role) in enumerate([("r1", "user"), ("r1", "assistant"), ("r2", "user"), ("r2", "assistant"),
                                           ("r3", "user"), ("r3", "assistant")]):
            s.add(Message(task_id=tid, idx=idx, run_id=run, payload={"role": role, "content": f"m{idx}"}))
        # r1: three events on two distinct paths; r2: none; r3: one, plus rows that must not count.
        await filehistory.record(s, "hana", [change("H/a.txt"), change("H/a.txt", "modify"), change("H/b.txt")],
                                 task_id=tid, run_id="r1")
        await filehistory.record(s, "hana", [change("H/c.txt")], task_id=tid, run_id="r3")
        await filehistory.record(s, "otto", [change("H/x.txt"), change("H/y.txt")], task_id=tid, run_id="r3")
        await filehistory.record(s, "hana", [change("H2/z.txt")], task_id=other_task["task_id"], run_id="r2")
        await s.commit()

    url = f"/v1/tasks/{tid}/messages"
    body = (await app_client.get(url, headers=h)).json()
    assert set(body) == {"items", "total", "page", "page_size", "task_id", "files_changed", "files_undone"}
    assert body["total"] == 6 and len(body["items"]) == 6 and body["task_id"] == tid
    assert body["files_changed"] == {"r1": 2, "r3": 1} and body["files_undone"] == []

    # Only the runs of this page are counted (the page is the unit the client renders).
    later = (await app_client.get(url, headers=h, params={"after": 3})).json()
    assert [m["run_id"] for m in later["items"]] == ["r3", "r3"] and later["files_changed"] == {"r3": 1}
    first = (await app_client.get(url, headers=h, params={"page_size": 2})).json()
    assert first["files_changed"] == {"r1": 2}
    empty = (await app_client.get(f"/v1/tasks/{other_task['task_id']}/messages", headers=h)).json()
    assert empty["items"] == [] and empty["files_changed"] == {}

    # Another user's request for the task is refused, not answered with counts.
    otto = await make_user(app_client, "otto")
    assert (await app_client.get(url, headers=otto)).status_code == 404

    schema = (await app_client.get("/openapi.json")).json()
    ok = schema["paths"]["/v1/tasks/{task_id}/messages"]["get"]["responses"]["200"]["content"]["application/json"]
    page = schema["components"]["schemas"][ok["schema"]["$ref"].rsplit("/", 1)[1]]
    assert page["properties"]["files_changed"]["additionalProperties"] == {"type": "integer"}
    assert "run_id" in page["properties"]["files_changed"]["description"]
    assert page["properties"]["files_undone"]["items"] == {"type": "string"}
