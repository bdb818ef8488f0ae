"""Run outcomes of scheduled jobs: recording, failure counting, timeouts, reconciliation, push.

A job row with a non-null `run_deadline_at` has a run in flight (`last_run_id` on `last_task_id`).
Its outcome arrives by the run's `done` event (`SchedulerService._on_event`), or, if that event
was missed, by `check_inflight` on every tick, which reads the task row (and the task's last
event in the events stream) instead. Either way `record_outcome` locks the job row and records
the outcome once: a second attempt for the same run finds the deadline cleared and does nothing.

Status: ok | error | cancelled | stopped. `ok` resets `consecutive_failures`; `error` (including a
timeout) and `stopped` (the agent's progress guards ended the run without an answer) add one; a
user's `cancelled` does neither. Reaching `max_failures` disables the job and pushes a notice to
the owner. With `notify` set, one summary per run is pushed (`notified_run_id` guards it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import NotFoundError
from prometheus_client import Counter
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from zcbot_core.bus import BusDecodeError, PushReply, PushRequest, decode, encode
from zcbot_core.bus.events import Done, RunEvent
from zcbot_core.db.models import Message, ScheduledJob, Task
from zcbot_core.platform.service import Runtime
from zcbot_core.runstate import transitions as runs
from zcbot_core.runstate.status import ACTIVE, RunOutcome, RunStatus
from zcbot_core.schedules import NOTIFY_ALL, local_label
from zcbot_scheduler.config import SchedulerConfig

log = logging.getLogger(__name__)

STATUSES = tuple(outcome.value for outcome in RunOutcome)
FAILURE_STATUSES = frozenset({"error", "stopped"})
SUMMARY_CHARS = 1500
OUTCOMES = Counter("zcbot_scheduler_outcomes_total", "Recorded outcomes of scheduled runs", ["status"])
PUSHES = Counter("zcbot_scheduler_pushes_total", "Pushes attempted by the scheduler", ["result"])
_WORDS = {"ok": "finished", "error": "failed", "cancelled": "was cancelled", "stopped": "stopped before finishing"}


@dataclass
class PendingPush:
    job_id: str
    user_id: str
    run_id: str | None
    text: str
    channel: str | None


def timeout_message(seconds: int) -> str:
    return f"timed out: the run exceeded the job's timeout of {seconds} s and was cancelled"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


async def final_text(session: AsyncSession, task_id: str | None, run_id: str | None) -> str:
    """The run's last assistant text (what the summary push quotes)."""
    if not task_id or not run_id:
        return ""
    rows = (await session.execute(
        select(Message.payload).where(Message.task_id == task_id, Message.run_id == run_id,
                                      Message.payload["role"].astext == "assistant")
        .order_by(Message.idx.desc()).limit(5)
    )).scalars().all()
    for payload in rows:
        text = _content_text(payload.get("content")).strip()
        if text:
            return text
    return ""


def compose_push(job: ScheduledJob, status: str | None, error: str | None, text: str, *, summary: bool,
                 disabled: bool) -> str:
    when = local_label(job.last_run_at, job.timezone) if job.last_run_at else ""
    lines: list[str] = []
    if summary and status is not None:
        lines.append(f"[{job.name}] scheduled run {_WORDS.get(status, status)} ({when} {job.timezone})".strip())
        if status == "ok":
            body = text or "(the run gave no text answer)"
            lines.append(body if len(body) <= SUMMARY_CHARS else body[:SUMMARY_CHARS - 1] + "…")
        elif error:
            lines.append(f"Error: {error}")
        elif text:
            lines.append(text[:SUMMARY_CHARS])
    if disabled:
        lines.append(f"The scheduled job \"{job.name}\" has been disabled after {job.consecutive_failures} "
                     f"consecutive failed runs" + (f" (last error: {error})" if error else "") +
                     ". Fix it and re-enable it by asking the assistant (schedule_update enabled=true).")
    return "\n".join(lines)


def apply_result(job: ScheduledJob, status: str, error: str | None, cfg: SchedulerConfig, *,
                 run_id: str | None, text: str = "") -> PendingPush | None:
    """Record a finished (or failed-to-start) firing on the locked job row; returns a push to send
    after the transaction commits (at most once per run, and the disable notice)."""
    job.last_status = status
    job.last_error = error
    job.run_deadline_at = None
    job.cancel_requested_at = None
    if status == "ok":
        job.consecutive_failures = 0
    elif status in FAILURE_STATUSES:
        job.consecutive_failures = (job.consecutive_failures or 0) + 1
    OUTCOMES.labels(status=status).inc()
    disabled = False
    if job.enabled and job.consecutive_failures >= cfg.max_failures:
        job.enabled = False
        job.next_run_at = None
        disabled = True
        log.warning("scheduled job disabled after consecutive failures",
                    extra={"job_id": job.job_id, "failures": job.consecutive_failures})
    summary = bool(job.notify) and run_id is not None and job.notified_run_id != run_id
    if summary:
        job.notified_run_id = run_id
    if not summary and not disabled:
        return None
    channel = None if job.notify in (None, NOTIFY_ALL) else job.notify
    return PendingPush(job_id=job.job_id, user_id=job.user_id, run_id=run_id, channel=channel,
                       text=compose_push(job, status, error, text, summary=summary, disabled=disabled))


async def push(rt: Runtime, cfg: SchedulerConfig, pending: PendingPush) -> str | None:
    """Ask the channels service to deliver; returns a warning (never raises) when it did not."""
    req = PushRequest(user_id=pending.user_id, text=pending.text, channel=pending.channel, origin="scheduler")
    try:
        msg = await rt.nc.request(rt.topo.push_subject(pending.user_id), encode(req), timeout=cfg.push_timeout_seconds)
        reply = decode(msg.data, PushReply)
    except NoRespondersError:
        PUSHES.labels(result="no_responders").inc()
        return "notify: no channel service answered; the push was not delivered"
    except (NatsTimeoutError, TimeoutError):
        PUSHES.labels(result="timeout").inc()
        return "notify: the channel service did not answer in time; the push may not have been delivered"
    except BusDecodeError as exc:
        PUSHES.labels(result="bad_reply").inc()
        return f"notify: unexpected reply from the channel service ({exc})"
    except Exception as exc:  # the bus is down: a run's record must not depend on it
        PUSHES.labels(result="error").inc()
        return f"notify: push failed ({exc.__class__.__name__})"
    if reply.errors:
        PUSHES.labels(result="partial" if reply.delivered else "failed").inc()
        return "notify: " + "; ".join(f"{channel}: {err}" for channel, err in sorted(reply.errors.items()))
    if not reply.delivered:
        PUSHES.labels(result="undelivered").inc()
        return "notify: no active channel to deliver to"
    PUSHES.labels(result="delivered").inc()
    return None


async def deliver(rt: Runtime, cfg: SchedulerConfig, pending: PendingPush) -> None:
    warning = await push(rt, cfg, pending)
    if warning is None:
        return
    log.warning("scheduler push not delivered", extra={"job_id": pending.job_id, "warning": warning})
    async with rt.sessions() as session, session.begin():
        job = (await session.execute(
            select(ScheduledJob).where(ScheduledJob.job_id == pending.job_id).with_for_update()
        )).scalar_one_or_none()
        if job is None or (pending.run_id is not None and job.last_run_id != pending.run_id):
            return
        job.last_error = f"{job.last_error}; {warning}" if job.last_error else warning


async def record_outcome(rt: Runtime, cfg: SchedulerConfig, *, job_id: str, run_id: str, status: str,
                         error: str | None = None) -> bool:
    """Record the outcome of `run_id` for `job_id` once; False if it was already recorded (or stale)."""
    if status not in STATUSES:
        error = error or f"the run ended with status {status!r}"
        status = "error"
    async with rt.sessions() as session, session.begin():
        job = (await session.execute(
            select(ScheduledJob).where(ScheduledJob.job_id == job_id).with_for_update()
        )).scalar_one_or_none()
        if job is None or job.last_run_id != run_id or job.run_deadline_at is None:
            return False
        task = await session.get(Task, job.last_task_id) if job.last_task_id else None
        if job.cancel_requested_at is not None:
            status, error = "error", error or timeout_message(job.timeout_seconds)
        elif status == "error":
            own_error = task.run_error if task is not None and task.run_id == run_id else None
            error = own_error or error or "the run failed"
        else:
            error = None
        text = await final_text(session, job.last_task_id, run_id)
        pending = apply_result(job, status, error, cfg, run_id=run_id, text=text)
    log.info("scheduled run finished", extra={"job_id": job_id, "run_id": run_id, "status": status})
    if pending is not None:
        await deliver(rt, cfg, pending)
    return True


async def done_status(rt: Runtime, task_id: str, run_id: str) -> str | None:
    """Status of the run's `done` event if it is the task's last event (reconciliation)."""
    try:
        msg = await rt.js.get_last_msg(rt.topo.events_stream, rt.topo.event_subject(task_id))
        event = decode(msg.data, RunEvent)
    except (NotFoundError, BusDecodeError):
        return None
    except Exception as exc:
        log.warning("could not read the task's last event", extra={"task_id": task_id, "error": repr(exc)})
        return None
    if isinstance(event, Done) and event.run_id == run_id:
        return event.status
    return None


async def _mark_cancel(rt: Runtime, job_id: str, run_id: str, now: datetime) -> bool:
    async with rt.sessions() as session, session.begin():
        job = (await session.execute(
            select(ScheduledJob).where(ScheduledJob.job_id == job_id).with_for_update(skip_locked=True)
        )).scalar_one_or_none()
        if job is None or job.last_run_id != run_id or job.run_deadline_at is None or job.cancel_requested_at:
            return False
        job.cancel_requested_at = now
        return True


@dataclass
class InflightReport:
    finished: int = 0
    timed_out: int = 0


async def check_inflight(rt: Runtime, cfg: SchedulerConfig, now: datetime, inflight: dict[str, str]) -> InflightReport:
    """Enforce timeouts and reconcile outcomes of in-flight runs from the DB; refresh `inflight`."""
    report = InflightReport()
    async with rt.sessions() as session:
        jobs = (await session.execute(
            select(ScheduledJob.job_id, ScheduledJob.user_id, ScheduledJob.last_run_id, ScheduledJob.last_task_id,
                   ScheduledJob.run_deadline_at, ScheduledJob.cancel_requested_at)
            .where(ScheduledJob.run_deadline_at.is_not(None))
        )).all()
        task_ids = [j.last_task_id for j in jobs if j.last_task_id]
        tasks = {t.task_id: t for t in (await session.execute(
            select(Task.task_id, Task.run_id, Task.run_status, Task.deleted_at,
                   func.extract("epoch", func.now() - Task.updated_at).label("idle_for"))
            .where(Task.task_id.in_(task_ids))
        )).all()} if task_ids else {}
    inflight.clear()
    inflight.update({j.last_run_id: j.job_id for j in jobs if j.last_run_id})
    for job in jobs:
        if not job.last_run_id:
            continue
        task = tasks.get(job.last_task_id)
        active = task is not None and task.run_id == job.last_run_id and task.run_status in ACTIVE
        try:
            if not active:
                status = await done_status(rt, job.last_task_id, job.last_run_id) if task is not None else None
                error = None
                if status is None:
                    if task is None:
                        status, error = RunOutcome.ERROR.value, "the run's task no longer exists"
                    elif task.run_id == job.last_run_id and float(task.idle_for or 0) < cfg.reconcile_grace_seconds:
                        continue  # just finished: its done event is probably on the way
                    else:
                        failed = task.run_id == job.last_run_id and task.run_status == RunStatus.ERROR
                        status = (RunOutcome.ERROR if failed else RunOutcome.OK).value
                if await record_outcome(rt, cfg, job_id=job.job_id, run_id=job.last_run_id, status=status, error=error):
                    report.finished += 1
            elif job.cancel_requested_at is None and now >= job.run_deadline_at:
                if await _mark_cancel(rt, job.job_id, job.last_run_id, now):
                    report.timed_out += 1
                    log.info("scheduled run timed out; cancelling",
                             extra={"job_id": job.job_id, "run_id": job.last_run_id})
                    try:
                        await runs.request_cancel(rt.sessions, rt.js, rt.nc, rt.topo, user_id=job.user_id,
                                                  task_id=job.last_task_id, reason="timeout",
                                                  grant_key=rt.settings.zcbot_run_grant_key,
                                                  max_active=rt.settings.zcbot_max_runs_per_user)
                    except (runs.NothingToCancel, runs.TaskNotFound):
                        pass  # it ended meanwhile: the next check records it (as a timeout)
            elif job.cancel_requested_at is not None and now >= job.cancel_requested_at + timedelta(
                    seconds=cfg.cancel_grace_seconds):
                grace = int(cfg.cancel_grace_seconds)
                message = f"timed out: the run did not stop within {grace} s of its timeout cancel"
                if await record_outcome(rt, cfg, job_id=job.job_id, run_id=job.last_run_id, status="error",
                                        error=message):
                    report.finished += 1
        except Exception:
            log.exception("in-flight check failed", extra={"job_id": job.job_id})
    return report
