"""What must hold between any two transitions of the run state machine (`runstate.matrix`), read from
PostgreSQL (and, given the bus, from JetStream): `violations` lists what does not. The tests check it
after every step (tests/core/runstate/test_runstate_matrix.py, test_runstate_stateful.py); an operator may run it
against a live database.

Per task (deleted tasks are left out):
- idle / error: no message waits behind (`pending_inputs` empty), no owner, no held request;
- waiting: a run id, its request kept (`run_request`, with the grant it will carry) and a place in its
  user's FIFO (`run_queued_at`); no owner;
- queued: no owner, no held request; with the bus: its request is in the runs stream;
- running: an owner;
- cancelling: published to a runner: an owner, or (with the bus) its request in the runs stream;
- any active run: its user message is stored (carrying the run id);
- the messages waiting behind: at most `MAX_PENDING_INPUTS`, each with its run id, content and grant,
  their run ids distinct and none stored yet.
Per user: the runs holding a slot (`COUNTED`) within the cap, the waiting runs within the FIFO's bound,
and, `settled` (no transition in flight), no run waiting while a slot is free.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from sqlalchemy import bindparam, text
from sqlalchemy.ext.asyncio import AsyncEngine

from zcbot_core.bus import BusDecodeError, RunRequest, Topology, decode
from zcbot_core.runstate.status import ACTIVE, COUNTED, RunStatus
from zcbot_core.runstate.transitions import MAX_PENDING_INPUTS

_TASKS = text(
    "SELECT task_id, user_id, run_status, run_id, run_owner, run_request, run_queued_at, pending_inputs "
    "FROM tasks WHERE deleted_at IS NULL AND (CAST(:users AS text[]) IS NULL OR user_id = ANY(CAST(:users AS text[]))) "
    "AND (CAST(:task_id AS text) IS NULL OR task_id = :task_id) ORDER BY task_id"
)
_USER_MESSAGE_RUNS = text(
    "SELECT task_id, run_id FROM messages WHERE task_id IN :task_ids AND run_id IS NOT NULL "
    "AND payload->>'role' = 'user'"
).bindparams(bindparam("task_ids", expanding=True))

_PENDING_KEYS = ("run_id", "content", "grant")


async def violations(
    autocommit: AsyncEngine, *, user_id: str | Sequence[str] | None = None, task_id: str | None = None,
    max_active: int | None = None, max_waiting: int | None = None, settled: bool = False,
    js: JetStreamContext | None = None, topo: Topology | None = None,
) -> list[str]:
    """Every invariant broken by the tasks of `user_id` (one or several) / `task_id` (neither: all tasks),
    as sentences."""
    users = [user_id] if isinstance(user_id, str) else list(user_id) if user_id is not None else None
    async with autocommit.connect() as conn:
        rows = (await conn.execute(_TASKS, {"users": users, "task_id": task_id})).all()
        stored: dict[str, set[str]] = defaultdict(set)
        if rows:
            for tid, rid in (await conn.execute(_USER_MESSAGE_RUNS, {"task_ids": [r.task_id for r in rows]})).all():
                stored[tid].add(rid)
    found: list[str] = []
    per_user: dict[str, dict[str, int]] = defaultdict(lambda: {"counted": 0, "waiting": 0})
    for row in rows:
        found += [f"task {row.task_id} ({row.run_status}): {v}" for v in await _task_violations(row, stored[row.task_id],
                                                                                              js, topo)]
        if row.run_status in COUNTED:
            per_user[row.user_id]["counted"] += 1
        elif row.run_status == RunStatus.WAITING:
            per_user[row.user_id]["waiting"] += 1
    if task_id is None:  # a user's counts need all its tasks
        for uid, n in per_user.items():
            if max_active is not None and n["counted"] > max_active:
                found.append(f"user {uid}: {n['counted']} runs hold slots, over the cap of {max_active}")
            if max_waiting is not None and n["waiting"] > max_waiting:
                found.append(f"user {uid}: {n['waiting']} runs wait, over the bound of {max_waiting}")
            if settled and max_active is not None and n["waiting"] and n["counted"] < max_active:
                found.append(f"user {uid}: {n['waiting']} runs wait while {max_active - n['counted']} slots are free")
    return found


async def _task_violations(row: Any, stored_runs: set[str], js: JetStreamContext | None,
                           topo: Topology | None) -> list[str]:
    out: list[str] = []
    status, pending = row.run_status, list(row.pending_inputs or [])
    if status not in {s.value for s in RunStatus}:
        return [f"unknown status {status!r}"]
    if status in (RunStatus.IDLE, RunStatus.ERROR):
        if pending:
            out.append(f"{len(pending)} messages wait behind no run")
        if row.run_owner is not None:
            out.append(f"an owner ({row.run_owner}) without a run")
    if status != RunStatus.WAITING and row.run_request is not None:
        out.append("a held request outside the FIFO")
    if status in ACTIVE:
        if not row.run_id:
            out.append("an active run without a run id")
        elif row.run_id not in stored_runs:
            out.append(f"run {row.run_id}: its message is not stored")
    if status == RunStatus.WAITING:
        if not isinstance(row.run_request, dict) or "grant" not in row.run_request:
            out.append("waiting without its request")
        if row.run_queued_at is None:
            out.append("waiting without a place in the FIFO")
        if row.run_owner is not None:
            out.append(f"waiting, yet owned by {row.run_owner}")
    if status == RunStatus.QUEUED and row.run_owner is not None:
        out.append(f"queued, yet owned by {row.run_owner}")
    if status == RunStatus.RUNNING and row.run_owner is None:
        out.append("running without an owner")
    if js is not None and topo is not None and (
            status == RunStatus.QUEUED or (status == RunStatus.CANCELLING and row.run_owner is None)):
        if await _published(js, topo, row.task_id) != row.run_id:
            out.append(f"run {row.run_id}: its request is not in the runs stream")
    out += _pending_violations(row, pending, stored_runs)
    return out


def _pending_violations(row: Any, pending: list[Any], stored_runs: set[str]) -> list[str]:
    out: list[str] = []
    if len(pending) > MAX_PENDING_INPUTS:
        out.append(f"{len(pending)} messages wait, over {MAX_PENDING_INPUTS}")
    ids = [item.get("run_id") if isinstance(item, dict) else None for item in pending]
    for item in pending:
        missing = [k for k in _PENDING_KEYS if not isinstance(item, dict) or k not in item]
        if missing:
            out.append(f"a waiting message lacks {', '.join(missing)}")
    if len(set(ids)) != len(ids):
        out.append("two waiting messages share a run id")
    if row.run_id in ids:
        out.append(f"run {row.run_id} both active and waiting")
    if stored_runs & set(ids):
        out.append(f"waiting messages already stored: {sorted(stored_runs & set(ids))}")
    return out


async def _published(js: JetStreamContext, topo: Topology, task_id: str) -> str | None:
    """The run id of the task's request in the runs stream (a work queue: one not yet acked)."""
    try:
        msg = await js.get_last_msg(topo.runs_stream, topo.run_subject(task_id))
    except NotFoundError:
        return None
    try:
        return decode(msg.data or b"", RunRequest).run_id
    except BusDecodeError:
        return None
