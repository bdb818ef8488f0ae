"""The shared service layer (`zcbot_core.schedules`), the `schedule_*` host tools and the REST routes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

import httpx
import pytest

from tests.scheduler.conftest import T0, Harness
from zcbot_core import schedules
from zcbot_core.db.models import ScheduledJob, Task
from zcbot_core.platform.config import Settings
from zcbot_core.tools.schedule_tools import SCHEDULE_TOOL_SCHEMAS, ScheduleTools, register_schedule_tools
from zcbot_gateway.app import create_app
from zcbot_gateway.routes import schedules as schedule_routes
from zcbot_runner.toolbox import RunnerToolBox


async def create(h: Harness, user: str, **kw: Any) -> ScheduledJob:
    return await h.create_job(user, **kw)


async def expect_error(h: Harness, user: str, fragment: str, **kw: Any) -> None:
    with pytest.raises(schedules.ScheduleError) as info:
        await create(h, user, **kw)
    assert fragment in str(info.value), str(info.value)


async def test_validation(harness: Harness) -> None:
    h = harness
    alice, bob = await h.user("alice"), await h.user("bob")
    await expect_error(h, alice, "5 fields", cron="0 9 * *")
    await expect_error(h, alice, "never fires", cron="0 0 30 2 *")
    await expect_error(h, alice, "unknown timezone", timezone="Moon/Base")
    await expect_error(h, alice, "mode must be", mode="forever")
    await expect_error(h, alice, "prompt must be", prompt="   ")
    await expect_error(h, alice, "name must not", name="a/b")
    await expect_error(h, alice, "working_dir", working_dir="../escape")
    await expect_error(h, alice, "working_dir", working_dir="/abs")
    await expect_error(h, alice, "notify must be", notify="two words")
    await expect_error(h, alice, "timeout_seconds", timeout_seconds=5)
    await expect_error(h, alice, "persistent mode needs task_id", mode="persistent")
    await expect_error(h, alice, "only used by persistent", task_id="abc")
    bobs = await h.make_task(bob, "Bob's notes", working_dir="notes")
    await expect_error(h, alice, "not one of your tasks", mode="persistent", task_id=bobs.task_id)
    mine = await h.make_task(alice, "Mine", working_dir="mine")
    await expect_error(h, alice, "task's folder", mode="persistent", task_id=mine.task_id, working_dir="other")
    await h.make_task(alice, "Proj", working_dir="proj/sub")
    await expect_error(h, alice, "cannot be nested", working_dir="proj")
    for nested in ("briefs/daily", "a\\b", ".briefs", ".."):
        await expect_error(h, alice, "simple folder name", working_dir=nested)
    job = await create(h, alice, notify="WeCom", working_dir=" briefs ", timezone="Europe/Berlin")
    assert (job.notify, job.working_dir, job.timezone, job.mode, job.timeout_seconds) == (
        "wecom", "briefs", "Europe/Berlin", "isolated", 1800)
    assert job.next_run_at == datetime(2026, 6, 2, 7, tzinfo=timezone.utc)  # T0 is 08:59:30Z = 10:59 Berlin
    default = await create(h, alice, name="Default folder", timezone=None)
    assert default.working_dir == "Default folder" and default.timezone == "UTC"


async def test_scoping_update_disable_delete(harness: Harness) -> None:
    h = harness
    alice, bob = await h.user("alice"), await h.user("bob")
    job = await create(h, alice)
    async with h.rt.sessions() as s, s.begin():
        assert [j.job_id for j in await schedules.list_schedules(s, alice)] == [job.job_id]
        assert await schedules.list_schedules(s, bob) == []
        for fn in (schedules.get_schedule, schedules.disable_schedule, schedules.delete_schedule):
            with pytest.raises(schedules.ScheduleNotFound):
                await fn(s, bob, job.job_id)
        with pytest.raises(schedules.ScheduleNotFound):
            await schedules.update_schedule(s, bob, job.job_id, {"name": "x"})
        with pytest.raises(schedules.ScheduleError):
            await schedules.update_schedule(s, alice, job.job_id, {"owner": "bob"})
        updated = await schedules.update_schedule(s, alice, job.job_id, {"cron": "30 7 * * *", "timezone": "Asia/Tokyo"},
                                                  now=T0)
        assert updated.next_run_at == datetime(2026, 6, 1, 22, 30, tzinfo=timezone.utc)
        disabled = await schedules.disable_schedule(s, alice, job.job_id)
        assert not disabled.enabled and disabled.next_run_at is None
        disabled.consecutive_failures = 3
        enabled = await schedules.update_schedule(s, alice, job.job_id, {"enabled": True}, now=T0)
        assert enabled.enabled and enabled.consecutive_failures == 0 and enabled.next_run_at is not None
        task = await h.make_task(alice, "Chat", working_dir="chat")
        pers = await schedules.update_schedule(s, alice, job.job_id, {"mode": "persistent", "task_id": task.task_id})
        assert (pers.mode, pers.task_id, pers.working_dir) == ("persistent", task.task_id, "chat")
        async with h.rt.sessions() as other, other.begin():  # the bound task goes to the trash
            (await other.get(Task, task.task_id)).deleted_at = T0
        paused = await schedules.update_schedule(s, alice, job.job_id, {"enabled": False})
        assert not paused.enabled and paused.task_id == task.task_id
        with pytest.raises(schedules.ScheduleError):
            await schedules.update_schedule(s, alice, job.job_id, {"task_id": task.task_id})
        back = await schedules.update_schedule(s, alice, job.job_id, {"mode": "isolated"})
        assert back.task_id is None
        await schedules.delete_schedule(s, alice, job.job_id)
        assert await schedules.list_schedules(s, alice) == []


class FakeTask:
    def __init__(self, task_id: str, working_dir: str, scheduled_job_id: str | None = None) -> None:
        self.task_id, self.working_dir, self.scheduled_job_id = task_id, working_dir, scheduled_job_id


async def test_tools_crud_and_refused_inside_scheduled_runs(harness: Harness) -> None:
    h = harness
    alice = await h.user("alice")
    task = await h.make_task(alice, "Assistant", working_dir="assistant")
    names = {s["function"]["name"] for s in SCHEDULE_TOOL_SCHEMAS}
    assert names == {"schedule_create", "schedule_list", "schedule_update", "schedule_delete"}
    toolbox = RunnerToolBox(executor=None, sandbox_schemas=[], user_id=alice, task_id=task.task_id, run_id="r1",
                            cwd=task.working_dir)
    register_schedule_tools(toolbox, h.rt.sessions, alice, task, in_scheduled_run=False,
                            default_timezone="Europe/Berlin")
    assert {s["function"]["name"] for s in toolbox.schemas()} == names
    out = await toolbox.execute("schedule_create", {"name": "Morning", "cron": "0 9 * * *", "timezone": "Asia/Shanghai",
                                                    "prompt": "Summarize the news", "notify": "all"}, "c1")
    assert out.ok, out.output
    created = json.loads(out.output.split("\n", 1)[1])
    assert created["working_dir"] == "assistant" and created["notify"] == "all" and created["mode"] == "isolated"
    out = await toolbox.execute("schedule_create", {"name": "Diary", "cron": "0 21 * * *",  # no timezone: the runner's
                                                    "prompt": "Continue the diary", "mode": "persistent"}, "c2")
    diary = json.loads(out.output.split("\n", 1)[1])
    assert out.ok and diary["task_id"] == task.task_id and diary["timezone"] == "Europe/Berlin"
    bad = await toolbox.execute("schedule_create", {"name": "x", "cron": "every day", "timezone": "UTC", "prompt": "p"}, "c3")
    assert not bad.ok and "cron" in bad.output
    listed = await toolbox.execute("schedule_list", {}, "c4")
    assert listed.ok and len(json.loads(listed.output)) == 2
    upd = await toolbox.execute("schedule_update", {"job_id": created["job_id"], "enabled": False}, "c5")
    assert upd.ok and "paused" in upd.output
    missing = await toolbox.execute("schedule_update", {"job_id": "nope", "enabled": False}, "c6")
    assert not missing.ok and "schedule_list" in missing.output

    # Inside a scheduled run: creating (or changing) jobs is refused with a clear tool error.
    run_task = FakeTask("t2", "assistant", scheduled_job_id=created["job_id"])
    for tools in (ScheduleTools(h.rt.sessions, alice, run_task, in_scheduled_run=False),
                  ScheduleTools(h.rt.sessions, alice, task, in_scheduled_run=True)):
        refused = await tools.create({"name": "Spawn", "cron": "* * * * *", "timezone": "UTC", "prompt": "again"})
        assert not refused.ok and "not allowed inside a scheduled run" in refused.output
        for call in (tools.update({"job_id": created["job_id"], "enabled": True}), tools.delete({"job_id": created["job_id"]})):
            result = await call
            assert not result.ok and "not allowed inside a scheduled run" in result.output
        assert (await tools.list({})).ok
    async with h.rt.sessions() as s:
        assert len(await schedules.list_schedules(s, alice)) == 2
    deleted = await toolbox.execute("schedule_delete", {"job_id": created["job_id"]}, "c7")
    assert deleted.ok


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    app.include_router(schedule_routes.router)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test") as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


async def _login(client: httpx.AsyncClient, settings: Settings, user: str) -> dict[str, str]:
    r = await client.post("/v1/auth/login", json={"user_id": user, "platform_key": settings.platform_key})
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['token']}"}


async def test_rest_list_disable_delete(api: httpx.AsyncClient, settings: Settings) -> None:
    alice, bob = await _login(api, settings, "alice"), await _login(api, settings, "bob")
    async with api.app.state.rt.sessions() as s, s.begin():  # type: ignore[attr-defined]
        job = await schedules.create_schedule(s, user_id="alice", name="Brief", cron="0 9 * * *", prompt="p",
                                              timezone="UTC")
    assert (await api.get("/v1/schedules")).status_code == 401
    r = await api.get("/v1/schedules", headers=alice)
    assert r.status_code == 200 and [j["job_id"] for j in r.json()["items"]] == [job.job_id]
    assert r.json()["total"] == 1 and r.json()["page"] == 1
    assert r.json()["items"][0]["enabled"] is True and r.json()["items"][0]["next_run_local"]
    assert (await api.get("/v1/schedules", headers=bob)).json()["items"] == []
    for method, path in (("POST", f"/v1/schedules/{job.job_id}/disable"), ("DELETE", f"/v1/schedules/{job.job_id}"),
                         ("GET", f"/v1/schedules/{job.job_id}"), ("POST", "/v1/schedules/nope/disable")):
        r = await api.request(method, path, headers=bob)
        assert r.status_code == 404 and r.json()["detail"] == "scheduled job not found"
    r = await api.post(f"/v1/schedules/{job.job_id}/disable", headers=alice)
    assert r.status_code == 200 and r.json()["enabled"] is False and r.json()["next_run_at"] is None
    assert (await api.get(f"/v1/schedules/{job.job_id}", headers=alice)).json()["enabled"] is False
    assert (await api.delete(f"/v1/schedules/{job.job_id}", headers=alice)).status_code == 204
    assert (await api.delete(f"/v1/schedules/{job.job_id}", headers=alice)).status_code == 404
    assert (await api.get("/v1/schedules", headers=alice)).json()["items"] == []
