"""Gateway task and folder routes: happy paths, 4xx tables, no-subtask, isolation.

Over 400 lines on purpose: the task and folder routes share their tables and helpers (one route family)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from tests.helpers.seed import legacy_task
from zcbot_core.db.models import Task
from zcbot_core.platform.config import Settings
from zcbot_core.workspace.folders import NestedFolder
from zcbot_gateway.deps import known_profiles

pytestmark = pytest.mark.asyncio

TASK_KEYS = {
    "task_id", "name", "working_dir", "skill", "description", "status", "model_profile", "wall_clock_seconds", "channel", "read_only",
    "run_status", "run_error", "run_id", "scheduled_job_id", "tokens_in", "tokens_out", "tokens_cached", "cost_usd",
    "queued_messages", "run_timings", "context_base_idx", "created_at", "updated_at", "deleted_at",
}
BAD_NAMES = ["", "   ", "a/b", "..", ".", ".hidden", "a\\b", "x\x00y", "tab\there", "x" * 300]
BAD_WORKING_DIRS = [
    "../x", "a/../b", "..", "/abs", "/", "C:/x", ".git", "a/.b", "a\\b", "x\x00y",
    "a/ b", "a /b", "a/" + "x" * 201, "/".join(["x" * 150] * 8),
]


async def create(client: httpx.AsyncClient, headers: dict[str, str], **body: Any) -> httpx.Response:
    return await client.post("/v1/tasks", headers=headers, json=body)


async def created(client: httpx.AsyncClient, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    resp = await create(client, headers, **body)
    assert resp.status_code == 201, resp.text
    return resp.json()


async def set_task(client: httpx.AsyncClient, task_id: str, **values: Any) -> None:
    async with client.app.state.rt.sessions() as s:  # type: ignore[attr-defined]
        await s.execute(update(Task).where(Task.task_id == task_id).values(**values))
        await s.commit()


def user_dir(settings: Settings, user_id: str) -> Path:
    return settings.storage_root / user_id


# ---- create --------------------------------------------------------------------------------


async def test_create_task_shape_and_folder(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "alice")
    task = await created(app_client, h, name="  Deck 2026 ", description="quarterly", skill="ppt")
    assert set(task) == TASK_KEYS
    assert task["name"] == "Deck 2026" and task["working_dir"] == "Deck 2026"
    assert task["description"] == "quarterly" and task["skill"] == "ppt" and task["status"] == "active"
    assert task["channel"] == "web" and task["read_only"] is False
    assert task["run_status"] == "idle" and task["run_id"] is None and task["scheduled_job_id"] is None
    assert task["tokens_in"] == task["tokens_out"] == task["tokens_cached"] == 0
    assert isinstance(task["cost_usd"], float) and task["cost_usd"] == 0.0
    assert task["queued_messages"] == 0 and task["context_base_idx"] == 0
    assert task["created_at"] and task["updated_at"] and task["deleted_at"] is None
    assert (user_dir(settings, "alice") / "Deck 2026").is_dir()

    got = await app_client.get(f"/v1/tasks/{task['task_id']}", headers=h)
    assert got.status_code == 200 and got.json() == task


@pytest.mark.parametrize(
    ("given", "stored"),
    [("proj", "proj"), ("  spaced  ", "spaced"), ("报告 2026", "报告 2026"), ("", "NAME"), ("  ", "NAME")],
)
async def test_create_working_dir_normalized(
    app_client: httpx.AsyncClient, settings: Settings, make_user, given: str, stored: str
) -> None:
    h = await make_user(app_client, "alice")
    task = await created(app_client, h, name="NAME", working_dir=given)
    assert task["working_dir"] == stored
    assert (user_dir(settings, "alice") / stored).is_dir()


@pytest.mark.parametrize("name", BAD_NAMES)
async def test_create_bad_name_is_400(app_client: httpx.AsyncClient, make_user, name: str) -> None:
    h = await make_user(app_client, "alice")
    resp = await create(app_client, h, name=name, working_dir="fine")
    # Over the length the schema declares (200, as the server): the schema's 422; else the domain's 400.
    assert resp.status_code == (422 if len(name) > 200 else 400), resp.text
    assert isinstance(resp.json()["detail"], str)


@pytest.mark.parametrize("working_dir", BAD_WORKING_DIRS)
async def test_create_bad_working_dir_is_400(
    app_client: httpx.AsyncClient, settings: Settings, make_user, working_dir: str
) -> None:
    h = await make_user(app_client, "alice")
    resp = await create(app_client, h, name="ok", working_dir=working_dir)
    # Over the schema's length (1024, as the server's rule): 422; else the folder rule's 400.
    assert resp.status_code == (422 if len(working_dir) > 1024 else 400), resp.text
    assert isinstance(resp.json()["detail"], str)
    root = user_dir(settings, "alice")
    assert not root.exists() or not any(root.iterdir())  # nothing created


@pytest.mark.parametrize(
    "body",
    [{}, {"name": None}, {"name": 5}, {"name": "ok", "working_dir": 3}, {"name": "ok", "extra": 1},
     {"name": "ok", "skill": "s" * 129}, {"name": "ok", "working_dir": "w" * 5000}],
)
async def test_create_invalid_body_is_422(app_client: httpx.AsyncClient, make_user, body: dict[str, Any]) -> None:
    h = await make_user(app_client, "alice")
    resp = await app_client.post("/v1/tasks", headers=h, json=body)
    assert resp.status_code == 422, resp.text
    problem = resp.json()
    assert isinstance(problem["detail"], str) and problem["code"] == "validation_error"
    assert isinstance(problem["errors"], list) and problem["errors"][0]["loc"][0] == "body"
    assert resp.headers["content-type"] == "application/problem+json"
    assert len(resp.text) < 2000  # the 5000-character input is not echoed


async def test_create_nul_in_description_is_400(app_client: httpx.AsyncClient, make_user) -> None:
    h = await make_user(app_client, "alice")
    resp = await create(app_client, h, name="ok", description="a\x00b")
    assert resp.status_code == 400 and "NUL" in resp.json()["detail"]


async def test_create_rejects_symlink_escape(
    app_client: httpx.AsyncClient, settings: Settings, make_user, tmp_path: Path
) -> None:
    h = await make_user(app_client, "alice")
    root = user_dir(settings, "alice")
    root.mkdir(parents=True, exist_ok=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / "link")
    resp = await create(app_client, h, name="ok", working_dir="link")
    assert resp.status_code in (400, 409) and "symlink" in resp.json()["detail"], resp.text
    assert not any(outside.iterdir())


async def test_create_file_in_the_way_is_409(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "alice")
    root = user_dir(settings, "alice")
    root.mkdir(parents=True, exist_ok=True)
    (root / "notes").write_text("a file")
    resp = await create(app_client, h, name="notes")
    assert resp.status_code == 409, resp.text


async def test_create_model_profile(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "alice")
    bad = await create(app_client, h, name="a", model_profile="no-such-model")
    assert bad.status_code == 400 and "unknown model_profile" in bad.json()["detail"]
    assert (await create(app_client, h, name="a", model_profile="  ")).status_code == 400
    known = known_profiles(settings)
    profile = sorted(known)[0] if known else "any-profile"
    assert (await created(app_client, h, name="a", model_profile=profile))["model_profile"] == profile


# ---- no-subtask rule -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second", "ok"),
    [
        ("a", "a/b", False),  # strictly inside
        ("p/q", "p", False),  # strictly contains
        ("p/q/r", "p", False),
        ("a", "a", True),  # same folder is shared
        ("a", "ab", True),  # a prefix of the string, not of the path
        ("a/b", "a/c", True),  # siblings
        ("a/b", "a/bc", True),
    ],
)
async def test_no_subtask_rule(app_client: httpx.AsyncClient, make_user, first: str, second: str, ok: bool) -> None:
    # Nested folders only exist in rows from before the simple-name rule; the rule still guards them.
    h = await make_user(app_client, "alice")
    await legacy_task(app_client, "alice", name="one", working_dir=first)
    if "/" in second:
        try:
            await legacy_task(app_client, "alice", name="two", working_dir=second)
            refused = ""
        except NestedFolder as exc:
            refused = str(exc)
        assert ok == (not refused) and (ok or "inside" in refused or "contains" in refused)
        return
    resp = await create(app_client, h, name="two", working_dir=second)
    if ok:
        assert resp.status_code == 201, resp.text
    else:
        assert resp.status_code == 400, resp.text
        assert "nested" in resp.json()["detail"]


@pytest.mark.parametrize("working_dir", ["a/b", "a\\b", "..", ".hidden", "../x", "/abs", " a/b "])
async def test_create_refuses_a_working_dir_that_is_not_a_simple_name(app_client: httpx.AsyncClient, make_user,
                                                                      settings: Settings, working_dir: str) -> None:
    h = await make_user(app_client, "alice")
    resp = await create(app_client, h, name="t", working_dir=working_dir)
    assert resp.status_code == 400, resp.text
    assert "working_dir" in resp.json()["detail"] or "path" in resp.json()["detail"]
    assert not (user_dir(settings, "alice") / "a").exists()  # no partial write


async def test_no_subtask_rule_is_per_user_and_ignores_deleted(app_client: httpx.AsyncClient, make_user) -> None:
    a = await make_user(app_client, "alice")
    await make_user(app_client, "bob")
    await created(app_client, a, name="proj")
    await legacy_task(app_client, "bob", name="inner", working_dir="proj/inner")  # bob is unaffected by alice

    deleted = await created(app_client, a, name="old")
    assert (await app_client.delete(f"/v1/tasks/{deleted['task_id']}", headers=a)).status_code == 204
    await legacy_task(app_client, "alice", name="new", working_dir="old/new")  # deleted tasks do not block
    restore = await app_client.post(f"/v1/tasks/{deleted['task_id']}/restore", headers=a)
    assert restore.status_code == 409 and "nested" in restore.json()["detail"]


# ---- get / cross-user ----------------------------------------------------------------------


async def test_get_missing_is_404(app_client: httpx.AsyncClient, make_user) -> None:
    h = await make_user(app_client, "alice")
    for task_id in ["nope", "0" * 32, "x" * 500, "%00"]:
        resp = await app_client.get(f"/v1/tasks/{task_id}", headers=h)
        assert resp.status_code == 404 and resp.json()["detail"] == "task not found"
        assert resp.json()["status"] == 404 and resp.json()["code"] == "task_not_found", resp.json()


async def test_cross_user_isolation(app_client: httpx.AsyncClient, make_user) -> None:
    a = await make_user(app_client, "alice")
    b = await make_user(app_client, "bob")
    task = await created(app_client, a, name="secret")
    tid = task["task_id"]
    for method, path, body in [
        ("GET", f"/v1/tasks/{tid}", None),
        ("PATCH", f"/v1/tasks/{tid}", {"name": "pwned"}),
        ("DELETE", f"/v1/tasks/{tid}", None),
        ("POST", f"/v1/tasks/{tid}/restore", None),
    ]:
        resp = await app_client.request(method, path, headers=b, json=body)
        assert resp.status_code == 404, (method, resp.text)
        assert resp.json()["detail"] == "task not found"
    assert (await app_client.get("/v1/tasks", headers=b)).json()["total"] == 0
    assert (await app_client.get("/v1/folders", headers=b)).json()["items"] == []
    # A's soft-deleted task is not restorable by B either.
    assert (await app_client.delete(f"/v1/tasks/{tid}", headers=a)).status_code == 204
    assert (await app_client.post(f"/v1/tasks/{tid}/restore", headers=b)).status_code == 404
    assert (await app_client.get(f"/v1/tasks/{tid}", headers=a)).status_code == 404


async def test_task_routes_require_auth(app_client: httpx.AsyncClient, make_user) -> None:
    h = await make_user(app_client, "alice")
    tid = (await created(app_client, h, name="t"))["task_id"]
    for method, path in [
        ("POST", "/v1/tasks"), ("GET", "/v1/tasks"), ("GET", f"/v1/tasks/{tid}"), ("PATCH", f"/v1/tasks/{tid}"),
        ("DELETE", f"/v1/tasks/{tid}"), ("POST", f"/v1/tasks/{tid}/restore"), ("GET", "/v1/folders"),
    ]:
        for headers in [{}, {"Authorization": "Bearer junk"}]:
            resp = await app_client.request(method, path, headers=headers, json={"name": "x"})
            assert resp.status_code == 401, (method, path, resp.text)
            assert resp.headers["www-authenticate"] == "Bearer"


# ---- list ----------------------------------------------------------------------------------


async def test_list_pagination_and_clamp(app_client: httpx.AsyncClient, make_user) -> None:
    h = await make_user(app_client, "alice")
    ids = [(await created(app_client, h, name=f"t{i:02d}", working_dir="shared"))["task_id"] for i in range(25)]

    first = (await app_client.get("/v1/tasks", headers=h)).json()
    assert (first["page"], first["page_size"], first["total"]) == (1, 20, 25)
    assert [t["task_id"] for t in first["items"]] == ids[::-1][:20]  # newest first
    second = (await app_client.get("/v1/tasks", headers=h, params={"page": 2})).json()
    assert [t["task_id"] for t in second["items"]] == ids[::-1][20:]
    beyond = (await app_client.get("/v1/tasks", headers=h, params={"page": 9})).json()
    assert beyond["items"] == [] and beyond["total"] == 25

    for given in (1, 7, 100):
        body = (await app_client.get("/v1/tasks", headers=h, params={"page_size": given})).json()
        assert body["page_size"] == given, given
        assert len(body["items"]) == min(given, 25)

    # Out of range is refused (422), never silently adjusted.
    for params in ({"page": 0}, {"page": -1}, {"page": 10**7}, {"page": "x"}, {"page_size": "many"},
                   {"page": 10**30}, {"page_size": 0}, {"page_size": -5}, {"page_size": 1000},
                   {"run_status": "bogus"}, {"run_status": "running,bogus"}, {"status": "nope"}):
        resp = await app_client.get("/v1/tasks", headers=h, params=params)
        assert resp.status_code == 422, (params, resp.text)


@pytest.mark.parametrize(
    ("ordering", "expected"),
    [
        (None, ["c", "b", "a"]),
        ("", ["c", "b", "a"]),
        ("-created_at", ["c", "b", "a"]),
        ("created_at", ["a", "b", "c"]),
        ("name", ["a", "b", "c"]),
        ("-name", ["c", "b", "a"]),
        ("cost_usd,name", ["b", "c", "a"]),
        ("-cost_usd", ["a", "c", "b"]),
        ("run_status,-name", ["c", "b", "a"]),
        ("updated_at", ["a", "b", "c"]),
        ("status, name", ["a", "b", "c"]),
    ],
)
async def test_list_ordering(app_client: httpx.AsyncClient, make_user, ordering: str | None, expected: list[str]) -> None:
    h = await make_user(app_client, "alice")
    tasks = {n: await created(app_client, h, name=n, working_dir="w") for n in ["a", "b", "c"]}
    await set_task(app_client, tasks["a"]["task_id"], cost_usd=5, run_status="idle")
    await set_task(app_client, tasks["c"]["task_id"], cost_usd=1, run_status="error")
    await set_task(app_client, tasks["b"]["task_id"], run_status="idle")
    # Keep updated_at in creation order for the updated_at case.
    for i, n in enumerate(["a", "b", "c"]):
        await set_task(app_client, tasks[n]["task_id"], updated_at=datetime(2030, 1, i + 1, tzinfo=UTC))
    params = {} if ordering is None else {"ordering": ordering}
    resp = await app_client.get("/v1/tasks", headers=h, params=params)
    assert resp.status_code == 200, resp.text
    assert [t["name"] for t in resp.json()["items"]] == expected


@pytest.mark.parametrize("ordering", ["foo", "-foo", "name,bogus", "user_id", "password_hash", "--name", "name,", ",", "task_id"])
async def test_list_bad_ordering_is_422(app_client: httpx.AsyncClient, make_user, ordering: str) -> None:
    h = await make_user(app_client, "alice")
    resp = await app_client.get("/v1/tasks", headers=h, params={"ordering": ordering})
    assert resp.status_code == 422, resp.text
    assert "ordering" in resp.json()["detail"]


async def test_list_filters(app_client: httpx.AsyncClient, make_user) -> None:
    h = await make_user(app_client, "alice")
    await created(app_client, h, name="Quarterly Deck", working_dir="deck", skill="ppt", description="Q3 numbers")
    grant = await created(app_client, h, name="Grant", working_dir="grant", skill="proposal", description="100% effort")
    code = await created(app_client, h, name="Code_fix", working_dir="deck", skill="coding")
    sched = await created(app_client, h, name="Daily brief", working_dir="brief")
    gone = await created(app_client, h, name="Gone deck", working_dir="deck")
    await set_task(app_client, code["task_id"], run_status="running")
    await set_task(app_client, grant["task_id"], run_status="cancelling", status="done")
    await set_task(app_client, sched["task_id"], scheduled_job_id="job1")
    await set_task(app_client, gone["task_id"], run_status="idle")
    assert (await app_client.delete(f"/v1/tasks/{gone['task_id']}", headers=h)).status_code == 204

    async def names(**params: Any) -> list[str]:
        resp = await app_client.get("/v1/tasks", headers=h, params={"ordering": "name", **params})
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["total"] == len(body["items"])
        return [t["name"] for t in body["items"]]

    assert await names() == ["Code_fix", "Grant", "Quarterly Deck"]
    assert await names(include_scheduled="true") == ["Code_fix", "Daily brief", "Grant", "Quarterly Deck"]
    assert await names(deleted="true") == ["Gone deck"]
    assert await names(status="done") == ["Grant"]
    assert await names(status="active,done") == ["Code_fix", "Grant", "Quarterly Deck"]
    assert await names(skill="ppt") == ["Quarterly Deck"]
    assert await names(working_dir="deck") == ["Code_fix", "Quarterly Deck"]
    assert await names(working_dir="./deck/") == ["Code_fix", "Quarterly Deck"]
    assert await names(run_status="running,cancelling") == ["Code_fix", "Grant"]
    assert await names(run_status="running", working_dir="deck") == ["Code_fix"]
    assert await names(q="deck") == ["Quarterly Deck"]  # case-insensitive, deleted excluded
    assert await names(q="q3") == ["Quarterly Deck"]  # description
    assert await names(q="100%") == ["Grant"]  # % is literal
    assert await names(q="%") == ["Grant"]
    assert await names(q="_") == ["Code_fix"]  # _ is literal
    assert await names(q="nothing here") == []

    for params in [{"working_dir": "../x"}, {"working_dir": "/abs"}, {"q": "a\x00b"}]:
        resp = await app_client.get("/v1/tasks", headers=h, params=params)
        assert resp.status_code == 400, (params, resp.text)
    for params in [{"q": "x" * 201}, {"run_status": ","}, {"run_status": "bogus"}, {"status": "gone"}]:
        assert (await app_client.get("/v1/tasks", headers=h, params=params)).status_code == 422, params


# ---- patch ---------------------------------------------------------------------------------


async def test_patch_task(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "alice")
    task = await created(app_client, h, name="orig", description="d", skill="ppt")
    url = f"/v1/tasks/{task['task_id']}"
    known = known_profiles(settings)
    profile = sorted(known)[0] if known else "any-profile"

    resp = await app_client.patch(url, headers=h, json={"name": " renamed ", "status": "done", "description": "new",
                                                        "skill": "coding", "model_profile": profile})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert (body["name"], body["status"], body["description"], body["skill"], body["model_profile"]) == (
        "renamed", "done", "new", "coding", profile)
    assert body["working_dir"] == "orig"  # renaming never moves the folder
    assert body["updated_at"] >= task["updated_at"]

    cleared = (await app_client.patch(url, headers=h, json={"description": None, "skill": None, "model_profile": None})).json()
    assert (cleared["description"], cleared["skill"], cleared["model_profile"]) == (None, None, None)
    assert cleared["name"] == "renamed"
    noop = await app_client.patch(url, headers=h, json={})
    assert noop.status_code == 200 and noop.json()["name"] == "renamed"
    assert (await app_client.get(url, headers=h)).json()["status"] == "done"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        *[({"name": n}, 422 if len(n) > 200 else 400) for n in BAD_NAMES],
        ({"name": None}, 400),
        ({"status": "bogus"}, 422),
        ({"status": None}, 400),
        ({"model_profile": "no-such-model"}, 400),
        ({"model_profile": ""}, 400),
        ({"description": "nul\x00"}, 400),
        ({"working_dir": "elsewhere"}, 422),
        ({"channel": "web"}, 422),
        ({"name": 5}, 422),
    ],
)
async def test_patch_bad_input(app_client: httpx.AsyncClient, make_user, body: dict[str, Any], code: int) -> None:
    h = await make_user(app_client, "alice")
    task = await created(app_client, h, name="orig")
    resp = await app_client.patch(f"/v1/tasks/{task['task_id']}", headers=h, json=body)
    assert resp.status_code == code, resp.text
    after = (await app_client.get(f"/v1/tasks/{task['task_id']}", headers=h)).json()
    assert after["name"] == "orig" and after["status"] == "active"


async def test_channel_tasks_are_read_only(app_client: httpx.AsyncClient, make_user) -> None:
    h = await make_user(app_client, "alice")
    task = await created(app_client, h, name="wechat chat")
    await set_task(app_client, task["task_id"], channel="wecom")
    url = f"/v1/tasks/{task['task_id']}"
    got = (await app_client.get(url, headers=h)).json()
    assert got["channel"] == "wecom" and got["read_only"] is True
    patch = await app_client.patch(url, headers=h, json={"name": "x"})
    assert patch.status_code == 409 and "read-only" in patch.json()["detail"]
    delete = await app_client.delete(url, headers=h)
    assert delete.status_code == 409
    assert (await app_client.get(url, headers=h)).status_code == 200


# ---- delete / restore ----------------------------------------------------------------------


async def test_delete_and_restore(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "alice")
    task = await created(app_client, h, name="doomed")
    url = f"/v1/tasks/{task['task_id']}"
    folder = user_dir(settings, "alice") / "doomed"
    (folder / "artifact.txt").write_text("keep me")

    resp = await app_client.delete(url, headers=h)
    assert resp.status_code == 204 and resp.content == b""
    assert (folder / "artifact.txt").read_text() == "keep me"  # files are never touched
    assert (await app_client.get(url, headers=h)).status_code == 404
    assert (await app_client.delete(url, headers=h)).status_code == 404
    assert (await app_client.patch(url, headers=h, json={"name": "x"})).status_code == 404
    assert (await app_client.get("/v1/tasks", headers=h)).json()["total"] == 0

    restored = await app_client.post(f"{url}/restore", headers=h)
    assert restored.status_code == 200, restored.text
    assert restored.json()["deleted_at"] is None and restored.json()["name"] == "doomed"
    again = await app_client.post(f"{url}/restore", headers=h)  # idempotent
    assert again.status_code == 200
    assert (await app_client.get(url, headers=h)).status_code == 200
    assert (await app_client.post("/v1/tasks/nope/restore", headers=h)).status_code == 404


async def test_restore_recreates_a_missing_folder(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "alice")
    task = await created(app_client, h, name="tmp")
    assert (await app_client.delete(f"/v1/tasks/{task['task_id']}", headers=h)).status_code == 204
    folder = user_dir(settings, "alice") / "tmp"
    folder.rmdir()
    assert (await app_client.post(f"/v1/tasks/{task['task_id']}/restore", headers=h)).status_code == 200
    assert folder.is_dir()


@pytest.mark.parametrize("run_status", ["waiting", "queued", "running", "cancelling"])
async def test_delete_with_active_run_is_409(app_client: httpx.AsyncClient, make_user, run_status: str) -> None:
    h = await make_user(app_client, "alice")
    task = await created(app_client, h, name="busy")
    await set_task(app_client, task["task_id"], run_status=run_status, run_id="r1")
    resp = await app_client.delete(f"/v1/tasks/{task['task_id']}", headers=h)
    assert resp.status_code == 409 and "active run" in resp.json()["detail"]
    await set_task(app_client, task["task_id"], run_status="error", run_error="boom")
    assert (await app_client.delete(f"/v1/tasks/{task['task_id']}", headers=h)).status_code == 204


async def test_task_json_reflects_run_fields(app_client: httpx.AsyncClient, make_user) -> None:
    h = await make_user(app_client, "alice")
    task = await created(app_client, h, name="run")
    await set_task(
        app_client, task["task_id"], run_status="error", run_error="model failed", run_id="abc",
        tokens_in=10, tokens_out=5, tokens_cached=3, cost_usd=Decimal("0.012345"),
        pending_inputs=[{"content": "one"}, {"content": "two"}], run_timings={"ttft_ms": 12}, context_base_idx=4,
    )
    body = (await app_client.get(f"/v1/tasks/{task['task_id']}", headers=h)).json()
    assert body["run_status"] == "error" and body["run_error"] == "model failed" and body["run_id"] == "abc"
    assert (body["tokens_in"], body["tokens_out"], body["tokens_cached"]) == (10, 5, 3)
    assert body["cost_usd"] == pytest.approx(0.012345)
    assert body["queued_messages"] == 2 and body["run_timings"] == {"ttft_ms": 12} and body["context_base_idx"] == 4


# ---- folders -------------------------------------------------------------------------------


async def test_folders(app_client: httpx.AsyncClient, make_user) -> None:
    a = await make_user(app_client, "alice")
    b = await make_user(app_client, "bob")
    assert (await app_client.get("/v1/folders", headers=a)).json()["items"] == []
    t1 = await created(app_client, a, name="one", working_dir="proj")
    await created(app_client, a, name="two", working_dir="proj")
    t3 = await legacy_task(app_client, "alice", name="three", working_dir="other/deep")
    gone = await created(app_client, a, name="gone", working_dir="trash")
    await created(app_client, b, name="bobs", working_dir="proj")
    assert (await app_client.delete(f"/v1/tasks/{gone['task_id']}", headers=a)).status_code == 204
    await set_task(app_client, t1["task_id"], updated_at=datetime(2031, 1, 1, tzinfo=UTC))
    await set_task(app_client, t3["task_id"], updated_at=datetime(2030, 1, 1, tzinfo=UTC))

    folders = (await app_client.get("/v1/folders", headers=a)).json()["items"]
    assert [(f["working_dir"], f["task_count"]) for f in folders] == [("proj", 2), ("other/deep", 1)]
    assert folders[0]["last_used_at"].startswith("2031-01-01")
    assert [(f["working_dir"], f["task_count"]) for f in (await app_client.get("/v1/folders", headers=b)).json()["items"]] == [
        ("proj", 1)
    ]


async def test_concurrent_creates_cannot_nest(app_client: httpx.AsyncClient, make_user) -> None:
    import asyncio

    h = await make_user(app_client, "alice")
    for round_ in range(5):
        outer, inner = f"r{round_}", f"r{round_}/inner"
        results = await asyncio.gather(
            create(app_client, h, name="outer", working_dir=outer), create(app_client, h, name="inner", working_dir=inner)
        )
        assert sorted(r.status_code for r in results) == [201, 400], [r.text for r in results]
