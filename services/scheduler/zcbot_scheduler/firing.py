"""Claiming a due job and starting its run through the normal pipeline (`submit.submit_message`).

One job per transaction: `SELECT ... FOR UPDATE SKIP LOCKED` takes the earliest due job that no
other replica holds; the row stays locked while its run is submitted and is committed with its
`next_run_at` already in the future, so concurrent replicas can never fire the same due time twice.

- No catch-up: `next_run_at` becomes the next fire time after *now*; a due time older than the
  misfire grace (downtime) is skipped, not run late.
- isolated: a new task per firing in the job's folder, `scheduled_job_id` set, named
  "<job name> <local date time>". persistent: the bound task; busy (a run active) -> skipped.
- A job whose previous run is still in flight is skipped (never two runs of one job at once).
- Over the user's run cap -> skipped (the empty task is removed). Anything else that prevents the
  start (folder rules, task deleted, bus down) is an error and counts as a failure.

Crash note: should the process die between the run's submission and the commit, the job row
unlocks still due and another replica fires it again; the window is milliseconds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from prometheus_client import Counter
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from zcbot_core import schedules
from zcbot_core.db.models import ScheduledJob, Task
from zcbot_core.errors import ZcbotError
from zcbot_core.platform.service import Runtime
from zcbot_core.runstate import submit
from zcbot_core.runstate import transitions as runs
from zcbot_core.runstate.status import ACTIVE
from zcbot_core.safe_fs.paths import PathRejected
from zcbot_core.workspace.folders import NestedFolder
from zcbot_core.workspace.tasks import create_task
from zcbot_scheduler.config import SchedulerConfig
from zcbot_scheduler.outcomes import PendingPush, apply_result

log = logging.getLogger(__name__)
FIRINGS = Counter("zcbot_scheduler_firings_total", "Due times handled by the scheduler", ["outcome"])


class FireFailed(ZcbotError):
    """The run could not be started for a reason that is the job's problem (counts as a failure)."""

    code = "fire_failed"


@dataclass
class FireResult:
    job_id: str
    outcome: str  # started | skipped | missed | failed | disabled
    run_id: str | None = None
    task_id: str | None = None
    detail: str | None = None
    push: PendingPush | None = None


async def schedule_unscheduled(rt: Runtime, now: datetime) -> int:
    """Give enabled jobs without a next run (e.g. inserted by hand) their next fire time."""
    count = 0
    async with rt.sessions() as session, session.begin():
        jobs = (await session.execute(
            select(ScheduledJob).where(ScheduledJob.enabled.is_(True), ScheduledJob.next_run_at.is_(None))
            .limit(100).with_for_update(skip_locked=True)
        )).scalars().all()
        for job in jobs:
            try:
                job.next_run_at = schedules.next_fire(job.cron, job.timezone, now)
            except (schedules.ScheduleError, ValueError) as exc:
                job.enabled = False
                job.last_status = "error"
                job.last_error = f"disabled: invalid schedule ({exc})"
            count += 1
    return count


async def _create_run_task(rt: Runtime, job: ScheduledJob, slot: datetime) -> str:
    async with rt.sessions() as session, session.begin():
        try:
            task = await create_task(
                session, rt.settings.storage_root, user_id=job.user_id,
                name=schedules.firing_task_name(job.name, slot, job.timezone), working_dir=job.working_dir, existing_folder=True,
                scheduled_job_id=job.job_id,
                description=f"Run of the scheduled job \"{job.name}\" ({job.cron}, {job.timezone})")
        except NestedFolder as exc:
            raise FireFailed(f"the job's folder {job.working_dir!r} nests with the folder {exc.existing!r} of another "
                             "task; change the job's working_dir") from None
        except (PathRejected, OSError) as exc:
            raise FireFailed(f"cannot prepare the folder {job.working_dir!r}: {exc}") from None
        return task.task_id


async def _drop_empty_task(rt: Runtime, task_id: str) -> None:
    async with rt.sessions() as session, session.begin():
        await session.execute(delete(Task).where(Task.task_id == task_id, Task.run_id.is_(None)))


def _skip(job: ScheduledJob, slot: datetime, why: str) -> FireResult:
    job.last_status = "skipped"
    job.last_error = f"skipped the run due {schedules.local_label(slot, job.timezone)}: {why}"
    return FireResult(job.job_id, "skipped", detail=why)


async def _start(rt: Runtime, cfg: SchedulerConfig, limits: submit.RunLimits, session: AsyncSession,
                 job: ScheduledJob, slot: datetime, now: datetime,
                 on_started: Callable[[str, str], None]) -> FireResult:
    created: str | None = None
    try:
        if job.mode == "persistent":
            task = (await session.execute(
                select(Task).where(Task.task_id == job.task_id, Task.user_id == job.user_id, Task.deleted_at.is_(None))
            )).scalar_one_or_none() if job.task_id else None
            if task is None:
                raise FireFailed("the job's bound task no longer exists; bind it to another task or delete the job")
            if task.run_status in ACTIVE:
                return _skip(job, slot, "its task was busy with another run")
            task_id = task.task_id
        else:
            task_id = created = await _create_run_task(rt, job, slot)
        result = await submit.submit_message(
            rt.sessions, rt.js, rt.nc, rt.topo, user_id=job.user_id, task_id=task_id,
            content=schedules.firing_prompt(job, slot), multitask="reject", limits=limits,
            origin="scheduler", scheduled_job_id=job.job_id, grant_key=rt.settings.zcbot_run_grant_key,
        )
    except runs.RunConflict:
        return _skip(job, slot, "its task was busy with another run")
    except runs.RunQuotaExceeded as exc:
        if created is not None:
            await _drop_empty_task(rt, created)
        return _skip(job, slot, str(exc))
    except (FireFailed, runs.TaskNotFound, runs.BusUnavailable) as exc:
        message = str(exc) if not isinstance(exc, runs.TaskNotFound) else "the job's task no longer exists"
        job.last_run_at = now
        job.last_run_id = None
        job.last_task_id = created or job.last_task_id
        push = apply_result(job, "error", f"could not start the run: {message}", cfg, run_id=None)
        return FireResult(job.job_id, "failed", task_id=created, detail=message, push=push)
    job.last_run_at = now
    job.last_run_id = result.run_id
    job.last_task_id = task_id
    job.last_status = "running"
    job.last_error = None
    job.run_deadline_at = now + timedelta(seconds=job.timeout_seconds)
    job.cancel_requested_at = None
    on_started(result.run_id, job.job_id)  # before commit: an early `done` waits on the row lock
    log.info("scheduled run started", extra={"job_id": job.job_id, "run_id": result.run_id, "task_id": task_id})
    return FireResult(job.job_id, "started", run_id=result.run_id, task_id=task_id)


async def fire_next(rt: Runtime, cfg: SchedulerConfig, limits: submit.RunLimits, now: datetime,
                    on_started: Callable[[str, str], None]) -> FireResult | None:
    """Handle the earliest due job nobody else holds; None when no job is due."""
    async with rt.sessions() as session, session.begin():
        job = (await session.execute(
            select(ScheduledJob)
            .where(ScheduledJob.enabled.is_(True), ScheduledJob.next_run_at.is_not(None),
                   ScheduledJob.next_run_at <= now)
            .order_by(ScheduledJob.next_run_at).limit(1).with_for_update(skip_locked=True)
        )).scalar_one_or_none()
        if job is None:
            return None
        slot = job.next_run_at
        assert slot is not None
        try:
            job.next_run_at = schedules.next_fire(job.cron, job.timezone, now)
        except (schedules.ScheduleError, ValueError) as exc:
            job.enabled = False
            job.next_run_at = None
            job.last_status = "error"
            job.last_error = f"disabled: invalid schedule ({exc})"
            result = FireResult(job.job_id, "disabled", detail=str(exc))
        else:
            late = (now - slot).total_seconds()
            if late > cfg.misfire_grace_seconds:
                log.info("missed due time skipped (no catch-up)",
                         extra={"job_id": job.job_id, "due": slot.isoformat(), "late_seconds": round(late)})
                result = FireResult(job.job_id, "missed", detail=f"due {slot.isoformat()}, {round(late)} s late")
            elif job.run_deadline_at is not None:
                result = _skip(job, slot, "the previous run of this job is still in progress")
            else:
                result = await _start(rt, cfg, limits, session, job, slot, now, on_started)
    FIRINGS.labels(outcome=result.outcome).inc()
    return result
