"""The run state machine's transitions, one function each, shared by every entry point (web,
scheduler, channels) and the runner (which keeps only the orchestration around them):

- submit: `runstate.submit.submit_message` (fast path: one call of migration 0003's function for an
  idle task; fallback: the transaction, which also queues behind an active run); `queue_run` and
  `publish_run` are its parts, shared with the end of a run that starts the next waiting message.
- claim: `runstate.claim.claim_run` (one statement).
- cancel: `request_cancel` (the transaction marks `cancelling`, then KV + core subject; a waiting run
  ends in the transaction: `end_waiting_run`).
- end: `end_run` (fast paths: the last step and the end in one statement, or the end alone when no
  message waits; fallback: `finish_run`'s transaction, which also starts the next waiting message).
- reap: `reap` (a lost run to `error`, fenced on the status the reaper saw).

Which event applies in which status, and with what effects, is `runstate.matrix`. Every end of a run
(finish, fail, reap, a waiting run's cancel or replacement by an interrupt) starts the task's next
enqueued message through `start_next_input` and continues through `continue_after_end`.

Every transition that ends a run (end, reap, a waiting run's cancel) then marks it ended on the bus
(`bus.ended_runs.mark_ended`): executors refuse its grant from then on. A run taken over by another
runner is not ended (the old owner's end is fenced), so its grant keeps working.

tasks.run_status (`status.RunStatus`): idle -> queued -> running -> idle | error, with `cancelling` in
between when a cancel is requested. A task has at most one active run (`status.ACTIVE`); the task row
is locked with SELECT ... FOR UPDATE so concurrent posts cannot both start one, and the user row
is locked too so the per-user cap on concurrent runs holds under races (Slark D-5).

Why one module of ~470 lines (over the ~400 the project splits at): cancel, end and reap each finish
through the same chain — `start_next_input`, `mark_ended`, `continue_after_end`, `promote_waiting` —
and `queue_run`/`publish_run` are shared with submit. Split by transition, each module would import the
chain from another and the chain would import back the waiting-run end it calls (a cycle); kept
together, one file reads as the machine's side effects in order, and `matrix.py` holds the table.
The submit and claim paths, which need none of the chain but `queue_run`/`publish_run`, are already
their own modules (`submit.py`, `claim.py`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from nats.aio.client import Client as NATS
from nats.errors import ConnectionClosedError, MaxPayloadError
from nats.js import JetStreamContext
from nats.js.errors import BadRequestError, NotFoundError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from zcbot_core.agent.lang import cancel_notice, user_language
from zcbot_core.bus import CancelRequest, RunRequest, Topology, encode
from zcbot_core.bus.ended_runs import mark_ended
from zcbot_core.bus.events import Done, done_msg_id
from zcbot_core.bus.retry import retry_until
from zcbot_core.bus.topology import kv_bucket
from zcbot_core.db.engine import autocommit
from zcbot_core.runstate import matrix, sql

# The domain errors of the transitions, importable from here too (`runs.RunConflict`, ...).
from zcbot_core.runstate.errors import (  # noqa: F401
    BusUnavailable,
    NothingToCancel,
    RunConflict,
    RunQuotaExceeded,
    TaskNotFound,
    UserNotFound,
    WrongChannel,
)
from zcbot_core.runstate.status import RunOutcome
from zcbot_core.tools.executor_client import stop_background

log = logging.getLogger(__name__)

Multitask = Literal["reject", "enqueue", "interrupt"]
MAX_PENDING_INPUTS = 20


def now() -> datetime:
    return datetime.now(timezone.utc)


def new_run_id() -> str:
    return uuid.uuid4().hex


async def append_message(
    session: AsyncSession,
    task_id: str,
    payload: dict[str, Any],
    *,
    kind: str = "chat",
    run_id: str | None = None,
    model_profile: str | None = None,
    tokens_in: int | None = None,
    tokens_out: int | None = None,
) -> int:
    """Insert the task's next message and return its idx, in one statement.

    idx is the real message count (never the loaded window's size: see seed 003 §8.8); callers hold
    the task row lock so two appends cannot pick the same idx.
    """
    params = append_params(task_id, payload, kind=kind, run_id=run_id, model_profile=model_profile,
                           tokens_in=tokens_in, tokens_out=tokens_out)
    return int((await session.execute(sql.APPEND_MESSAGE, params)).scalar_one())


def append_params(task_id: str, payload: dict[str, Any], *, kind: str = "chat", run_id: str | None = None,
                  model_profile: str | None = None, tokens_in: int | None = None,
                  tokens_out: int | None = None) -> dict[str, Any]:
    """Bind parameters of a message append (`APPEND_MESSAGE`, `OWNED_STEP`)."""
    return {"append_task": task_id, "append_payload": payload, "append_kind": kind, "append_run_id": run_id,
            "append_model_profile": model_profile, "append_tokens_in": tokens_in, "append_tokens_out": tokens_out}


async def events_tail(js: JetStreamContext, topo: Topology, task_id: str) -> int:
    """Sequence after the last event of this task: the new run's events all come after it."""
    try:
        last = await js.get_last_msg(topo.events_stream, topo.event_subject(task_id))
        return int(last.seq) + 1
    except NotFoundError:
        return 0


async def lock_task(session: AsyncSession, user_id: str, task_id: str) -> Any:
    """The user's task row, locked (after the user row), or TaskNotFound."""
    await session.execute(sql.LOCK_USER, {"lock_user": user_id})
    task = (await session.execute(sql.LOCK_TASK, {"lock_task": task_id, "lock_user": user_id})).first()
    if task is None:
        raise TaskNotFound(task_id)
    return task


async def events_from(events_tail: Awaitable[int | None]) -> int | None:
    """Where the new run's events will start, or None when JetStream could not say (a subscriber
    then reads the task's events from the start; a bus outage fails the publish that follows)."""
    try:
        return await events_tail
    except Exception:
        return None


async def queue_run(
    session: AsyncSession, events_tail: Awaitable[int | None], task_id: str, user_id: str, run_id: str, content: Any,
    still_pending: list[Any] | None = None, wait_request: dict[str, Any] | None = None, place: datetime | None = None,
    client_key: str | None = None,
) -> tuple[RunRequest, int]:
    """The message and the task's new `queued` run (`still_pending`: what keeps waiting behind it;
    `wait_request`: the run waits in its user's FIFO instead, keeping what its request will carry;
    `place` with both: it waits in that place of the FIFO, a `run_queued_at`)."""
    idx = await append_message(session, task_id, user_payload(content, client_key), run_id=run_id)
    params: dict[str, Any] = {"queue_task": task_id, "queue_run": run_id,
                              "queue_events_from": await events_from(events_tail)}
    if wait_request is not None and still_pending is not None and place is not None:
        await session.execute(sql.WAIT_NEXT_PENDING, {**params, "queue_request": wait_request,
                                                      "queue_pending": still_pending, "queue_queued_at": place})
    elif wait_request is not None:
        await session.execute(sql.WAIT_RUN, {**params, "queue_request": wait_request})
    elif still_pending is None:
        await session.execute(sql.QUEUE_RUN, params)
    else:
        await session.execute(sql.QUEUE_NEXT_PENDING, {**params, "queue_pending": still_pending})
    req = RunRequest(run_id=run_id, task_id=task_id, user_id=user_id, enqueued_at=time.time())
    return req, idx


def user_payload(content: Any, client_key: str | None = None) -> dict[str, Any]:
    """A user message's stored payload; `client_key`: its client's `Idempotency-Key` (`submit._resubmit`)."""
    payload: dict[str, Any] = {"role": "user", "content": content}
    if client_key is not None:
        payload["client_key"] = client_key
    return payload


def waiting_request(origin: str, scheduled_job_id: str | None, grant: str) -> dict[str, Any]:
    """What a waiting run's request will carry when it is published (`tasks.run_request`)."""
    return {"origin": origin, "scheduled_job_id": scheduled_job_id, "grant": grant}


@dataclass
class NextInput:
    request: RunRequest  # to publish unless `waiting`
    message_idx: int
    waiting: bool  # it waits in the ended run's FIFO place (the ended run held no slot)


async def start_next_input(
    session: AsyncSession, js: JetStreamContext, topo: Topology, *, task_id: str, user_id: str, pending: list[Any],
    deleted: bool = False, held_slot: bool, place: datetime | None = None,
    tail: Awaitable[int | None] | None = None,
) -> NextInput | None:
    """The one way a task's next enqueued message starts once its run ended, in the transaction that
    ended it (the task row locked): a finish, a failure, a reap, a waiting run cancelled or replaced by
    an interrupt (`matrix.Effect.NEXT_INPUT`). The message is stored and its run takes over the slot the
    ended run held (`held_slot`: `queued`), or, when it held none, waits in the ended run's place of its
    user's FIFO (`place`, its `run_queued_at`) until `promote_waiting` gives it a slot. The messages behind
    it keep waiting. None when nothing waits, or when the task is deleted (its messages are dropped:
    nothing will run them). `tail`: where the new run's events start, when the caller has it."""
    if not pending:
        return None
    if deleted:
        await session.execute(sql.DROP_PENDING, {"drop_task": task_id})
        return None
    rest = list(pending)
    item = rest.pop(0)
    origin, grant = item.get("origin", "web"), item.get("grant", "")  # the grant was made at acceptance
    wait = not held_slot
    req, idx = await queue_run(
        session, tail if tail is not None else events_tail(js, topo, task_id), task_id, user_id, item["run_id"],
        item["content"], still_pending=rest, wait_request=waiting_request(origin, None, grant) if wait else None,
        place=place, client_key=item.get("client_key"))
    req.origin, req.grant = origin, grant
    return NextInput(request=req, message_idx=idx, waiting=wait)


PUBLISH_RETRY_SECONDS = 10.0  # ZCBOT_RUN_PUBLISH_RETRY_SECONDS: a JetStream election takes 5-7 s


async def publish_run(js: JetStreamContext, topo: Topology, req: RunRequest, *,
                      retry_seconds: float = PUBLISH_RETRY_SECONDS, msg_id: str | None = None) -> None:
    """Queue the run's request. Idempotent (`Nats-Msg-Id` = the run id: a retry whose first try was
    stored after all is dropped as a duplicate), so it is retried with backoff through a leader
    election or a NATS reconnect for up to `retry_seconds`; the last error is raised after that.
    `msg_id`: another id, for a re-publish of a request that was lost (the sweeper) and whose id
    JetStream may still remember."""
    data, headers = encode(req), {"Nats-Msg-Id": msg_id or req.run_id}
    subject = topo.run_subject(req.task_id)

    async def publish(remaining: float) -> None:
        await js.publish(subject, data, headers=headers, timeout=max(min(5.0, remaining), 1.0))

    await retry_until(publish, retryable=_publish_retryable, deadline_seconds=retry_seconds, first_delay=0.1,
                      max_delay=1.0, what="run publish", logger=log, extra={"run_id": req.run_id})


def _publish_retryable(exc: BaseException) -> bool:
    # Retrying cannot help these (a closed connection is this process shutting down).
    return not isinstance(exc, (BadRequestError, MaxPayloadError, ConnectionClosedError))


async def signal_cancel(nc: NATS, js: JetStreamContext, topo: Topology, task_id: str, run_id: str, reason: str) -> None:
    """KV first (survives a runner restart), then the core subject (preempts at once)."""
    kv = await kv_bucket(js, topo.cancel_bucket)
    await kv.put(topo.kv_key(task_id), encode(CancelRequest(task_id=task_id, run_id=run_id, reason=reason)))
    await nc.publish(topo.cancel_subject(task_id), encode(CancelRequest(task_id=task_id, run_id=run_id, reason=reason)))
    await nc.flush(timeout=2)


async def request_cancel(
    sessions: async_sessionmaker[AsyncSession],
    js: JetStreamContext,
    nc: NATS,
    topo: Topology,
    *,
    user_id: str,
    task_id: str,
    grant_key: str | None,
    reason: str = "user",
    max_active: int | None = None,
) -> tuple[str, bool]:
    """The cancelled run's id, and True when it was waiting in its user's FIFO (it is over at once).
    `grant_key`: the caller's `ZCBOT_RUN_GRANT_KEY`, which signs the background stop. `max_active`: the
    per-user cap, to start the user's waiting runs when a waiting run's next message may take a free slot.

    A waiting run is ended in the transaction alone (`matrix`: waiting x cancel): its next enqueued
    message starts in its place (`start_next_input`), and what follows on the bus (the ended mark, its
    `done`, the next run's publish) is best effort, so the cancel never fails on the bus."""
    async with sessions() as session, session.begin():
        task = await lock_task(session, user_id, task_id)
        step = matrix.step(task.run_status, matrix.Event.CANCEL)
        if step.refused is not None or not task.run_id:
            raise NothingToCancel("no run is active on this task")
        run_id = task.run_id
        if matrix.Effect.ENDS_RUN in step.effects:  # waiting: no runner has it, it ends here
            outcome = await end_waiting_run(session, js, topo, task, list(task.pending_inputs or []), reason=reason)
        else:
            await session.execute(sql.MARK_CANCELLING, {"cancel_task": task_id})
    if matrix.Effect.ENDS_RUN in step.effects:
        await answer_waiting_end(js, topo, task_id, run_id)
        await continue_after_end(autocommit(sessions), js, topo, outcome, max_active=max_active)
        return run_id, True
    await signal_cancel(nc, js, topo, task_id, run_id, reason)
    # The run's background processes go with it (every cancel path: user, scheduler timeout), except
    # keep=true ones (docs/security.md, Layer 3).
    await stop_background(nc, topo, user_id, task_id, "run cancelled", grant_key=grant_key, run_id=run_id)
    return run_id, False


async def end_waiting_run(session: AsyncSession, js: JetStreamContext, topo: Topology, task: Any, pending: list[Any],
                          tail: Awaitable[int | None] | None = None, reason: str = "user") -> "FinishOutcome":
    """A waiting run ends (cancelled, or replaced by an interrupting message: `pending` then starts with
    it), the task row locked: its message is answered by the cancel notice a runner stores for a run it
    cancels (`AgentLoop._store_cancelled`: history tells the truth; no runner ever writes this run's
    history), then its next message waits in its place (`start_next_input`)."""
    await session.execute(sql.END_WAITING, {"cancel_task": task.task_id, "cancel_run": task.run_id})
    asked = (await session.execute(sql.RUN_MESSAGE, {"of_task": task.task_id, "of_run": task.run_id})).scalar()
    lang = user_language([asked] if isinstance(asked, dict) else [])
    await append_message(session, task.task_id, {"role": "assistant", "content": cancel_notice(reason, lang)},
                         kind="cancelled", run_id=task.run_id)
    nxt = await start_next_input(session, js, topo, task_id=task.task_id, user_id=task.user_id, pending=pending,
                                 deleted=task.deleted_at is not None, held_slot=False, place=task.run_queued_at,
                                 tail=tail)
    return FinishOutcome(user_id=task.user_id, next_input=nxt)


async def answer_waiting_end(js: JetStreamContext, topo: Topology, task_id: str, run_id: str) -> None:
    """A waiting run ended (committed): its grant is refused from now on and its stream hears `done`.
    Best effort: the end stands whatever the bus says (a stream reader that misses the `done` sees the
    task's state when it reconnects)."""
    await mark_ended(js, topo, run_id, RunOutcome.CANCELLED.value)  # never raises
    try:
        await js.publish(topo.event_subject(task_id), encode(Done(run_id=run_id, status=RunOutcome.CANCELLED.value)),
                         headers={"Nats-Msg-Id": done_msg_id(run_id)}, timeout=5)
    except Exception as exc:
        log.warning("could not publish a cancelled waiting run's done", extra={"task_id": task_id, "run_id": run_id,
                                                                              "error": repr(exc)})


@dataclass
class FinishOutcome:
    next_input: NextInput | None = None  # the next enqueued message, started (`start_next_input`)
    finished: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    superseded: bool = False  # `owner` was given and another execution holds the run (nothing was changed)
    user_id: str | None = None  # the ended run's user (whose waiting runs may take the freed slot)

    @property
    def next_request(self) -> RunRequest | None:
        """The next run's request to publish (None when it waits for a slot, or nothing waits)."""
        return None if self.next_input is None or self.next_input.waiting else self.next_input.request


def end_params(task_id: str, run_id: str, status: str, error: str | None, timings: dict[str, float],
               owner: str | None) -> dict[str, Any]:
    """Bind parameters of a run's end (`END_RUN*`, `LAST_STEP_AND_END`)."""
    outcome = RunOutcome(status)
    params = {"end_task": task_id, "end_run": run_id, "end_status": outcome.task_status.value,
              "end_error": error if outcome is RunOutcome.ERROR else None, "end_timings": timings}
    if owner is not None:
        params["end_owner"] = owner
    return params


async def end_run_if_nothing_waits(
    autocommit: AsyncEngine, *, task_id: str, run_id: str, status: str, error: str | None, timings: dict[str, float],
    owner: str | None = None,
) -> bool:
    """The usual end of a run in one autocommit statement (`autocommit`: `Runtime.autocommit`): True when it
    ended it; False when a message waits behind it or the run is not (this owner's) any more, and
    `finish_run` must decide in a transaction. A message enqueued meanwhile either makes the
    statement miss (it was committed first) or, committed after, finds the task idle and starts
    its own run."""
    async with autocommit.connect() as conn:
        ended = (await conn.execute(sql.END_RUN_NOTHING_WAITING[owner is not None],
                                    end_params(task_id, run_id, status, error, timings, owner))).first()
    return ended is not None


async def finish_run(
    session: AsyncSession,
    js: JetStreamContext,
    topo: Topology,
    *,
    task_id: str,
    run_id: str,
    status: str,
    error: str | None,
    timings: dict[str, float],
    owner: str | None = None,
) -> FinishOutcome:
    """Terminal state for the run, then start the next enqueued message if any (same transaction).

    With `owner` (the runner executing the run), nothing changes unless that runner still holds the
    run: a runner whose run was redelivered to another one (its heartbeats were lost) must not end it.
    """
    # One conditional UPDATE ends the run when this caller still holds it (the usual case); only a
    # miss or waiting messages need the row itself.
    params = end_params(task_id, run_id, status, error, timings, owner)
    ended = (await session.execute(sql.END_RUN[owner is not None], params)).first()
    if ended is None:
        current = (await session.execute(sql.RUN_OF_TASK, {"of_task": task_id})).first()
        held_elsewhere = current is not None and current.run_id == run_id  # so the owner differs
        return FinishOutcome(finished=False, superseded=held_elsewhere)
    nxt = await start_next_input(session, js, topo, task_id=task_id, user_id=ended.user_id,
                                 pending=list(ended.pending_inputs or []), deleted=ended.deleted_at is not None,
                                 held_slot=True)
    return FinishOutcome(user_id=ended.user_id, next_input=nxt)


async def end_run(
    autocommit: AsyncEngine, sessions: async_sessionmaker[AsyncSession], js: JetStreamContext, topo: Topology, *,
    task_id: str, run_id: str, status: str, error: str | None, timings: dict[str, float], owner: str | None = None,
    last_step_and_end: Callable[[], Awaitable[bool]] | None = None,
) -> FinishOutcome:
    """The end of a run, fastest way first:

    1. fast path, `last_step_and_end` (the runner's step store: `sql.LAST_STEP_AND_END`): the run's
       kept last step and its end in one statement; False when it did not end the run (it then wrote
       the step alone; it raises the store's RunSuperseded when the run is another runner's);
    2. fast path, `end_run_if_nothing_waits`: the end alone in one autocommit statement;
    3. fallback, `finish_run`'s transaction: ends the run and starts the next waiting message
       (`next_request`, to publish), or finds another execution holds the run (`superseded`).
    """
    if last_step_and_end is not None and await last_step_and_end():
        outcome = FinishOutcome()
    else:
        ending = dict(task_id=task_id, run_id=run_id, status=status, error=error, timings=timings, owner=owner)
        if await end_run_if_nothing_waits(autocommit, **ending):
            outcome = FinishOutcome()
        else:
            async with sessions() as session, session.begin():
                outcome = await finish_run(session, js, topo, **ending)
    if outcome.finished:  # not when superseded: the run goes on elsewhere with the same grant
        await mark_ended(js, topo, run_id, status)
    return outcome


async def promote_waiting(autocommit: AsyncEngine, js: JetStreamContext, topo: Topology, user_id: str,
                          max_active: int, retry_seconds: float = PUBLISH_RETRY_SECONDS) -> list[str]:
    """Start the user's oldest waiting runs into its free slots (after any run of the user ended) and
    publish them; their run ids. A publish that fails leaves the run `queued` for the reaper."""
    async with autocommit.connect() as conn:
        rows = (await conn.execute(sql.PROMOTE_WAITING, {"promote_user": user_id,
                                                         "promote_max_active": max_active})).all()
    for task_id, run_id, request in rows:
        request = request or {}
        req = RunRequest(run_id=run_id, task_id=task_id, user_id=user_id, enqueued_at=time.time(),
                         origin=request.get("origin", "web"), scheduled_job_id=request.get("scheduled_job_id"),
                         grant=request.get("grant", ""))
        await publish_run(js, topo, req, retry_seconds=retry_seconds)
    return [row[1] for row in rows]


async def reap(sessions: async_sessionmaker[AsyncSession], js: JetStreamContext, topo: Topology, *, task_id: str,
               run_id: str, seen_status: str, error: str) -> FinishOutcome | None:
    """A lost run to `error` (its owner is gone and JetStream will not redeliver it; or, `queued`, its
    request kept being lost), and its next enqueued message started as a finish starts it
    (`start_next_input`: it takes the slot over). The outcome (its `next_request` to publish:
    `continue_after_end`) when reaped, and marked ended (an owner still alive after all gets its calls
    refused); None when the run moved on since the reaper saw it in `seen_status`."""
    async with sessions() as session, session.begin():
        reaped = (await session.execute(sql.REAP, {"reap_task": task_id, "reap_run": run_id,
                                                   "reap_status": seen_status, "reap_error": error})).first()
        if reaped is None:
            return None
        nxt = await start_next_input(session, js, topo, task_id=task_id, user_id=reaped.user_id,
                                     pending=list(reaped.pending_inputs or []), deleted=reaped.deleted_at is not None,
                                     held_slot=True)
    await mark_ended(js, topo, run_id, RunOutcome.ERROR.value)
    return FinishOutcome(user_id=reaped.user_id, next_input=nxt)


async def continue_after_end(autocommit: AsyncEngine, js: JetStreamContext, topo: Topology, outcome: FinishOutcome, *,
                             max_active: int | None, retry_seconds: float = PUBLISH_RETRY_SECONDS) -> list[str]:
    """What every end of a run does once it is committed and answered (the runner's finish, the reaper,
    the requeue sweep's give-up, a waiting run's cancel or replacement): publish the next message's run
    when it took the slot over, then start the user's oldest waiting runs in its free slots
    (`max_active`: the per-user cap; None: left to the reaper's sweep). The promoted runs' ids.

    Never raises: PostgreSQL holds the truth. A request not published is published again by the
    scheduler's requeue sweep (a `queued` run without its request), waiting runs by the reaper's sweep."""
    if outcome.next_request is not None:
        try:
            await publish_run(js, topo, outcome.next_request, retry_seconds=retry_seconds)
        except Exception as exc:
            log.error("could not publish the next enqueued run; the requeue sweep will",
                      extra={"run_id": outcome.next_request.run_id, "error": repr(exc)})
    if outcome.user_id is None or max_active is None:
        return []
    try:
        return await promote_waiting(autocommit, js, topo, outcome.user_id, max_active, retry_seconds)
    except Exception as exc:
        log.error("could not start the user's waiting runs; the reaper's sweep will",
                  extra={"user_id": outcome.user_id, "error": repr(exc)})
        return []
