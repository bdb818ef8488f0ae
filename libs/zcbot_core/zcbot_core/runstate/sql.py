"""Every statement of the run state machine (`runstate.submit`, `.claim`, `.transitions` and the
runner's step store), built once.

Each statement takes bind parameters: building SQLAlchemy expressions per call, and the ORM's
load-mutate-flush cycle, cost more CPU than the round trips themselves on the per-message and
per-step paths (docs/performance.md). Rows come back as read-only `Row`s.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    Numeric,
    String,
    Text,
    bindparam,
    case,
    cast,
    func,
    insert,
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB, aggregate_order_by

from zcbot_core.accounts.usage import TASK_TOTALS_DELTA
from zcbot_core.channels.bindings import ACTIVE as ACTIVE_BINDING
from zcbot_core.db.models import ChannelBinding, Message, Task, UsageEvent, User
from zcbot_core.runstate.status import CLAIMED, COUNTED, RunStatus

tasks = Task.__table__
messages = Message.__table__
users = User.__table__
bindings = ChannelBinding.__table__

# The user row first, then the task row: every writer locks in this order (per-user caps hold).
LOCK_USER = select(users.c.user_id).where(users.c.user_id == bindparam("lock_user")).with_for_update()
LOCK_TASK = (
    select(tasks)
    .where(tasks.c.task_id == bindparam("lock_task"), tasks.c.user_id == bindparam("lock_user"),
           tasks.c.deleted_at.is_(None))
    .with_for_update()
)

# Both caps in one scan of the active rows (ix_tasks_run_status).
QUOTA = (
    select(func.count().filter(tasks.c.user_id == bindparam("quota_user")),
           func.count().filter(tasks.c.run_status == RunStatus.QUEUED.value))
    .where(tasks.c.run_status.in_(COUNTED))
)

_APPEND_COLUMNS = {"payload": JSONB, "kind": String, "run_id": String, "model_profile": String,
                   "tokens_in": Integer, "tokens_out": Integer}
# The next idx and the row in one INSERT ... SELECT (the caller holds the task row lock).
APPEND_MESSAGE = insert(messages).from_select(
    ["task_id", "idx", *_APPEND_COLUMNS],
    select(bindparam("append_task", type_=String).label("task_id"),
           func.coalesce(func.max(messages.c.idx) + 1, 0).label("idx"),
           *(bindparam(f"append_{name}", type_=kind).label(name) for name, kind in _APPEND_COLUMNS.items()))
    .where(messages.c.task_id == bindparam("append_task", type_=String)),
).returning(messages.c.idx)


def _owned_step_statement(with_usage: bool, ends_run: bool = False) -> Any:
    """A run step written by the run's owner in one autocommit statement: the fence (this run, this
    owner; with usage, the task's running totals too), the usage event and the next message, as
    data-modifying CTEs that write nothing when the fence misses. Returns the message's idx, NULL when
    the run is not this owner's any more.

    `ends_run`: the run's last step and its end together (the end's `END_RUN_NOTHING_WAITING`
    values and condition on the fence): NULL also when a message waits behind the run, and then
    nothing was written.

    During a run its owner is the task's only writer of messages, so the idx read in the statement's
    snapshot is the next one; were another writer to append meanwhile, the unique (task_id, idx) index
    refuses the row and the caller writes the step in a transaction holding the row lock instead.
    """
    values: dict[str, Any] = {"updated_at": tasks.c.updated_at, **(TASK_TOTALS_DELTA if with_usage else {})}
    conditions = [tasks.c.task_id == bindparam("append_task", type_=String), tasks.c.run_id == bindparam("step_run"),
                  tasks.c.run_owner == bindparam("step_owner")]
    if ends_run:
        values.update(_END_VALUES, updated_at=func.now())
        conditions.append(_NOTHING_WAITING)
    fenced = (
        update(tasks)
        .where(*conditions)
        .values(**values)
        .returning(tasks.c.task_id)
        .cte("fenced")
    )
    next_idx = (select(func.coalesce(func.max(messages.c.idx) + 1, 0))
                .where(messages.c.task_id == bindparam("append_task", type_=String)).scalar_subquery())
    message = (
        insert(messages).from_select(
            ["task_id", "idx", *_APPEND_COLUMNS],
            select(fenced.c.task_id, next_idx,
                   *(bindparam(f"append_{name}", type_=kind) for name, kind in _APPEND_COLUMNS.items())))
        .returning(messages.c.idx)
        .cte("message")
    )
    parts = [select(message.c.idx).scalar_subquery().label("idx")]
    if with_usage:
        usage_events = UsageEvent.__table__
        usage = (
            insert(usage_events).from_select(
                ["user_id", "task_id", "run_id", "kind", "model_profile", "units", "cost"],
                select(bindparam("usage_user", type_=String), fenced.c.task_id, bindparam("step_run"),
                       bindparam("usage_kind", type_=String), bindparam("usage_profile", type_=String),
                       bindparam("usage_units", type_=JSONB), bindparam("usage_cost", type_=Numeric(14, 6))))
            .returning(usage_events.c.id)
            .cte("usage")
        )
        # Selected so the CTE is part of the statement (SQLAlchemy renders only the CTEs a query uses).
        parts.append(select(func.count()).select_from(usage).scalar_subquery().label("usage_rows"))
    return select(*parts)


# The values that end a run, and "no message waits behind it" (SQL NULL, JSON null or []).
_END_VALUES: dict[str, Any] = {
    "run_status": bindparam("end_status"), "run_error": bindparam("end_error"), "run_owner": None,
    "run_timings": bindparam("end_timings", type_=JSONB),
}
_NOTHING_WAITING = func.coalesce(cast(tasks.c.pending_inputs, Text), "[]").in_(["[]", "null"])

OWNED_STEP = {with_usage: _owned_step_statement(with_usage) for with_usage in (False, True)}


def _step_fence_statement(owned: bool, counters: bool) -> Any:
    """The step store's transaction path: the task row locked first (idx allocation must not race a
    concurrent append); with an owner the lock doubles as the fence (only the run's holder writes)."""
    stmt = update(tasks).where(tasks.c.task_id == bindparam("fence_task"))
    if owned:
        stmt = stmt.where(tasks.c.run_id == bindparam("fence_run"), tasks.c.run_owner == bindparam("fence_owner"))
    values: dict[str, Any] = {"updated_at": tasks.c.updated_at}
    if counters:  # the task's running totals, in the same statement
        values.update(TASK_TOTALS_DELTA)
    return stmt.values(**values)


STEP_FENCES = {(owned, counters): _step_fence_statement(owned, counters)
               for owned in (True, False) for counters in (True, False)}
LAST_STEP_AND_END = _owned_step_statement(with_usage=True, ends_run=True)


def _queue_statement(with_pending: bool, waiting: bool = False, keep_place: bool = False) -> Any:
    """The task's next run, queued (or waiting: over its user's cap). `keep_place`: a waiting run that
    takes over a waiting run's place in its user's FIFO (its `run_queued_at`), as the task's next
    message does when the waiting run before it ends (`transitions.start_next_input`)."""
    values: dict[str, Any] = {
        "run_status": RunStatus.WAITING.value if waiting else RunStatus.QUEUED.value, "run_id": bindparam("queue_run"),
        "run_error": None, "run_owner": None,
        "run_queued_at": bindparam("queue_queued_at") if keep_place else func.now(),
        "run_started_at": None, "run_timings": None,
        "run_events_from": bindparam("queue_events_from", type_=Integer),
        "run_request": bindparam("queue_request", type_=JSONB) if waiting else None,
    }
    if with_pending:
        values["pending_inputs"] = bindparam("queue_pending", type_=JSONB)
    return update(tasks).where(tasks.c.task_id == bindparam("queue_task")).values(**values)


QUEUE_RUN = _queue_statement(False)
QUEUE_NEXT_PENDING = _queue_statement(True)  # the next waiting message starts; the rest keep waiting
WAIT_RUN = _queue_statement(False, waiting=True)  # over the user's cap: the run waits in the user's FIFO
# The next message of a task whose waiting run ended: it waits in that run's place (the rest keep waiting).
WAIT_NEXT_PENDING = _queue_statement(True, waiting=True, keep_place=True)
WAITING_OF_USER = select(func.count()).where(tasks.c.user_id == bindparam("waiting_user"),
                                             tasks.c.run_status == RunStatus.WAITING.value)

# A message to a task with no active run, submitted in one round trip by migration 0003's function
# (user and task locks, both caps, the message, the queued run; it writes nothing unless it answers
# `queued`). `submit._submit_in_transaction` is the path for an active task and the reference for
# this one: tests/core/runstate/test_submit.py checks that both leave the same rows.
SUBMIT_TO_IDLE = text(
    "SELECT outcome, detail, message_idx, counted FROM zcbot_submit_run_v2(:submit_user, :submit_task, "
    ":submit_run, :submit_payload, :submit_events_from, :submit_channel, :submit_max_active, :submit_max_queued, "
    ":submit_max_waiting, :submit_request)"
).bindparams(
    bindparam("submit_user", type_=String), bindparam("submit_task", type_=String), bindparam("submit_run", type_=String),
    bindparam("submit_payload", type_=JSONB), bindparam("submit_events_from", type_=BigInteger),
    bindparam("submit_channel", type_=String), bindparam("submit_max_active", type_=BigInteger),
    bindparam("submit_max_queued", type_=BigInteger), bindparam("submit_max_waiting", type_=BigInteger),
    bindparam("submit_request", type_=JSONB),
)
# The user's oldest waiting runs into its free slots, with the user row held (migration 0005).
PROMOTE_WAITING = text(
    "SELECT task_id, run_id, run_request FROM zcbot_promote_waiting_v1(:promote_user, :promote_max_active)"
).bindparams(bindparam("promote_user", type_=String), bindparam("promote_max_active", type_=BigInteger),
             ).columns(task_id=String, run_id=String, run_request=JSONB)
USERS_WAITING = select(tasks.c.user_id).where(tasks.c.run_status == RunStatus.WAITING.value).distinct()
# A run's place in its user's queue (1: next).
WAITING_POSITION = text(
    "SELECT count(*) FROM tasks w, tasks me WHERE me.task_id = :position_task AND me.run_status = 'waiting' "
    "AND w.user_id = me.user_id AND w.run_status = 'waiting' "
    "AND (w.run_queued_at, w.task_id) <= (me.run_queued_at, me.task_id)"
).bindparams(bindparam("position_task", type_=String))
# A waiting run ended (cancelled, or replaced by an interrupt): it never reached a runner, so it ends
# here; the caller holds the row and starts the task's next message (`transitions.start_next_input`).
END_WAITING = (
    update(tasks)
    .where(tasks.c.task_id == bindparam("cancel_task"), tasks.c.run_id == bindparam("cancel_run"),
           tasks.c.run_status == RunStatus.WAITING.value)
    .values(run_status=RunStatus.IDLE.value, run_request=None, run_owner=None, run_error=None,
            pending_inputs=literal_column("'[]'::jsonb"), updated_at=func.now())
)
# A run's own (user) message, the last one stored for it: a notice answering it is in its language.
RUN_MESSAGE = (
    select(messages.c.payload)
    .where(messages.c.task_id == bindparam("of_task"), messages.c.run_id == bindparam("of_run"))
    .order_by(messages.c.idx.desc())
    .limit(1)
)
# A deleted task's run ended: the messages that waited behind it never run.
DROP_PENDING = update(tasks).where(tasks.c.task_id == bindparam("drop_task")).values(
    pending_inputs=literal_column("'[]'::jsonb"))

SET_PENDING = (
    update(tasks).where(tasks.c.task_id == bindparam("pending_task"))
    .values(pending_inputs=bindparam("pending_inputs", type_=JSONB), run_status=bindparam("pending_status"))
)
MARK_CANCELLING = (update(tasks).where(tasks.c.task_id == bindparam("cancel_task"))
                   .values(run_status=RunStatus.CANCELLING.value))
# A queued run whose request JetStream did not take: `error`, so the task is not stuck.
# The user message of a task stored with a client's key (`submit._resubmit`; the payload's GIN index).
MESSAGE_BY_KEY = (
    select(messages.c.idx, messages.c.run_id, messages.c.payload)
    .where(messages.c.task_id == bindparam("key_task"), messages.c.payload.op("@>")(bindparam("key_payload", type_=JSONB)))
    .order_by(messages.c.idx).limit(1)
)

MARK_UNPUBLISHED = (
    update(tasks)
    .where(tasks.c.task_id == bindparam("unpub_task"), tasks.c.run_id == bindparam("unpub_run"),
           tasks.c.run_status == RunStatus.QUEUED.value)
    .values(run_status=RunStatus.ERROR.value, run_error=bindparam("unpub_error"))
)


def _end_run_statement(owned: bool, nothing_waiting: bool = False) -> Any:
    stmt = update(tasks).where(tasks.c.task_id == bindparam("end_task"), tasks.c.run_id == bindparam("end_run"))
    if owned:
        stmt = stmt.where(tasks.c.run_owner == bindparam("end_owner"))
    if nothing_waiting:  # no enqueued message to start in the same transaction
        stmt = stmt.where(_NOTHING_WAITING)
    return stmt.values(**_END_VALUES).returning(tasks.c.user_id, tasks.c.pending_inputs, tasks.c.deleted_at)


END_RUN = {owned: _end_run_statement(owned) for owned in (True, False)}
END_RUN_NOTHING_WAITING = {owned: _end_run_statement(owned, nothing_waiting=True) for owned in (True, False)}
RUN_OF_TASK = select(tasks.c.run_id).where(tasks.c.task_id == bindparam("of_task"))


# ---- claim (`runstate.claim`) -----------------------------------------------------------------------
# One statement, run in autocommit (no BEGIN/COMMIT round trips): a conditional UPDATE claims the
# run (a cancel requested before the claim keeps `cancelling`; no row: a stale or duplicate delivery
# of a finished run) and the same statement returns the task's window as one JSON array.
# `prior_owner`: the owner before this claim (a subquery in RETURNING reads the statement's snapshot,
# i.e. the row before the update): another runner's id means a takeover, and that runner is told to stop.
_before = tasks.alias("before_claim")
_prior_owner = select(_before.c.run_owner).where(_before.c.task_id == tasks.c.task_id).scalar_subquery()
_claimed = (
    update(tasks)
    .where(tasks.c.task_id == bindparam("claim_task"), tasks.c.run_id == bindparam("claim_run"),
           tasks.c.run_status.in_(COUNTED))
    .values(run_status=case((tasks.c.run_status == RunStatus.CANCELLING.value, RunStatus.CANCELLING.value),
                            else_=RunStatus.RUNNING.value),
            run_owner=bindparam("claim_owner"), run_started_at=func.coalesce(tasks.c.run_started_at, func.now()))
    .returning(*tasks.c, _prior_owner.label("prior_owner"))
    .cte("claimed")
)
_window_json = (
    select(func.coalesce(
        func.json_agg(aggregate_order_by(
            func.json_build_array(messages.c.idx, messages.c.kind, messages.c.payload, messages.c.created_at),
            messages.c.idx)),
        literal_column("'[]'::json")))
    .where(messages.c.task_id == _claimed.c.task_id, messages.c.idx >= _claimed.c.context_base_idx)
    .scalar_subquery()
)
# Whether the user has an active channel binding at all (most users: none, and then the run's host
# tools need no query of their own to decide on `wechat_push`).
_binding_active = (
    select(bindings.c.id)
    .where(bindings.c.user_id == _claimed.c.user_id, bindings.c.status == ACTIVE_BINDING)
    .exists()
)
# Whether the user has a cost limit of their own (null or 0: none): the run's first LLM call then
# needs no read of its own when no default limit is set either (`RunBudget.prime`, issue 43).
_own_limit = (
    select(users.c.user_id)
    .where(users.c.user_id == _claimed.c.user_id,
           or_(func.coalesce(users.c.budget_daily_usd, 0) > 0, func.coalesce(users.c.budget_monthly_usd, 0) > 0))
    .exists()
)
CLAIM = select(_claimed, _window_json.label("window_rows"), _binding_active.label("user_has_active_binding"),
               _own_limit.label("user_has_own_limit"))
# How a run that is over ended, from what it left (a stale redelivery's `done`, `claim.ended_outcome`):
# whether the task still holds it in `error`, and the kind of its last stored message.
ENDED_RUN = text(
    "SELECT t.run_id = :ended_run AND t.run_status = 'error' AS errored, "
    "(SELECT m.kind FROM messages m WHERE m.task_id = t.task_id AND m.run_id = :ended_run "
    "ORDER BY m.idx DESC LIMIT 1) AS last_kind FROM tasks t WHERE t.task_id = :ended_task"
).bindparams(bindparam("ended_run", type_=String), bindparam("ended_task", type_=String))
# Applied only when the soft reset moves the window, fenced by the claim just made.
SOFT_RESET = (
    update(tasks)
    .where(tasks.c.task_id == bindparam("reset_task"), tasks.c.run_id == bindparam("reset_run"),
           tasks.c.run_owner == bindparam("reset_owner"))
    .values(context_base_idx=bindparam("reset_base"), context_summary=bindparam("reset_summary"))
)

# ---- reap (`transitions.reap`, the runner's reaper) ------------------------------------------------
# Runs that may be lost: claimed ones (their owner may be dead), queued ones older than the grace.
REAP_CANDIDATES = (
    select(tasks.c.task_id, tasks.c.run_id, tasks.c.run_owner, tasks.c.run_status, tasks.c.run_queued_at)
    .where(or_(tasks.c.run_status.in_(CLAIMED),
               (tasks.c.run_status == RunStatus.QUEUED.value) & (tasks.c.run_queued_at < bindparam("reap_queued_before"))))
)
# Fenced on the status the reaper saw: a run that moved on meanwhile is left alone.
REAP = (
    update(tasks)
    .where(tasks.c.task_id == bindparam("reap_task"), tasks.c.run_id == bindparam("reap_run"),
           tasks.c.run_status == bindparam("reap_status"))
    .values(run_status=RunStatus.ERROR.value, run_error=bindparam("reap_error"), run_owner=None)
    .returning(tasks.c.user_id, tasks.c.pending_inputs, tasks.c.deleted_at)
)

# ---- ownership (the runner's takeover backstop, `zcbot_runner.takeover`) ---------------------------
RUN_HOLDER = select(tasks.c.run_id, tasks.c.run_owner).where(tasks.c.task_id == bindparam("holder_task"))
