"""Submitting a user message: store it and start its run, or queue it behind the task's active run
(DESIGN §4). The one entry for the web, the scheduler and the channels, and the one place a shortcut
trigger is expanded (`storage_root` given: the web and the channels; a scheduled job's prompt is its own).

A task with no active run takes one round trip (the fast path, `sql.SUBMIT_TO_IDLE`, a PL/pgSQL function that locks
the user row, then the task row, checks both caps (over the per-user cap the run waits in the user's FIFO), appends the message and queues the run); a task with an
active run takes the transaction (the fallback, `_submit_in_transaction`), which is also the reference the
function is tested against. The other transitions (claim, cancel, end, reap) are `runstate.transitions`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core.bus import RunRequest, Topology, grants
from zcbot_core.db.engine import autocommit
from zcbot_core.runstate import matrix, sql
from zcbot_core.runstate import transitions as runs
from zcbot_core.runstate.errors import KeyReused
from zcbot_core.runstate.status import ACTIVE, RunStatus
from zcbot_core.runstate.transitions import (
    MAX_PENDING_INPUTS,
    BusUnavailable,
    Multitask,
    RunQuotaExceeded,
    TaskNotFound,
    UserNotFound,
    WrongChannel,
    new_run_id,
    publish_run,
    signal_cancel,
)
from zcbot_core.workspace import shortcuts

log = logging.getLogger(__name__)


@dataclass
class SubmitResult:
    run_id: str
    task_id: str
    status: str  # queued (a new run) | waiting (in its user's FIFO) | pending (enqueued behind the active run)
    position: int = 0  # waiting: the place in the user's FIFO (1: next); pending: behind the active run
    message_idx: int | None = None
    # A stream sequence at or before the run's first event (where its event stream can start
    # reading); None when JetStream could not say (then read the task's events from the start).
    events_from: int | None = None
    # A resend with the key of a message already stored whose run was accepted: nothing was done now
    # (`_resubmit`; a run the bus refused is queued again, an ordinary accepted submit).
    replayed: bool = False


@dataclass
class RunLimits:
    max_runs_per_user: int = 3
    max_queued_runs: int = 1000
    # Runs of one user waiting for one of its slots (FIFO, Slark D-5); over it: 429 `queue_full`.
    max_waiting_per_user: int = 20
    # How long the request's publish is retried (a JetStream election) before the 503.
    publish_retry_seconds: float = 10.0

    @classmethod
    def from_settings(cls, settings: Any) -> "RunLimits":
        return cls(settings.zcbot_max_runs_per_user, settings.zcbot_max_queued_runs,
                   settings.zcbot_max_waiting_runs_per_user, settings.zcbot_run_publish_retry_seconds)


class UserQueueFull(RunQuotaExceeded):
    """The user's runs fill its slots and its FIFO (429)."""

    code = "queue_full"


async def _check_quota(session: AsyncSession, user_id: str, limits: RunLimits) -> int:
    """0: the run may start; else its place in the user's FIFO."""
    active, queued = (await session.execute(sql.QUOTA, {"quota_user": user_id})).one()
    if active >= limits.max_runs_per_user:
        waiting = int((await session.execute(sql.WAITING_OF_USER, {"waiting_user": user_id})).scalar_one())
        if waiting >= limits.max_waiting_per_user:
            raise _user_queue_full(active, limits)
        return waiting + 1
    if queued >= limits.max_queued_runs:
        raise RunQuotaExceeded(QUEUE_FULL)
    return 0


QUEUE_FULL = "the service is busy (the run queue is full); try again in a minute"


def _user_queue_full(active: int, limits: RunLimits) -> RunQuotaExceeded:
    return UserQueueFull(f"you already have {active} runs in progress (the limit is {limits.max_runs_per_user}) "
                         f"and {limits.max_waiting_per_user} waiting; wait for one to finish or cancel it")


# The run error `_publish_or_fail` leaves: the one state a resend with the message's key re-queues.
UNPUBLISHED_ERROR = "the run could not be queued (message bus unavailable); send again with the same key"
# The payload field of a user message holding its client's key (`Idempotency-Key`); never sent to
# the model (`agent.context.window` drops it).
CLIENT_KEY = "client_key"


async def _publish_or_fail(
    sessions: async_sessionmaker[AsyncSession], js: JetStreamContext, topo: Topology, req: RunRequest,
    limits: RunLimits, msg_id: str | None = None,
) -> None:
    try:
        await publish_run(js, topo, req, retry_seconds=limits.publish_retry_seconds, msg_id=msg_id)
    except Exception as exc:
        log.error("run publish failed", extra={"task_id": req.task_id, "run_id": req.run_id, "error": repr(exc)})
        async with sessions() as session, session.begin():
            await session.execute(sql.MARK_UNPUBLISHED, {
                "unpub_task": req.task_id, "unpub_run": req.run_id, "unpub_error": UNPUBLISHED_ERROR})
        raise BusUnavailable("the message bus is unavailable; the message was saved: send it again with the same "
                             "Idempotency-Key to retry it (a new key stores it a second time)") from exc


async def submit_message(
    sessions: async_sessionmaker[AsyncSession],
    js: JetStreamContext,
    nc: NATS,
    topo: Topology,
    *,
    user_id: str,
    task_id: str,
    content: Any,
    multitask: Multitask = "reject",
    limits: RunLimits | None = None,
    origin: str = "web",
    scheduled_job_id: str | None = None,
    channel: str | None = None,
    events_from: int | None = None,
    storage_root: Path | None = None,
    grant_key: str | None = None,
    client_key: str | None = None,
) -> SubmitResult:
    """Append a user message and start (or enqueue) its run.

    `grant_key` (the caller's `ZCBOT_RUN_GRANT_KEY`) signs the run's grant, the executor's proof that
    the run's tool calls are this user's (`bus/grants.py`); the runner has no key and only copies it.

    `storage_root` (the storage root of every user): when given, a text message that is exactly one
    of the user's shortcut triggers is stored and run as the shortcut's instruction (`shortcuts`).

    `events_from`: a stream sequence at or before every event still to be published, when the caller
    knows one (the gateway's event feed does); else JetStream is asked for the task's last event.
    Any sequence at or before the run's first event is right: the stream replay filters by run.

    `client_key` (the client's `Idempotency-Key`): a message of this task stored with the same key is
    not stored again; its run is re-queued when the bus refused it (the 503), else answered as it is.

    Raises TaskNotFound (UserNotFound when the user is gone) / WrongChannel (when `channel` is given
    and the task is on another) / RunConflict / RunQuotaExceeded / BusUnavailable.
    """
    limits = limits or RunLimits()
    if storage_root is not None and isinstance(content, str):
        content = shortcuts.expand(storage_root, user_id, content)
    run_id = new_run_id()
    grant = grants.issue(grant_key, run_id, user_id, task_id)
    events_tail: asyncio.Future[int | None]
    if events_from is not None:
        events_tail = asyncio.get_running_loop().create_future()
        events_tail.set_result(events_from)
    else:
        events_tail = asyncio.ensure_future(runs.events_tail(js, topo, task_id))
    try:
        events_from = await runs.events_from(events_tail)
    finally:
        events_tail.cancel()  # a no-op once answered; a cancelled request leaves no lookup behind
    if client_key is not None:
        earlier = await _resubmit(sessions, js, topo, user_id=user_id, task_id=task_id, client_key=client_key,
                                  content=content,
                                  limits=limits, events_from=events_from, grant_key=grant_key,
                                  request=runs.waiting_request(origin, scheduled_job_id, ""))
        if earlier is not None:
            return earlier
    # The usual case, a task with no active run, in one round trip; else the transaction, which rejects
    # or puts the message behind the active run.
    request = runs.waiting_request(origin, scheduled_job_id, grant)
    submitted = await _submit_to_idle(sessions, user_id=user_id, task_id=task_id, run_id=run_id, content=content,
                                      channel=channel, limits=limits, events_from=events_from, request=request,
                                      client_key=client_key)
    if submitted is None:
        return await _submit_in_transaction(
            sessions, js, nc, topo, events_tail, user_id=user_id, task_id=task_id, content=content,
            multitask=multitask, limits=limits, origin=origin, scheduled_job_id=scheduled_job_id, channel=channel,
            run_id=run_id, grant=grant, client_key=client_key)
    idx, position = submitted
    if position:  # over the user's cap: published when a slot frees (`transitions.promote_waiting`)
        return SubmitResult(run_id=run_id, task_id=task_id, status="waiting", position=position, message_idx=idx,
                            events_from=events_from)
    req = RunRequest(run_id=run_id, task_id=task_id, user_id=user_id, enqueued_at=time.time(), origin=origin,
                     scheduled_job_id=scheduled_job_id, grant=grant)
    await _publish_or_fail(sessions, js, topo, req, limits)
    return SubmitResult(run_id=run_id, task_id=task_id, status="queued", message_idx=idx, events_from=events_from)


async def _resubmit(
    sessions: async_sessionmaker[AsyncSession], js: JetStreamContext, topo: Topology, *, user_id: str, task_id: str,
    client_key: str, content: Any, limits: RunLimits, events_from: int | None, grant_key: str | None,
    request: dict[str, Any],
) -> SubmitResult | None:
    """The answer to a message whose key this task already holds (None: a new key). Its run refused by
    the bus (`UNPUBLISHED_ERROR`, the 503) is queued again, as the same run of the same message; any
    other run is answered as it stands (waiting behind the active run, active, or over)."""
    async with sessions() as session, session.begin():
        task = await runs.lock_task(session, user_id, task_id)
        for position, item in enumerate(task.pending_inputs or [], start=1):
            if item.get(CLIENT_KEY) == client_key:
                if item.get("content") != content:
                    raise KeyReused()
                return SubmitResult(run_id=item["run_id"], task_id=task_id, status="pending", position=position,
                                    events_from=task.run_events_from, replayed=True)
        row = (await session.execute(sql.MESSAGE_BY_KEY, {"key_task": task_id,
                                                          "key_payload": {CLIENT_KEY: client_key}})).first()
        if row is None:
            return None
        if row.payload.get("content") != content:
            raise KeyReused()
        current = row.run_id == task.run_id
        if not (current and task.run_status == RunStatus.ERROR.value and task.run_error == UNPUBLISHED_ERROR):
            # Running, waiting, or over (an earlier run of the task, or this one's outcome): nothing to redo.
            active = current and task.run_status in ACTIVE
            return SubmitResult(run_id=row.run_id, task_id=task_id, status=task.run_status if active else "ended",
                                message_idx=row.idx, events_from=task.run_events_from if current else None,
                                replayed=True)
        position = await _check_quota(session, user_id, limits)
        grant = grants.issue(grant_key, row.run_id, user_id, task_id)
        params: dict[str, Any] = {"queue_task": task_id, "queue_run": row.run_id, "queue_events_from": events_from}
        if position:  # over the user's cap: published when a slot frees, as a new message's run would be
            await session.execute(sql.WAIT_RUN, {**params, "queue_request": {**request, "grant": grant}})
        else:
            await session.execute(sql.QUEUE_RUN, params)
    if position:
        return SubmitResult(run_id=row.run_id, task_id=task_id, status="waiting", position=position,
                            message_idx=row.idx, events_from=events_from)
    req = RunRequest(run_id=row.run_id, task_id=task_id, user_id=user_id, enqueued_at=time.time(),
                     origin=request["origin"], scheduled_job_id=request["scheduled_job_id"], grant=grant)
    # Another message id: JetStream may remember the refused one (a publish stored after its timeout).
    await _publish_or_fail(sessions, js, topo, req, limits, msg_id=f"{row.run_id}:resend:{time.time_ns()}")
    return SubmitResult(run_id=row.run_id, task_id=task_id, status="queued", message_idx=row.idx,
                        events_from=events_from)


async def _submit_to_idle(
    sessions: async_sessionmaker[AsyncSession], *, user_id: str, task_id: str, run_id: str, content: Any,
    channel: str | None, limits: RunLimits, events_from: int | None, request: dict[str, Any],
    client_key: str | None = None,
) -> tuple[int, int] | None:
    """The new message's idx and the run's place in its user's FIFO (0: queued to start), written by
    one autocommit call (`sql.SUBMIT_TO_IDLE`); None when the task has an active run (nothing was written)."""
    params = {"submit_user": user_id, "submit_task": task_id, "submit_run": run_id,
              "submit_payload": runs.user_payload(content, client_key), "submit_events_from": events_from,
              "submit_channel": channel, "submit_max_active": limits.max_runs_per_user,
              "submit_max_queued": limits.max_queued_runs, "submit_max_waiting": limits.max_waiting_per_user,
              "submit_request": request}
    async with autocommit(sessions).connect() as conn:
        outcome, detail, idx, counted = (await conn.execute(sql.SUBMIT_TO_IDLE, params)).one()
    if outcome == "queued":
        return int(idx), 0
    if outcome == "waiting":
        return int(idx), int(counted)
    if outcome == "active":
        return None
    if outcome == "no_user":
        raise UserNotFound(user_id)
    if outcome == "no_task":
        raise TaskNotFound(task_id)
    if outcome == "wrong_channel":
        raise WrongChannel(detail)
    if outcome == "quota_waiting":
        raise _user_queue_full(int(counted), limits)
    if outcome == "quota_queued":
        raise RunQuotaExceeded(QUEUE_FULL)
    raise RuntimeError(f"zcbot_submit_run_v2 answered {outcome!r}")


async def _submit_in_transaction(
    sessions: async_sessionmaker[AsyncSession], js: JetStreamContext, nc: NATS, topo: Topology,
    events_tail: "asyncio.Future[int | None]", *, user_id: str, task_id: str, content: Any, multitask: Multitask,
    limits: RunLimits, origin: str, scheduled_job_id: str | None, channel: str | None, run_id: str, grant: str = "",
    client_key: str | None = None,
) -> SubmitResult:
    """The submit as one transaction: any task state (an active run's task: reject, or the message waits
    behind it); the reference for `_submit_to_idle`."""
    replaced: str | None = None  # the waiting run an interrupting message took the place of
    async with sessions() as session, session.begin():
        task = await runs.lock_task(session, user_id, task_id)
        if channel is not None and task.channel != channel:
            raise WrongChannel(task.channel)
        step = matrix.step(task.run_status, matrix.MULTITASK_EVENT[multitask])
        if step.refused is not None:
            raise step.refuse(task.run_status)
        if task.run_status in ACTIVE:
            pending = list(task.pending_inputs or [])
            if len(pending) >= MAX_PENDING_INPUTS:
                raise RunQuotaExceeded(f"at most {MAX_PENDING_INPUTS} messages can wait behind a run")
            # The grant is made now, by the accepting service: the runner that starts this run later
            # has no key (bus/grants.py).
            item = {"run_id": run_id, "content": content, "origin": origin, "queued_at": time.time(),
                    "grant": grant}
            if client_key is not None:  # carried into the message when it starts (`transitions.start_next_input`)
                item[CLIENT_KEY] = client_key
            if matrix.Effect.PENDING_FRONT in step.effects:
                pending.insert(0, item)
            else:
                pending.append(item)
            if matrix.Effect.ENDS_RUN in step.effects:
                # An interrupt of a waiting run: it ends (cancelled) and this message takes its place.
                replaced = task.run_id
                ended = await runs.end_waiting_run(session, js, topo, task, pending, tail=events_tail,
                                                   reason="interrupt")
                assert ended.next_input is not None  # `pending` starts with this message
                idx = ended.next_input.message_idx
                position = int((await session.execute(sql.WAITING_POSITION, {"position_task": task_id})).scalar_one())
                active_run = None
            else:
                active_run = task.run_id
                position = pending.index(item) + 1
                await session.execute(sql.SET_PENDING, {
                    "pending_task": task_id, "pending_inputs": pending,
                    "pending_status": step.to.value if step.to is not None else task.run_status})
        else:
            position = await _check_quota(session, user_id, limits)
            req, idx = await runs.queue_run(session, events_tail, task_id, user_id, run_id, content,
                                            client_key=client_key, wait_request=runs.waiting_request(origin, scheduled_job_id, grant)
                                            if position else None)
            req.grant = grant
            req.origin = origin
            req.scheduled_job_id = scheduled_job_id
            active_run = None
    events_from = await runs.events_from(events_tail)
    if replaced is not None:
        await runs.answer_waiting_end(js, topo, task_id, replaced)
        started = await runs.continue_after_end(autocommit(sessions), js, topo,
                                                runs.FinishOutcome(user_id=user_id),
                                                max_active=limits.max_runs_per_user,
                                                retry_seconds=limits.publish_retry_seconds)
        if run_id in started:  # a slot was free: it is queued already
            return SubmitResult(run_id=run_id, task_id=task_id, status="queued", message_idx=idx,
                                events_from=events_from)
        return SubmitResult(run_id=run_id, task_id=task_id, status="waiting", position=position, message_idx=idx,
                            events_from=events_from)
    if active_run is not None:
        if matrix.Effect.SIGNAL_CANCEL in step.effects:
            await signal_cancel(nc, js, topo, task_id, active_run, "interrupt")
        # (the message is saved whatever JetStream answered)
        return SubmitResult(run_id=run_id, task_id=task_id, status="pending", position=position,
                            events_from=events_from)
    if position:
        return SubmitResult(run_id=run_id, task_id=task_id, status="waiting", position=position, message_idx=idx,
                            events_from=events_from)
    await _publish_or_fail(sessions, js, topo, req, limits)
    return SubmitResult(run_id=run_id, task_id=task_id, status="queued", message_idx=idx, events_from=events_from)
