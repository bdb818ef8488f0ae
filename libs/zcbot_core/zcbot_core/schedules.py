"""Scheduled jobs: the one service layer behind REST, the `schedule_*` host tools and the scheduler.

Seed 003 §8.5. A job is cron + IANA timezone + one prompt + a conversation mode; the scheduler only
feeds the (marked) prompt into the normal run pipeline at the due instants.

- `mode`: `isolated` (default; a new task per firing, tagged with `scheduled_job_id`) or
  `persistent` (the bound task `task_id` continues its conversation). The folder (`working_dir`)
  is reused by every firing in both modes; for `persistent` it is the bound task's folder.
- `notify`: None (results only land in the task), a channel name, or `all` (every active channel):
  the scheduler then pushes a summary deterministically after each run.
- Every query is scoped by `user_id`; another user's job looks exactly like a missing one.
- Callers own the transaction: functions flush, never commit.

Next-fire semantics (`next_fire`): croniter in the job's local wall time (vixie cron: when both
day-of-month and day-of-week are restricted, either matching fires), then converted to UTC.
DST: a local time skipped by a spring-forward gap fires once, at the instant the gap ends
shifted by the same amount (02:30 on a New York spring-forward day -> 03:30 EDT); a local time
repeated by a fall-back fires once, at its first occurrence — except for jobs whose hour field is
`*`, which also fire in the repeated hour so "every N minutes" keeps holding in real time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterBadCronError, CroniterBadDateError, CroniterError
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from zcbot_core import paths
from zcbot_core.folders import NestedFolder, claim_folder, normalize_working_dir, simple_working_dir
from zcbot_core.config import get_settings
from zcbot_core.db.models import ScheduledJob, Task
from zcbot_core.errors import ZcbotError

MODES = ("isolated", "persistent")
DEFAULT_TIMEOUT_SECONDS = 1800
MIN_TIMEOUT_SECONDS = 30
MAX_TIMEOUT_SECONDS = 24 * 3600
MAX_JOB_NAME = 120  # leaves room for the " YYYY-MM-DD HH:MM" suffix of a firing's task name
MAX_PROMPT_CHARS = 20_000
MAX_JOBS_PER_USER = 50
NOTIFY_ALL = "all"
_NOTIFY = re.compile(r"^[a-z0-9_-]{1,32}$")
_ALIASES = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}
_DST_SLACK = timedelta(hours=3)  # larger than any DST shift in the tz database
_MAX_CANDIDATES = 5000


class ScheduleError(ZcbotError, ValueError):
    """Invalid schedule input (the caller's fault: 400 / a tool error)."""

    code = "schedule_invalid"
    http_status = 400


class ScheduleNotFound(ZcbotError, LookupError):
    """No such job for this user (404)."""

    code = "schedule_not_found"
    http_status = 404
    public_detail = "scheduled job not found"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def default_timezone() -> str:
    """Timezone of jobs created without one (`ZCBOT_SCHEDULE_DEFAULT_TIMEZONE`, default UTC)."""
    return get_settings().zcbot_schedule_default_timezone.strip() or "UTC"


# ---- validation ------------------------------------------------------------------------------


def validate_timezone(tz: Any) -> str:
    if not isinstance(tz, str) or not tz.strip():
        raise ScheduleError("timezone must be an IANA name such as 'Asia/Shanghai' or 'UTC'")
    name = tz.strip()
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(f"unknown timezone {name!r}; use an IANA name such as 'Europe/Berlin'") from None
    return name


def _expand_alias(cron: str) -> str:
    return _ALIASES.get(cron.lower(), cron)


def validate_cron(cron: Any) -> str:
    """A 5-field cron expression (or @daily-style alias), normalized; it must fire at least once."""
    if not isinstance(cron, str) or not cron.strip():
        raise ScheduleError("cron must be a 5-field expression such as '0 9 * * *' (minute hour day month weekday)")
    expr = " ".join(cron.split())
    if expr.startswith("@"):
        if expr.lower() not in _ALIASES:
            raise ScheduleError(f"unsupported cron alias {expr!r}; use one of {', '.join(sorted(_ALIASES))}")
        return expr.lower()
    if len(expr.split(" ")) != 5:
        raise ScheduleError(f"cron {expr!r} must have exactly 5 fields: minute hour day-of-month month day-of-week")
    if len(expr) > 128 or not croniter.is_valid(expr):
        raise ScheduleError(f"invalid cron expression {expr!r}")
    try:
        croniter(expr, datetime(2000, 1, 1), day_or=True).get_next(datetime)
    except (CroniterBadDateError, CroniterError):
        raise ScheduleError(f"cron {expr!r} never fires") from None
    return expr


def validate_mode(mode: Any) -> str:
    if mode not in MODES:
        raise ScheduleError(f"mode must be one of {', '.join(MODES)}")
    return str(mode)


def validate_notify(notify: Any) -> str | None:
    if notify is None:
        return None
    if not isinstance(notify, str):
        raise ScheduleError("notify must be a channel name, 'all', or null")
    value = notify.strip().lower()
    if value in ("", "none", "off"):
        return None
    if not _NOTIFY.match(value):
        raise ScheduleError("notify must be a channel name (letters, digits, '_' or '-'), 'all', or null")
    return value


def validate_name(name: Any) -> str:
    try:
        clean = paths.validate_task_name(name, "name")
    except paths.PathRejected as exc:
        raise ScheduleError(str(exc)) from None
    if len(clean) > MAX_JOB_NAME:
        raise ScheduleError(f"name must be at most {MAX_JOB_NAME} characters")
    return clean


def validate_prompt(prompt: Any) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise ScheduleError("prompt must be a non-empty instruction for the agent")
    if "\x00" in prompt:
        raise ScheduleError("prompt must not contain NUL")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ScheduleError(f"prompt must be at most {MAX_PROMPT_CHARS} characters")
    return prompt.strip()


def validate_timeout(value: Any) -> int:
    if value is None:
        return DEFAULT_TIMEOUT_SECONDS
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ScheduleError("timeout_seconds must be a whole number of seconds")
    seconds = int(value)
    if not MIN_TIMEOUT_SECONDS <= seconds <= MAX_TIMEOUT_SECONDS:
        raise ScheduleError(f"timeout_seconds must be between {MIN_TIMEOUT_SECONDS} and {MAX_TIMEOUT_SECONDS}")
    return seconds


def validate_working_dir(raw: Any, *, existing: bool = False) -> str:
    """A job's folder: a simple name when new; `existing`: it names a task's folder as stored (maybe
    nested, from before the simple-name rule)."""
    if not isinstance(raw, str):
        raise ScheduleError("working_dir must be a folder name")
    try:
        return normalize_working_dir(raw) if existing else simple_working_dir(raw)
    except paths.PathRejected as exc:
        message = str(exc)
        raise ScheduleError(message if message.startswith(("working_dir", "folder names")) else f"working_dir: {message}") from None


# ---- time ------------------------------------------------------------------------------------


def _zone(tz: str) -> ZoneInfo:
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(f"unknown timezone {tz!r}") from None


def _instants(naive: datetime, zone: ZoneInfo, repeat_ambiguous: bool) -> list[datetime]:
    """UTC instants at which local wall time `naive` fires (see the module docstring for DST)."""
    first = naive.replace(tzinfo=zone, fold=0)
    second = naive.replace(tzinfo=zone, fold=1)
    first_utc = first.astimezone(timezone.utc)
    out = [first_utc]
    exists = first_utc.astimezone(zone).replace(tzinfo=None) == naive
    if exists and repeat_ambiguous and first.utcoffset() != second.utcoffset():
        out.append(second.astimezone(timezone.utc))
    return out


def _near_transition(zone: ZoneInfo, instant: datetime) -> bool:
    return (instant - _DST_SLACK).astimezone(zone).utcoffset() != (instant + _DST_SLACK).astimezone(zone).utcoffset()


def next_fire(cron: str, tz: str, after: datetime) -> datetime:
    """The first instant strictly after `after` (aware) at which the job fires, in UTC."""
    if after.tzinfo is None:
        raise ValueError("next_fire needs an aware datetime")
    expr = _expand_alias(cron)
    zone = _zone(tz)
    after_utc = after.astimezone(timezone.utc)
    repeat_ambiguous = expr.split(" ")[1] == "*" if len(expr.split(" ")) == 5 else False
    local_after = after_utc.astimezone(zone).replace(tzinfo=None)
    start = local_after - _DST_SLACK if _near_transition(zone, after_utc) else local_after
    try:
        it = croniter(expr, start, day_or=True)
    except (CroniterBadCronError, CroniterError, ValueError, KeyError) as exc:
        raise ScheduleError(f"invalid cron expression {cron!r}") from exc
    best: datetime | None = None
    for _ in range(_MAX_CANDIDATES):
        try:
            naive = it.get_next(datetime)
        except (CroniterBadDateError, CroniterError) as exc:
            if best is not None:
                break
            raise ScheduleError(f"cron {cron!r} never fires") from exc
        candidates = _instants(naive, zone, repeat_ambiguous)
        if best is not None:
            horizon = best + (_DST_SLACK if _near_transition(zone, best) else timedelta(0))
            if candidates[0] > horizon:
                break
        for inst in candidates:
            if inst > after_utc and (best is None or inst < best):
                best = inst
    if best is None:
        raise ScheduleError(f"cron {cron!r} has no fire time soon enough")
    return best


def local_label(instant: datetime, tz: str) -> str:
    """`YYYY-MM-DD HH:MM` in the job's timezone (task names, summaries)."""
    return instant.astimezone(_zone(tz)).strftime("%Y-%m-%d %H:%M")


def firing_task_name(job_name: str, instant: datetime, tz: str) -> str:
    return paths.validate_task_name(f"{job_name[:MAX_JOB_NAME]} {local_label(instant, tz)}")


def firing_prompt(job: ScheduledJob, instant: datetime) -> str:
    """The user message of a firing: a marker line (so the agent knows nobody is watching), then the prompt."""
    return (f"[scheduled job \"{job.name}\" ({job.cron}, {job.timezone}) fired at "
            f"{local_label(instant, job.timezone)}]\n{job.prompt}")


# ---- CRUD ------------------------------------------------------------------------------------


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
    tz = validate_timezone(timezone if timezone is not None else default_timezone())
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
