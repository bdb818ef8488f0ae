"""The queued-run sweep: PostgreSQL is the truth for queued runs (issue 23 item 7).

A run `queued` in PostgreSQL whose request is not in the runs stream would wait forever: a request
JetStream acknowledged and then lost (a power cut before the disk sync, a replica that never had
it), one deleted after running out of deliveries before any runner could claim it (the runner's
reaper removes those), or a publish whose 503 came after the row was written. Every
`ZCBOT_REQUEUE_AFTER_SECONDS` of such a state, the sweep publishes the request again, with a
fresh grant.

Why the scheduler: the grant that lets the run's tool calls through the executor is signed with
ZCBOT_RUN_GRANT_KEY, which the runner never holds (bus/grants.py); the scheduler holds it and
already reconciles runs with PostgreSQL on every tick. Replicas are safe: a re-publish's
`Nats-Msg-Id` is the run id and the sweep's count, so two replicas publishing it at once store it
once, and a duplicate delivery of a run already claimed is acked away by the claim.

A run queued behind one that just ended is checked sooner (`ended`, `sweep_ended`; issue 42): a
runner ends a run and starts the next enqueued message's run in one transaction, publishes `done`,
then the next request; killed in between, the next run waits in `queued` with no request. The
scheduler sees every `done` (its events subscription), and once the ending runner's own publish
would have been stored or given up (`ZCBOT_RUN_PUBLISH_RETRY_SECONDS` + 2 s), a run of that task
still queued since before then without its request is published again, instead of after the
sweep's minute.

A run re-published MAX_REQUEUES times that is still queued and absent (its request keeps being
lost or refused without a claim) is ended as the reaper ends a lost run: `error`, with an error
event and `done` on its stream, so it never stays queued.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from nats.js.errors import NotFoundError
from sqlalchemy import bindparam, select

from zcbot_core.bus import BusDecodeError, RunRequest, decode, encode, grants
from zcbot_core.bus import events as ev
from zcbot_core.db.models import Task
from zcbot_core.platform.service import Runtime
from zcbot_core.runstate.status import RunOutcome, RunStatus
from zcbot_core.runstate.transitions import continue_after_end, now, publish_run, reap

log = logging.getLogger(__name__)
MAX_REQUEUES = 3
GIVEN_UP = "the run could not be queued (its request was lost several times); send the message again"

_QUEUED_SINCE = (
    select(Task.task_id, Task.run_id, Task.user_id, Task.scheduled_job_id)
    .where(Task.run_status == RunStatus.QUEUED.value, Task.run_queued_at < bindparam("before"),
           Task.deleted_at.is_(None))
)


async def _in_stream(rt: Runtime, task_id: str, run_id: str) -> bool:
    """The run's request is in the runs stream (waiting, or delivered and not acked yet)."""
    try:
        raw = await rt.js.get_last_msg(rt.topo.runs_stream, rt.topo.run_subject(task_id))
    except NotFoundError:
        return False
    try:
        return decode(raw.data or b"", RunRequest).run_id == run_id
    except BusDecodeError:
        return False


class QueuedRunSweeper:
    def __init__(self, rt: Runtime, after_seconds: float) -> None:
        self.rt = rt
        self.after = timedelta(seconds=after_seconds)
        self.requeued: dict[str, int] = {}  # run id -> times re-published by this replica
        # After a `done`: the ending runner's publish of the next run is stored or given up by then.
        self.ended_after = rt.settings.zcbot_run_publish_retry_seconds + 2.0
        self.ended_at: dict[str, float] = {}  # task id -> when a `done` of it was seen (monotonic)

    def ended(self, task_id: str) -> None:
        """A run of the task ended (its `done` was seen): `sweep_ended` checks the task soon."""
        self.ended_at.setdefault(task_id, time.monotonic())

    async def sweep_ended(self) -> int:
        """Re-publish the queued runs of tasks whose run ended `ended_after` ago or more, queued since
        before then and without their request (see the module docstring); how many."""
        cutoff = time.monotonic() - self.ended_after
        due = [task_id for task_id, seen in self.ended_at.items() if seen <= cutoff]
        if not due:
            return 0
        for task_id in due:
            self.ended_at.pop(task_id, None)
        async with self.rt.sessions() as session:
            rows = (await session.execute(_QUEUED_SINCE.where(Task.task_id.in_(due)),
                                          {"before": now() - timedelta(seconds=self.ended_after)})).all()
        return await self._requeue(rows)

    async def sweep(self) -> int:
        """Re-publish (or, past MAX_REQUEUES, end) every run queued too long without its request;
        how many were re-published."""
        async with self.rt.sessions() as session:
            rows = (await session.execute(_QUEUED_SINCE, {"before": now() - self.after})).all()
        done = await self._requeue(rows)
        live = {row.run_id for row in rows}
        for run_id in [r for r in self.requeued if r not in live]:  # started or ended since: forgotten
            self.requeued.pop(run_id, None)
        return done

    async def _requeue(self, rows: Sequence[Any]) -> int:
        done = 0
        for row in rows:
            if await _in_stream(self.rt, row.task_id, row.run_id):
                continue
            count = self.requeued.get(row.run_id, 0)
            if count >= MAX_REQUEUES:
                await self._give_up(row.task_id, row.run_id)
                continue
            req = RunRequest(run_id=row.run_id, task_id=row.task_id, user_id=row.user_id, enqueued_at=time.time(),
                             origin="scheduler" if row.scheduled_job_id else "web",
                             scheduled_job_id=row.scheduled_job_id,
                             grant=grants.issue(self.rt.settings.zcbot_run_grant_key, row.run_id, row.user_id,
                                                row.task_id))
            try:
                # Not the run id alone: JetStream may still remember it (its duplicate window) and
                # would drop this publish as a duplicate of the request that was lost.
                await publish_run(self.rt.js, self.rt.topo, req, msg_id=f"{row.run_id}:requeue:{count + 1}",
                                  retry_seconds=self.rt.settings.zcbot_run_publish_retry_seconds)
            except Exception as exc:
                log.warning("could not re-publish a queued run", extra={"run_id": row.run_id, "error": repr(exc)})
                continue
            self.requeued[row.run_id] = count + 1
            done += 1
            log.warning("queued run had no request in the runs stream; published it again",
                        extra={"task_id": row.task_id, "run_id": row.run_id, "time": count + 1})
        return done

    async def _give_up(self, task_id: str, run_id: str) -> None:
        outcome = await reap(self.rt.sessions, self.rt.js, self.rt.topo, task_id=task_id, run_id=run_id,
                             seen_status=RunStatus.QUEUED.value, error=GIVEN_UP)
        if outcome is None:
            return
        subject = self.rt.topo.event_subject(task_id)
        await self.rt.js.publish(subject, encode(ev.ErrorEvent(run_id=run_id, msg=GIVEN_UP, code="lost")))
        await self.rt.js.publish(subject, encode(ev.Done(run_id=run_id, status=RunOutcome.ERROR.value)),
                                headers={"Nats-Msg-Id": ev.done_msg_id(run_id)})
        self.requeued.pop(run_id, None)
        # Its next enqueued message runs and its slot goes on, as after any end.
        settings = self.rt.settings
        await continue_after_end(self.rt.autocommit, self.rt.js, self.rt.topo, outcome,
                                 max_active=settings.zcbot_max_runs_per_user,
                                 retry_seconds=settings.zcbot_run_publish_retry_seconds)
        log.warning("gave up a queued run whose request kept being lost", extra={"task_id": task_id, "run_id": run_id})
