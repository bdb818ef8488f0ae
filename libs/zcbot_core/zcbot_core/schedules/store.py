"""Scheduled jobs in PostgreSQL: create, list, get, update, disable, delete, and the API's dict shape.

Every query is scoped by `user_id` (another user's job looks exactly like a missing one); callers own
the transaction: functions flush, never commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from zcbot_core.db.models import ScheduledJob, Task
from zcbot_core.schedules.cron import local_label, next_fire
from zcbot_core.schedules.rules import (
    DEFAULT_TIMEZONE,
    MAX_JOBS_PER_USER,
    ScheduleError,
    ScheduleNotFound,
    utcnow,
    validate_cron,
    validate_mode,
    validate_name,
    validate_notify,
    validate_prompt,
    validate_timeout,
    validate_timezone,
    validate_working_dir,
)
from zcbot_core.workspace.folders import NestedFolder, claim_folder


async def _owned_task(session: AsyncSession, user_id: str, task_id: Any) -> Task:
    if not isinstance(task_id, str) or not task_id or len(task_id) > 32:
        raise ScheduleError("task_id must name one of your tasks")
    task = (await session.scalars(
        select(Task).where(Task.task_id == task_id, Task.user_id == user_id, Task.deleted_at.is_(None))
    )).first()
    if task is None:
        raise ScheduleError(f"task {task_id!r} is not one of your tasks")
    return task


async def _check_folder(session: AsyncSession, user_id: str, working_dir: str) -> None:
    try:
        await claim_folder(session, user_id, working_dir)
    except NestedFolder as exc:
        raise ScheduleError(str(exc)) from None


async def create_schedule(
    session: AsyncSession,
    *,
    user_id: str,
    name: Any,
    cron: Any,
    prompt: Any,
    timezone: Any = None,
    default_timezone: str = DEFAULT_TIMEZONE,
    mode: Any = "isolated",
    task_id: Any = None,
    working_dir: Any = None,
    notify: Any = None,
    timeout_seconds: Any = None,
    enabled: bool = True,
    now: datetime | None = None,
) -> ScheduledJob:
    clean_name = validate_name(name)
    expr = validate_cron(cron)
    tz = validate_timezone(timezone if timezone is not None else default_timezone)
    text = validate_prompt(prompt)
    clean_mode = validate_mode(mode)
    clean_notify = validate_notify(notify)
    timeout = validate_timeout(timeout_seconds)
    count = (await session.execute(
        select(func.count()).select_from(ScheduledJob).where(ScheduledJob.user_id == user_id)
    )).scalar_one()
    if count >= MAX_JOBS_PER_USER:
        raise ScheduleError(f"you already have {count} scheduled jobs (the limit is {MAX_JOBS_PER_USER}); "
                            "delete one first")
    bound: str | None = None
    if clean_mode == "persistent":
        if task_id is None:
            raise ScheduleError("persistent mode needs task_id: the task whose conversation each run continues")
        task = await _owned_task(session, user_id, task_id)
        wd_given = isinstance(working_dir, str) and working_dir.strip()
        if wd_given and validate_working_dir(working_dir, existing=True) != task.working_dir:
            raise ScheduleError(f"a persistent job works in its task's folder {task.working_dir!r}")
        wd, bound = task.working_dir, task.task_id
    else:
        if task_id is not None:
            raise ScheduleError("task_id is only used by persistent mode (isolated runs get a new task each time)")
        wd = validate_working_dir(working_dir if isinstance(working_dir, str) and working_dir.strip() else clean_name)
        await _check_folder(session, user_id, wd)
    now = now or utcnow()
    job = ScheduledJob(
        user_id=user_id, name=clean_name, cron=expr, timezone=tz, prompt=text, mode=clean_mode, task_id=bound,
        working_dir=wd, notify=clean_notify, enabled=bool(enabled), timeout_seconds=timeout,
        consecutive_failures=0, next_run_at=next_fire(expr, tz, now) if enabled else None,
    )
    session.add(job)
    await session.flush()
    await session.refresh(job)
    return job


async def list_schedules(session: AsyncSession, user_id: str) -> list[ScheduledJob]:
    stmt = (select(ScheduledJob).where(ScheduledJob.user_id == user_id)
            .order_by(ScheduledJob.created_at, ScheduledJob.job_id))
    return list((await session.scalars(stmt)).all())


async def get_schedule(session: AsyncSession, user_id: str, job_id: Any, *, for_update: bool = False) -> ScheduledJob:
    if not isinstance(job_id, str) or not job_id or len(job_id) > 32 or "\x00" in job_id:
        raise ScheduleNotFound("scheduled job not found")
    stmt = select(ScheduledJob).where(ScheduledJob.job_id == job_id, ScheduledJob.user_id == user_id)
    if for_update:
        stmt = stmt.with_for_update()
    job = (await session.scalars(stmt)).first()
    if job is None:
        raise ScheduleNotFound("scheduled job not found")
    return job


async def update_schedule(
    session: AsyncSession, user_id: str, job_id: Any, changes: Mapping[str, Any], *, now: datetime | None = None
) -> ScheduledJob:
    """Apply the given fields (name, cron, timezone, prompt, mode, task_id, working_dir, notify,
    timeout_seconds, enabled). Re-enabling resets the failure count; timing changes recompute next_run_at."""
    allowed = {"name", "cron", "timezone", "prompt", "mode", "task_id", "working_dir", "notify", "timeout_seconds",
               "enabled"}
    unknown = set(changes) - allowed
    if unknown:
        raise ScheduleError(f"unknown field(s): {', '.join(sorted(unknown))}; updatable: {', '.join(sorted(allowed))}")
    job = await get_schedule(session, user_id, job_id, for_update=True)
    now = now or utcnow()
    reschedule = False
    if "name" in changes:
        job.name = validate_name(changes["name"])
    if "cron" in changes:
        job.cron = validate_cron(changes["cron"])
        reschedule = True
    if "timezone" in changes:
        job.timezone = validate_timezone(changes["timezone"])
        reschedule = True
    if "prompt" in changes:
        job.prompt = validate_prompt(changes["prompt"])
    if "notify" in changes:
        job.notify = validate_notify(changes["notify"])
    if "timeout_seconds" in changes:
        job.timeout_seconds = validate_timeout(changes["timeout_seconds"])
    mode = validate_mode(changes["mode"]) if "mode" in changes else job.mode
    rebinding = any(k in changes for k in ("mode", "task_id", "working_dir"))
    if mode == "persistent" and rebinding:
        task_id = changes.get("task_id", job.task_id)
        if task_id is None:
            raise ScheduleError("persistent mode needs task_id: the task whose conversation each run continues")
        task = await _owned_task(session, user_id, task_id)
        wd_change = changes.get("working_dir")
        if isinstance(wd_change, str) and wd_change.strip() and validate_working_dir(wd_change, existing=True) != task.working_dir:
            raise ScheduleError(f"a persistent job works in its task's folder {task.working_dir!r}")
        job.task_id, job.working_dir = task.task_id, task.working_dir
    elif mode == "isolated" and rebinding:
        if changes.get("task_id") is not None:
            raise ScheduleError("task_id is only used by persistent mode")
        job.task_id = None
        if isinstance(changes.get("working_dir"), str) and changes["working_dir"].strip():
            wd = validate_working_dir(changes["working_dir"], existing=True)
            if wd != job.working_dir:  # a new folder: the simple-name rule (an unchanged old one stays)
                wd = validate_working_dir(wd)
                await _check_folder(session, user_id, wd)
            job.working_dir = wd
    job.mode = mode
    if "enabled" in changes:
        enabled = changes["enabled"]
        if not isinstance(enabled, bool):
            raise ScheduleError("enabled must be true or false")
        if enabled and not job.enabled:
            job.consecutive_failures = 0
            reschedule = True
        job.enabled = enabled
    if not job.enabled:
        job.next_run_at = None
    elif reschedule or job.next_run_at is None:
        job.next_run_at = next_fire(job.cron, job.timezone, now)
    await session.flush()
    return job


async def disable_schedule(session: AsyncSession, user_id: str, job_id: Any) -> ScheduledJob:
    job = await get_schedule(session, user_id, job_id, for_update=True)
    job.enabled = False
    job.next_run_at = None
    await session.flush()
    return job


async def delete_schedule(session: AsyncSession, user_id: str, job_id: Any) -> None:
    """Delete the job; tasks its runs created keep their history (and their `scheduled_job_id`)."""
    job = await get_schedule(session, user_id, job_id, for_update=True)
    await session.delete(job)
    await session.flush()


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def job_to_dict(job: ScheduledJob) -> dict[str, Any]:
    """The JSON shape shared by REST and the tools."""
    return {
        "job_id": job.job_id, "name": job.name, "cron": job.cron, "timezone": job.timezone, "prompt": job.prompt,
        "mode": job.mode, "task_id": job.task_id, "working_dir": job.working_dir, "notify": job.notify,
        "enabled": job.enabled, "timeout_seconds": job.timeout_seconds,
        "next_run_at": _iso(job.next_run_at),
        "next_run_local": local_label(job.next_run_at, job.timezone) if job.next_run_at else None,
        "last_run_at": _iso(job.last_run_at), "last_run_id": job.last_run_id, "last_task_id": job.last_task_id,
        "last_status": job.last_status, "last_error": job.last_error,
        "consecutive_failures": job.consecutive_failures,
        "running": job.run_deadline_at is not None,
        "created_at": _iso(job.created_at),
    }
