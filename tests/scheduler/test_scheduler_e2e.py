"""Scheduled runs executed for real: the runner service drives the loop against a fake LLM."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select

from tests.scheduler.conftest import T0, Live
from zcbot_core.bus import PushReply, PushRequest, decode, encode
from zcbot_core.db.models import Message, ScheduledJob, Task
from zcbot_core.schedules import create_schedule


async def test_scheduled_run_answers_and_notifies_once(live: Live) -> None:
    rt, svc, clock = live.rt, live.scheduler, live.clock
    live.fake.script("KEY-brief", [{"text": "Today: three meetings and a deadline."}])
    user = await live.user("carol")
    pushes: list[PushRequest] = []

    async def on_push(msg: Any) -> None:
        pushes.append(decode(msg.data, PushRequest))
        await msg.respond(encode(PushReply(delivered=["wecom"])))

    sub = await rt.nc.subscribe(rt.topo.push_subject(user), cb=on_push)
    async with rt.sessions() as s, s.begin():
        job = await create_schedule(s, user_id=user, name="Morning brief", cron="0 17 * * *",
                                    timezone="Asia/Shanghai", prompt="KEY-brief: summarize my day", notify="wecom",
                                    now=clock())
    clock.set(T0 + timedelta(seconds=31))  # 17:00:01 in Shanghai
    [run] = (await svc.tick()).started
    row = await live.wait_status(job.job_id, "ok", "error")
    assert row.last_status == "ok" and row.last_error is None and row.consecutive_failures == 0
    await svc.tick()
    await svc.wait_idle()
    await asyncio.sleep(0.1)
    assert len(pushes) == 1 and pushes[0].channel == "wecom"
    assert "Today: three meetings and a deadline." in pushes[0].text
    async with rt.sessions() as s:
        task = (await s.execute(select(Task).where(Task.task_id == run.task_id))).scalar_one()
        roles = (await s.execute(select(Message.payload["role"].astext).where(Message.task_id == task.task_id)
                                 .order_by(Message.idx))).scalars().all()
    assert task.name == "Morning brief 2026-06-01 17:00" and task.scheduled_job_id == job.job_id
    assert task.run_status == "idle" and roles == ["user", "assistant"]
    await sub.unsubscribe()


async def test_timeout_cancels_a_live_run_through_the_runner(live: Live) -> None:
    rt, svc, clock = live.rt, live.scheduler, live.clock
    live.fake.script("KEY-hang", [{"hang": True}])
    user = await live.user("dave")
    async with rt.sessions() as s, s.begin():
        job = await create_schedule(s, user_id=user, name="Slow", cron="0 9 * * *", timezone="UTC",
                                    prompt="KEY-hang think forever", timeout_seconds=60, now=clock())
    clock.set(T0 + timedelta(seconds=31))
    [run] = (await svc.tick()).started
    for _ in range(200):  # until the runner is really inside the LLM call
        async with rt.sessions() as s:
            status = (await s.execute(select(Task.run_status).where(Task.task_id == run.task_id))).scalar_one()
        if status == "running" and live.fake.active_responses:
            break
        await asyncio.sleep(0.05)
    clock.advance(seconds=61)
    assert (await svc.tick()).timed_out == 1
    row = await live.wait_status(job.job_id, "error", "ok", "cancelled")
    assert row.last_status == "error" and row.last_error.startswith("timed out")
    assert row.consecutive_failures == 1 and row.run_deadline_at is None
    async with rt.sessions() as s:
        task = (await s.execute(select(Task).where(Task.task_id == run.task_id))).scalar_one()
    assert task.run_status in ("idle", "error") and task.run_id == run.run_id
    for _ in range(100):
        if not live.fake.active_responses:
            break
        await asyncio.sleep(0.05)
    assert live.fake.active_responses == 0  # the LLM request was really abandoned


async def test_schedule_create_is_refused_inside_a_scheduled_run(live: Live) -> None:
    rt, svc, clock = live.rt, live.scheduler, live.clock
    spawn = {"name": "Spawn", "cron": "* * * * *", "timezone": "UTC", "prompt": "spawn more"}
    live.fake.script("KEY-spawn", [{"tool_calls": [{"name": "schedule_create", "arguments": spawn}]},
                                   {"text": "I may not create jobs from a scheduled run."}])
    user = await live.user("erin")
    async with rt.sessions() as s, s.begin():
        job = await create_schedule(s, user_id=user, name="Multiplier", cron="0 9 * * *", timezone="UTC",
                                    prompt="KEY-spawn create another job", now=clock())
    clock.set(T0 + timedelta(seconds=31))
    [run] = (await svc.tick()).started
    row = await live.wait_status(job.job_id, "ok", "error", "stopped")
    assert row.last_status == "ok", row.last_error
    async with rt.sessions() as s:
        payloads = (await s.execute(select(Message.payload).where(Message.task_id == run.task_id)
                                    .order_by(Message.idx))).scalars().all()
        jobs = (await s.execute(select(func.count()).select_from(ScheduledJob))).scalar_one()
    tool_results = [p for p in payloads if p.get("role") == "tool"]
    assert len(tool_results) == 1 and "not allowed inside a scheduled run" in str(tool_results[0]["content"])
    assert jobs == 1
