"""The scheduler service: a tick loop over due jobs plus a listener for run outcomes.

`tick()` (every `tick_seconds`, or called directly by tests with a controllable `clock`):
1. enabled jobs without `next_run_at` get one;
2. due jobs are claimed one by one (`firing.fire_next`, SKIP LOCKED: replicas are safe) and their
   runs submitted;
3. runs queued in PostgreSQL whose request is missing from the runs stream are published again
   (`requeue.QueuedRunSweeper`, PostgreSQL is the truth);
4. in-flight runs are checked (`outcomes.check_inflight`): timeouts cancel through the normal
   cancel path (`runs.request_cancel(reason="timeout")`), and outcomes whose `done` event was
   missed are reconciled from the DB.

Outcomes normally arrive by the `done` event: a core subscription on every task's event subject
(`Topology.events_wildcard()`), filtered by the message tag (`tag_of`) before decoding, matched
against the runs in flight (refreshed from the DB on every tick, and added at once by this
replica's firings). Every replica listens; recording is idempotent, so it does not matter which one wins.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from zcbot_core.bus import BusDecodeError, decode, tag_of
from zcbot_core.bus.events import Done, RunEvent
from zcbot_core.platform.service import Runtime
from zcbot_core.platform.worker import TaskGroup, periodic
from zcbot_core.runstate.submit import RunLimits
from zcbot_scheduler.config import SchedulerConfig, SchedulerSettings
from zcbot_scheduler.firing import FireResult, fire_next, schedule_unscheduled
from zcbot_scheduler.outcomes import check_inflight, deliver, record_outcome
from zcbot_scheduler.requeue import QueuedRunSweeper

log = logging.getLogger(__name__)
DRAIN_TIMEOUT = 10.0


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class TickReport:
    now: datetime
    results: list[FireResult] = field(default_factory=list)
    finished: int = 0
    timed_out: int = 0
    requeued: int = 0

    def outcomes(self, kind: str) -> list[FireResult]:
        return [r for r in self.results if r.outcome == kind]

    @property
    def started(self) -> list[FireResult]:
        return self.outcomes("started")


class SchedulerService:
    def __init__(self, clock: Callable[[], datetime] | None = None, config: SchedulerConfig | None = None) -> None:
        self.clock = clock or utc_now
        self._config = config  # None: from the runtime's settings at start
        self.inflight: dict[str, str] = {}  # run_id -> job_id
        self._tick_lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._sub: Any = None
        self._pending = TaskGroup()  # outcome recordings in progress

    def now(self) -> datetime:
        value = self.clock()
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)

    async def start(self, rt: Runtime) -> None:
        rt.require_db()
        self.rt = rt
        # The runtime's settings as given (the process's `SchedulerSettings`), else extended with the
        # scheduler's knobs from the environment (a service started in-process on a shared `Settings`).
        self.config = self._config or SchedulerConfig.from_settings(SchedulerSettings.extend(rt.settings))
        self.limits = RunLimits.from_settings(rt.settings)
        self.sweeper = QueuedRunSweeper(rt, self.config.requeue_after_seconds)
        self._sub = await rt.nc.subscribe(rt.topo.events_wildcard(), cb=self._on_event, pending_msgs_limit=1_000_000,
                                          pending_bytes_limit=256 * 1024 * 1024)
        if self.config.tick_seconds > 0:
            self._loop_task = asyncio.create_task(self._loop())
        log.info("scheduler started", extra={"tick_seconds": self.config.tick_seconds,
                                             "max_failures": self.config.max_failures})

    # ---- tick ------------------------------------------------------------------------------
    async def _loop(self) -> None:
        await periodic(self._stopping, self.config.tick_seconds, self.tick, "scheduler tick")

    def _started(self, run_id: str, job_id: str) -> None:
        self.inflight[run_id] = job_id

    async def tick(self) -> TickReport:
        async with self._tick_lock:
            now = self.now()
            report = TickReport(now=now)
            await schedule_unscheduled(self.rt, now)
            for _ in range(self.config.batch):
                if self._stopping.is_set():
                    break
                result = await fire_next(self.rt, self.config, self.limits, now, self._started)
                if result is None:
                    break
                report.results.append(result)
                if result.push is not None:
                    await deliver(self.rt, self.config, result.push)
            try:
                report.requeued = await self.sweeper.sweep_ended() + await self.sweeper.sweep()
            except Exception:  # the next tick sweeps again; due jobs must not wait for it
                log.exception("queued-run sweep failed")
            checked = await check_inflight(self.rt, self.config, now, self.inflight)
            report.finished, report.timed_out = checked.finished, checked.timed_out
            return report

    # ---- outcomes --------------------------------------------------------------------------
    async def _on_event(self, msg: Any) -> None:
        if tag_of(msg.data) != Done.TAG:  # most events are text deltas: not decoded
            return
        try:
            event = decode(msg.data, RunEvent)
        except BusDecodeError:
            return
        if not isinstance(event, Done):
            return
        # A run queued behind this one whose request its runner did not live to publish: soon again.
        self.sweeper.ended(self.rt.topo.task_of_event_subject(msg.subject))
        job_id = self.inflight.get(event.run_id)
        if job_id is None:
            return
        self._pending.spawn(self._record(job_id, event.run_id, event.status))

    async def _record(self, job_id: str, run_id: str, status: str) -> None:
        try:
            await record_outcome(self.rt, self.config, job_id=job_id, run_id=run_id, status=status)
        except Exception:
            log.exception("recording a scheduled run's outcome failed (the next tick reconciles it)",
                          extra={"job_id": job_id, "run_id": run_id})
        finally:
            self.inflight.pop(run_id, None)

    async def wait_idle(self) -> None:
        """Wait for outcome recordings in progress (tests)."""
        while self._pending:
            await self._pending.wait(None)

    # ---- lifecycle -------------------------------------------------------------------------
    async def drain(self) -> None:
        self._stopping.set()
        if self._loop_task is not None:
            await asyncio.wait({self._loop_task}, timeout=DRAIN_TIMEOUT)
            if not self._loop_task.done():
                self._loop_task.cancel()
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:
                pass
        await self._pending.wait(DRAIN_TIMEOUT)
