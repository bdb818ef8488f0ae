"""The scheduler against real NATS + PostgreSQL with a controllable clock (runs are ended by the test)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import select, update

from tests.scheduler.conftest import FAST, T0, Harness
from zcbot_core.bus import CancelRequest, RunRequest, decode, encode
from zcbot_core.bus.events import Done
from zcbot_core.db.models import Message, ScheduledJob, Task
from zcbot_scheduler.config import SchedulerConfig

DUE = datetime(2026, 6, 1, 9, 0, 0, 500_000, tzinfo=timezone.utc)  # half a second after 09:00Z


async def run_request(h: Harness, task_id: str) -> RunRequest:
    msg = await h.rt.js.get_last_msg(h.rt.topo.runs_stream, h.rt.topo.run_subject(task_id))
    return decode(msg.data, RunRequest)


async def test_due_job_fires_once_with_two_replicas(harness: Harness) -> None:
    h = harness
    a, b = await h.scheduler(), await h.scheduler()
    jobs = []
    for i in range(6):
        user = await h.user(f"u{i % 3}")
        jobs.append(await h.create_job(user, name=f"Brief {i}", working_dir=f"briefs-{i}", prompt=f"KEY-{i} go"))
    assert all(j.next_run_at == datetime(2026, 6, 1, 9, tzinfo=timezone.utc) for j in jobs)
    assert not (await a.tick()).results  # not due yet
    h.clock.set(DUE)
    reports = []
    for _ in range(3):
        reports += await asyncio.gather(a.tick(), b.tick())
    started = [r for rep in reports for r in rep.started]
    assert len(started) == 6 and {r.job_id for r in started} == {j.job_id for j in jobs}
    assert all(r.outcome == "started" for rep in reports for r in rep.results)
    info = await h.rt.js.stream_info(h.rt.topo.runs_stream)
    assert info.state.messages == 6
    for job in jobs:
        tasks = await h.tasks_of(job.job_id)
        assert len(tasks) == 1
        task = tasks[0]
        assert task.name == f"{job.name} 2026-06-01 09:00" and task.working_dir == job.working_dir
        assert task.run_status == "queued" and task.scheduled_job_id == job.job_id
        req = await run_request(h, task.task_id)
        assert req.origin == "scheduler" and req.scheduled_job_id == job.job_id and req.run_id == task.run_id
        row = await h.job(job.job_id)
        assert row.last_run_id == task.run_id and row.last_task_id == task.task_id and row.last_status == "running"
        assert row.next_run_at == datetime(2026, 6, 2, 9, tzinfo=timezone.utc)
        assert row.run_deadline_at == DUE + timedelta(seconds=1800)
        assert (h.settings.storage_root / job.user_id / job.working_dir).is_dir()
    async with h.rt.sessions() as s:
        content = (await s.execute(select(Message.payload).where(Message.task_id == task.task_id))).scalar_one()
    assert content["role"] == "user" and content["content"].endswith("KEY-5 go")
    assert content["content"].startswith('[scheduled job "Brief 5"')


async def test_timezone_job_fires_at_local_time(harness: Harness) -> None:
    h = harness
    svc = await h.scheduler()
    user = await h.user("tz")
    h.clock.set(datetime(2026, 3, 28, 12, tzinfo=timezone.utc))
    job = await h.create_job(user, cron="0 9 * * *", timezone="Europe/Berlin")
    assert job.next_run_at == datetime(2026, 3, 29, 7, tzinfo=timezone.utc)  # CEST since 01:00Z
    h.clock.set(datetime(2026, 3, 29, 6, 59, 59, tzinfo=timezone.utc))
    assert not (await svc.tick()).started
    h.clock.set(datetime(2026, 3, 29, 7, 0, 1, tzinfo=timezone.utc))
    assert len((await svc.tick()).started) == 1
    [task] = await h.tasks_of(job.job_id)
    assert task.name == "Daily brief 2026-03-29 09:00"


async def test_downtime_does_not_catch_up(harness: Harness) -> None:
    h = harness
    svc = await h.scheduler()
    user = await h.user("late")
    job = await h.create_job(user, cron="0 * * * *")
    h.clock.set(DUE)
    [first] = (await svc.tick()).started
    await h.finish(first.task_id, first.run_id)
    await h.settle(lambda: _status(h, job.job_id, "ok"))
    # The service is "down" for five hours: four due times pass unseen.
    h.clock.advance(hours=5, minutes=10)
    report = await svc.tick()
    assert not report.started and [r.outcome for r in report.results] == ["missed"]
    row = await h.job(job.job_id)
    assert row.next_run_at == datetime(2026, 6, 1, 15, tzinfo=timezone.utc) and row.last_status == "ok"
    assert len(await h.tasks_of(job.job_id)) == 1
    assert not (await svc.tick()).results
    h.clock.set(datetime(2026, 6, 1, 15, 0, 2, tzinfo=timezone.utc))
    assert len((await svc.tick()).started) == 1
    assert len(await h.tasks_of(job.job_id)) == 2


async def _status(h: Harness, job_id: str, status: str) -> bool:
    return (await h.job(job_id)).last_status == status


async def test_busy_persistent_task_is_skipped(harness: Harness) -> None:
    h = harness
    svc = await h.scheduler()
    user = await h.user("pers")
    task = await h.make_task(user, "Journal", run_status="running", run_id="userrun")
    job = await h.create_job(user, mode="persistent", task_id=task.task_id, cron="0 * * * *", timeout_seconds=7200)
    assert job.working_dir == "Journal" and job.task_id == task.task_id
    h.clock.set(DUE)
    report = await svc.tick()
    assert [r.outcome for r in report.results] == ["skipped"]
    row = await h.job(job.job_id)
    assert row.last_status == "skipped" and "busy" in row.last_error and row.last_run_id is None
    assert row.next_run_at == datetime(2026, 6, 1, 10, tzinfo=timezone.utc)  # skipped, not queued
    assert (await h.task(task.task_id)).pending_inputs == []
    async with h.rt.sessions() as s, s.begin():
        await s.execute(update(Task).where(Task.task_id == task.task_id).values(run_status="idle"))
    h.clock.set(datetime(2026, 6, 1, 10, 0, 1, tzinfo=timezone.utc))
    [started] = (await svc.tick()).started
    assert started.task_id == task.task_id
    assert (await h.task(task.task_id)).run_id == started.run_id
    assert not await h.tasks_of(job.job_id)  # persistent runs do not create tasks
    # While that run is still going, the next due time is skipped as well.
    h.clock.set(datetime(2026, 6, 1, 11, 0, 1, tzinfo=timezone.utc))
    assert [r.outcome for r in (await svc.tick()).results] == ["skipped"]
    await h.finish(task.task_id, started.run_id, text="Journal updated.")
    await h.settle(lambda: _status(h, job.job_id, "ok"))


async def test_timeout_cancels_run_and_counts_as_failure(harness: Harness) -> None:
    h = harness
    svc = await h.scheduler()
    user = await h.user("slow")
    job = await h.create_job(user, timeout_seconds=60)
    cancels: list[CancelRequest] = []

    async def on_cancel(msg: Any) -> None:
        cancels.append(decode(msg.data, CancelRequest))

    sub = await h.rt.nc.subscribe(h.rt.topo.cancel_wildcard(), cb=on_cancel)
    h.clock.set(DUE)
    [run] = (await svc.tick()).started
    h.clock.advance(seconds=59)
    assert (await svc.tick()).timed_out == 0
    h.clock.advance(seconds=2)
    assert (await svc.tick()).timed_out == 1
    assert (await svc.tick()).timed_out == 0  # cancelled once
    task = await h.task(run.task_id)
    assert task.run_status == "cancelling"
    await h.settle(lambda: _true(len(cancels) == 1))
    assert cancels[0].reason == "timeout" and cancels[0].run_id == run.run_id
    kv = await h.rt.js.key_value(h.rt.topo.cancel_bucket)
    stored = decode((await kv.get(h.rt.topo.kv_key(run.task_id))).value, CancelRequest)
    assert stored.reason == "timeout"
    # The runner stops the run (it reports the cancel as an error) and emits `done`.
    await h.finish(run.task_id, run.run_id, status="error", error="the run exceeded its wall-clock limit")
    await h.settle(lambda: _status(h, job.job_id, "error"))
    row = await h.job(job.job_id)
    assert row.last_error.startswith("timed out: the run exceeded the job's timeout of 60 s")
    assert row.consecutive_failures == 1 and row.enabled and row.run_deadline_at is None
    await sub.unsubscribe()


async def _true(value: bool) -> bool:
    return value


async def test_timeout_recorded_even_if_run_never_stops(harness: Harness) -> None:
    h = harness
    svc = await h.scheduler(SchedulerConfig.defaults(tick_seconds=0, cancel_grace_seconds=30, reconcile_grace_seconds=0))
    user = await h.user("stuck")
    job = await h.create_job(user, timeout_seconds=60)
    h.clock.set(DUE)
    [run] = (await svc.tick()).started
    h.clock.advance(seconds=61)
    assert (await svc.tick()).timed_out == 1
    h.clock.advance(seconds=31)
    assert (await svc.tick()).finished == 1
    row = await h.job(job.job_id)
    assert row.last_status == "error" and "did not stop" in row.last_error and row.consecutive_failures == 1
    assert row.last_run_id == run.run_id and row.run_deadline_at is None


async def test_consecutive_failures_disable_the_job_and_push(harness: Harness) -> None:
    h = harness
    svc = await h.scheduler(SchedulerConfig.defaults(tick_seconds=0, max_failures=3, reconcile_grace_seconds=0))
    pushes = await h.push_responder()
    user = await h.user("flaky")
    job = await h.create_job(user, cron="0 * * * *")
    slot = datetime(2026, 6, 1, 9, tzinfo=timezone.utc)
    outcomes = ["error", "ok", "error", "stopped", "error"]
    for i, status in enumerate(outcomes):
        h.clock.set(slot + timedelta(hours=i, seconds=1))
        [run] = (await svc.tick()).started
        await h.finish(run.task_id, run.run_id, status=status, error="model said no" if status == "error" else None)
        await h.settle(lambda s=status: _status(h, job.job_id, s))
        row = await h.job(job.job_id)
        assert row.consecutive_failures == [1, 0, 1, 2, 3][i]
        assert row.enabled == (i < 4)
    assert row.next_run_at is None and row.last_error == "model said no"
    assert len(pushes.requests) == 1  # no notify configured: only the disable notice
    req = pushes.requests[0]
    assert req.user_id == user and req.channel is None and req.origin == "scheduler"
    assert "disabled after 3 consecutive failed runs" in req.text and "model said no" in req.text
    h.clock.advance(hours=3)
    assert not (await svc.tick()).results  # disabled jobs never fire


async def test_notify_pushes_once_per_run(harness: Harness) -> None:
    h = harness
    svc = await h.scheduler()
    pushes = await h.push_responder()
    user = await h.user("reader")
    job = await h.create_job(user, cron="0 * * * *", notify="wecom", timezone="Asia/Shanghai")
    h.clock.set(DUE)
    [run] = (await svc.tick()).started
    await h.finish(run.task_id, run.run_id, text="Top story: cron is hard.")
    await h.settle(lambda: _status(h, job.job_id, "ok"))
    # A duplicate `done` and further ticks (reconciliation) push nothing more.
    await h.rt.js.publish(h.rt.topo.event_subject(run.task_id), encode(Done(run_id=run.run_id, status="ok")))
    await svc.tick()
    await svc.tick()
    await asyncio.sleep(0.2)
    await svc.wait_idle()
    assert len(pushes.requests) == 1
    req = pushes.requests[0]
    assert req.channel == "wecom" and req.user_id == user and req.origin == "scheduler"
    assert "Top story: cron is hard." in req.text and "[Daily brief] scheduled run finished" in req.text
    assert "17:00 Asia/Shanghai" in req.text
    row = await h.job(job.job_id)
    assert row.notified_run_id == run.run_id and row.last_error is None
    # The next run is pushed too (once); notify='all' means every channel (channel=None).
    async with h.rt.sessions() as s, s.begin():
        await s.execute(update(ScheduledJob).where(ScheduledJob.job_id == job.job_id).values(notify="all"))
    h.clock.set(datetime(2026, 6, 1, 10, 0, 1, tzinfo=timezone.utc))
    [run2] = (await svc.tick()).started
    await h.finish(run2.task_id, run2.run_id, status="error", error="boom")
    await h.settle(lambda: _true(len(pushes.requests) == 2))
    assert pushes.requests[1].channel is None and "failed" in pushes.requests[1].text and "boom" in pushes.requests[1].text


async def test_notify_without_channel_service_records_a_warning(harness: Harness) -> None:
    h = harness
    svc = await h.scheduler()
    user = await h.user("alone")
    job = await h.create_job(user, notify="all")
    h.clock.set(DUE)
    [run] = (await svc.tick()).started
    await h.finish(run.task_id, run.run_id)
    await h.settle(lambda: _warned(h, job.job_id))
    row = await h.job(job.job_id)
    assert row.last_status == "ok" and row.notified_run_id == run.run_id
    assert row.last_error.startswith("notify:")
    assert (await svc.tick()).results == []  # still alive


async def _warned(h: Harness, job_id: str) -> bool:
    row = await h.job(job_id)
    return bool(row.last_error and "notify" in row.last_error)


async def test_missed_done_event_is_reconciled_from_the_db(harness: Harness) -> None:
    h = harness
    svc = await h.scheduler()
    user = await h.user("quiet")
    ok_job = await h.create_job(user, name="A", working_dir="a")
    bad_job = await h.create_job(user, name="B", working_dir="b")
    h.clock.set(DUE)
    runs = {r.job_id: r for r in (await svc.tick()).started}
    await h.finish(runs[ok_job.job_id].task_id, runs[ok_job.job_id].run_id, publish=False)
    await h.finish(runs[bad_job.job_id].task_id, runs[bad_job.job_id].run_id, status="error",
                   error="provider down", publish=False)
    assert (await svc.tick()).finished == 2
    assert (await h.job(ok_job.job_id)).last_status == "ok"
    bad = await h.job(bad_job.job_id)
    assert bad.last_status == "error" and bad.last_error == "provider down" and bad.consecutive_failures == 1


async def test_isolated_start_failure_counts_and_quota_skips(harness: Harness, monkeypatch: object) -> None:
    h = harness
    svc = await h.scheduler()
    user = await h.user("nest")
    job = await h.create_job(user, working_dir="reports")
    await h.make_task(user, "inner", working_dir="reports/2026")  # breaks the no-subtask rule later
    h.clock.set(DUE)
    [res] = (await svc.tick()).results
    assert res.outcome == "failed"
    row = await h.job(job.job_id)
    assert row.last_status == "error" and "nests" in row.last_error and row.consecutive_failures == 1
    assert not await h.tasks_of(job.job_id)
    # Over the user's run cap with its FIFO full: skipped (not a failure), and no empty task is left behind.
    svc.limits.max_runs_per_user = 0
    svc.limits.max_waiting_per_user = 0
    async with h.rt.sessions() as s, s.begin():
        await s.execute(update(Task).where(Task.user_id == user).values(deleted_at=DUE))
    h.clock.set(datetime(2026, 6, 2, 9, 0, 1, tzinfo=timezone.utc))
    [res] = (await svc.tick()).results
    assert res.outcome == "skipped"
    row = await h.job(job.job_id)
    assert row.last_status == "skipped" and "limit" in row.last_error and row.consecutive_failures == 1
    assert not await h.tasks_of(job.job_id)


async def test_default_clock_and_unscheduled_jobs(harness: Harness) -> None:
    h = harness
    from zcbot_scheduler.service import SchedulerService

    svc = SchedulerService(config=FAST)
    await svc.start(await h.runtime())
    h.services.append(svc)
    user = await h.user("raw")
    async with h.rt.sessions() as s, s.begin():
        s.add(ScheduledJob(user_id=user, name="raw", cron="*/5 * * * *", timezone="UTC", prompt="x",
                           working_dir="raw", enabled=True))
    before = datetime.now(timezone.utc)
    await svc.tick()
    async with h.rt.sessions() as s:
        nxt = (await s.execute(select(ScheduledJob.next_run_at).where(ScheduledJob.user_id == user))).scalar_one()
    assert before < nxt <= before + timedelta(minutes=5)
    assert T0 < before


async def test_service_process_ticks_on_its_own_and_drains(harness: Harness, start_service: Any) -> None:
    """`zcbot scheduler` (main -> run_service) as a real process: its loop fires a due job; SIGTERM drains."""
    h = harness
    user = await h.user("proc")
    async with h.rt.sessions() as s, s.begin():
        s.add(ScheduledJob(user_id=user, name="proc", cron="0 0 1 1 *", timezone="UTC", prompt="hello",
                           working_dir="proc", enabled=True,
                           next_run_at=datetime.now(timezone.utc) - timedelta(seconds=1)))
    proc = start_service("scheduler", {"ZCBOT_SCHEDULER_TICK_SECONDS": "0.2"}, wait=False)
    await proc.wait_healthy_async(timeout=40)
    async with h.rt.sessions() as s:
        job_id = (await s.execute(select(ScheduledJob.job_id).where(ScheduledJob.user_id == user))).scalar_one()
    await h.settle(lambda: _status(h, job_id, "running"), timeout=20)
    assert len(await h.tasks_of(job_id)) == 1
    row = await h.job(job_id)
    assert row.next_run_at.year == datetime.now(timezone.utc).year + 1
    assert await asyncio.to_thread(proc.terminate, 15) == 0, proc.log_tail()


async def test_a_job_row_with_a_nested_folder_from_before_the_simple_name_rule_still_fires(harness: Harness) -> None:
    h = harness
    svc = await h.scheduler()
    user = await h.user("legacy")
    job = await h.create_job(user, working_dir="reports")
    async with h.rt.sessions() as s, s.begin():  # as stored before issue 26 item 5
        await s.execute(update(ScheduledJob).where(ScheduledJob.job_id == job.job_id).values(working_dir="reports/2026"))
    h.clock.set(DUE)
    [run] = (await svc.tick()).started
    async with h.rt.sessions() as s:
        task = await s.get(Task, run.task_id)
        assert task is not None and task.working_dir == "reports/2026"
