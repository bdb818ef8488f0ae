"""Scheduler fixtures: real NATS + PostgreSQL (root fixtures), a controllable clock, helpers.

- `settings_env` (override): raises the per-user run cap so several jobs of one user can fire.
- `harness`: `Harness` with `clock` (a `Clock`), `scheduler(config=None)` (a started
  `SchedulerService` on its own runtime, loop disabled: tests call `tick()`), `user()`,
  `create_job()`, `job()`, `task()`, `finish()` (end a run like the runner does: message,
  `finish_run`, `done` event), `push_responder()` (a fake channels service counting pushes).
- `live`: `Live` = a real in-process runner (RunnerService, real LiteLLM path) talking to a fake
  LLM, plus a started scheduler with a controllable clock; for runs that really execute. (Lighter
  than the e2e `stack`: no gateway or executor, which scheduled runs without tools do not need.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from zcbot_core.bus import PushReply, PushRequest, decode, encode
from zcbot_core.bus.events import Done
from zcbot_core.db.models import ScheduledJob, Task, User
from zcbot_core.platform.config import Settings
from zcbot_core.platform.service import Runtime, close_runtime, open_runtime
from zcbot_core.runstate.transitions import append_message, finish_run
from zcbot_core.schedules import create_schedule
from zcbot_fakellm import FakeLLM
from zcbot_scheduler.config import SchedulerConfig
from zcbot_scheduler.service import SchedulerService

T0 = datetime(2026, 6, 1, 8, 59, 30, tzinfo=timezone.utc)
FAST = SchedulerConfig.defaults(tick_seconds=0, reconcile_grace_seconds=0, push_timeout_seconds=2)


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    return {**settings_env, "ZCBOT_MAX_RUNS_PER_USER": "50"}


class Clock:
    def __init__(self, now: datetime) -> None:
        self.value = now

    def __call__(self) -> datetime:
        return self.value

    def set(self, value: datetime) -> None:
        self.value = value

    def advance(self, **delta: float) -> datetime:
        self.value = self.value + timedelta(**delta)
        return self.value


@dataclass
class PushResponder:
    requests: list[PushRequest] = field(default_factory=list)
    sub: Any = None


@dataclass
class Harness:
    settings: Settings
    clock: Clock
    runtimes: list[Runtime] = field(default_factory=list)
    services: list[SchedulerService] = field(default_factory=list)

    async def runtime(self) -> Runtime:
        rt = await open_runtime("scheduler-test", self.settings)
        self.runtimes.append(rt)
        return rt

    @property
    def rt(self) -> Runtime:
        return self.runtimes[0]

    async def scheduler(self, config: SchedulerConfig = FAST) -> SchedulerService:
        svc = SchedulerService(clock=self.clock, config=config)
        await svc.start(await self.runtime())
        self.services.append(svc)
        return svc

    async def user(self, user_id: str) -> str:
        async with self.rt.sessions() as s, s.begin():
            if await s.get(User, user_id) is None:
                s.add(User(user_id=user_id))
        return user_id

    async def task(self, task_id: str) -> Task:
        async with self.rt.sessions() as s:
            return (await s.execute(select(Task).where(Task.task_id == task_id))).scalar_one()

    async def make_task(self, user_id: str, name: str, working_dir: str | None = None, **extra: Any) -> Task:
        async with self.rt.sessions() as s, s.begin():
            task = Task(user_id=user_id, name=name, working_dir=working_dir or name, **extra)
            s.add(task)
            await s.flush()
            return task

    async def create_job(self, user_id: str, **kw: Any) -> ScheduledJob:
        kw.setdefault("name", "Daily brief")
        kw.setdefault("cron", "0 9 * * *")
        kw.setdefault("prompt", "Write the daily brief.")
        kw.setdefault("timezone", "UTC")
        async with self.rt.sessions() as s, s.begin():
            return await create_schedule(s, user_id=user_id, now=self.clock(), **kw)

    async def job(self, job_id: str) -> ScheduledJob:
        async with self.rt.sessions() as s:
            return (await s.execute(select(ScheduledJob).where(ScheduledJob.job_id == job_id))).scalar_one()

    async def tasks_of(self, job_id: str) -> list[Task]:
        async with self.rt.sessions() as s:
            return list((await s.execute(
                select(Task).where(Task.scheduled_job_id == job_id).order_by(Task.created_at))).scalars().all())

    async def finish(self, task_id: str, run_id: str, status: str = "ok", *, error: str | None = None,
                     text: str = "All done.", publish: bool = True) -> None:
        """End a run as the runner does: assistant message, terminal state, then the `done` event."""
        rt = self.rt
        async with rt.sessions() as s, s.begin():
            await append_message(s, task_id, {"role": "assistant", "content": text}, run_id=run_id)
            await finish_run(s, rt.js, rt.topo, task_id=task_id, run_id=run_id, status=status, error=error, timings={})
        if publish:
            await rt.js.publish(rt.topo.event_subject(task_id), encode(Done(run_id=run_id, status=status,
                                                                           final_text=text)))

    async def push_responder(self, channel: str = "wecom", reply: bool = True) -> PushResponder:
        responder = PushResponder()
        nc = self.rt.nc

        async def on_push(msg: Any) -> None:
            req = decode(msg.data, PushRequest)
            responder.requests.append(req)
            if reply:
                await msg.respond(encode(PushReply(delivered=[req.channel or channel])))

        responder.sub = await nc.subscribe(self.rt.topo.push_wildcard(), cb=on_push)
        await nc.flush()
        return responder

    async def settle(self, predicate: Any, timeout: float = 10.0) -> None:
        """Poll `await predicate()` until true (outcomes arrive asynchronously by the done event)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            if await predicate():
                return
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("condition not reached in time")
            await asyncio.sleep(0.05)


@pytest.fixture
async def harness(settings: Settings) -> AsyncIterator[Harness]:
    h = Harness(settings=settings, clock=Clock(T0))
    await h.runtime()
    try:
        yield h
    finally:
        for svc in h.services:
            await svc.drain()
        for rt in h.runtimes:
            await close_runtime(rt)


FAKE_KEY_ENV = "ZCBOT_SCHED_TEST_LLM_KEY"


@dataclass
class Live:
    settings: Settings
    fake: FakeLLM
    scheduler: SchedulerService
    rt: Runtime
    clock: Clock

    async def user(self, user_id: str) -> str:
        async with self.rt.sessions() as s, s.begin():
            if await s.get(User, user_id) is None:
                s.add(User(user_id=user_id))
        return user_id

    async def job(self, job_id: str) -> ScheduledJob:
        async with self.rt.sessions() as s:
            return (await s.execute(select(ScheduledJob).where(ScheduledJob.job_id == job_id))).scalar_one()

    async def wait_status(self, job_id: str, *statuses: str, timeout: float = 15.0) -> ScheduledJob:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            row = await self.job(job_id)
            if row.last_status in statuses:
                return row
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"job stayed {row.last_status!r}")
            await asyncio.sleep(0.05)


@pytest.fixture
async def live(settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[Live]:
    from zcbot_runner.service import RunnerService

    fake = await FakeLLM().start()
    models = tmp_path / "models"
    models.mkdir()
    (models / "fake.yaml").write_text("\n".join([
        "model: openai/fake-model", f"api_base: {fake.base_url}", f"api_key_env: {FAKE_KEY_ENV}",
        "max_context: 64000", "reliable_context: 32000", "max_output: 2048", "max_iterations: 10",
        "pricing: {input_per_mtok: 1.0, output_per_mtok: 2.0}"]) + "\n")
    env = {**settings_env, "ZCBOT_MODELS_DIR": str(models), "ZCBOT_DEFAULT_MODEL": "fake", FAKE_KEY_ENV: "sk-fake",
           "ZCBOT_ACK_WAIT_SECONDS": "3"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    runner_rt = await open_runtime("runner", settings)
    runner = RunnerService(lambda rt: None, [])  # no sandbox tools: scheduled test prompts need none
    await runner.start(runner_rt)
    clock = Clock(T0)
    rt = await open_runtime("scheduler", settings)
    svc = SchedulerService(clock=clock, config=SchedulerConfig.defaults(tick_seconds=0, reconcile_grace_seconds=1))
    await svc.start(rt)
    try:
        yield Live(settings=settings, fake=fake, scheduler=svc, rt=rt, clock=clock)
    finally:
        await svc.drain()
        await close_runtime(rt)
        await runner.drain()
        await runner_rt.nc.close()  # a drain would wait ~5 s on the runner's pull subscription
        await close_runtime(runner_rt)
        await fake.stop()
