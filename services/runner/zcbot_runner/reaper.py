"""Liveness of runners and the reaper of lost runs (DESIGN §4.4).

Each runner keeps a key in the leases bucket alive. A run whose owner has no live key and whose
request is no longer in the runs stream (JetStream will not redeliver it) can never finish: the
reaper turns it into `error` with a clear message so nothing stays stuck in `running`. A run owned
by the reaper's OWN runner but not executing there (it was left for redelivery, e.g. during a
database outage) counts as ownerless: its owner being alive says nothing about it.

A request whose deliveries ran out (`max_deliver`) stays in the work-queue stream but is never
delivered again; `drop_exhausted` (on JetStream's max-deliveries advisory) deletes it, so the
reaper sees the run as no longer queued. A run still `queued` (never claimed) whose request is gone
is not reaped: the scheduler's sweep (`zcbot_scheduler/requeue.py`) publishes it again. The advisory is a core NATS message and can be missed, so
the sweep also removes a request that sits at or below the runners consumer's ack floor: acked
requests leave a work queue at once, so one still there below the floor ran out of deliveries.

The user reads why the run was lost, in the language of the run's message (`lost_message`): a
database outage when the run's last event is its runner's `db_unavailable` warning (it left the run
for redelivery and the deliveries ran out before the database was back: issue 42, fault seed 4204),
else that its runner stopped.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from datetime import timedelta

from nats.js.errors import NotFoundError
from sqlalchemy import select

from zcbot_core.agent.lang import say, user_language
from zcbot_core.bus import BusDecodeError, decode, encode
from zcbot_core.bus import events as ev
from zcbot_core.bus.topology import kv_bucket
from zcbot_core.db.models import Message
from zcbot_core.platform.service import Runtime
from zcbot_core.platform.worker import periodic
from zcbot_core.runstate import sql
from zcbot_core.runstate.status import RunOutcome, RunStatus
from zcbot_core.runstate.transitions import continue_after_end, now, promote_waiting, reap

log = logging.getLogger(__name__)
LIVENESS_INTERVAL = 5.0
REAP_INTERVAL = 15.0
QUEUED_GRACE = timedelta(seconds=60)


async def lost_message(rt: Runtime, task_id: str, run_id: str) -> str:
    """What a reaped run's user reads (see the module docstring)."""
    async with rt.autocommit.connect() as conn:
        asked = (await conn.execute(
            select(Message.payload).where(Message.task_id == task_id, Message.run_id == run_id,
                                          Message.payload["role"].astext == "user")
            .order_by(Message.idx.desc()).limit(1))).scalar()
    lang = user_language([asked] if isinstance(asked, dict) else [])
    try:
        last = await rt.js.get_last_msg(rt.topo.events_stream, rt.topo.event_subject(task_id))
        event = decode(last.data or b"", ev.RunEvent)
    except (NotFoundError, BusDecodeError):
        event = None
    outage = isinstance(event, ev.Warn) and event.run_id == run_id and event.code == ev.DB_UNAVAILABLE
    return say("db_outage_lost_error" if outage else "run_lost_error", lang)


def liveness_key(runner_id: str) -> str:
    return "runner-" + "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in runner_id)


async def register_liveness(rt: Runtime, runner_id: str, stop: asyncio.Event) -> None:
    key = liveness_key(runner_id)

    async def refresh() -> None:
        kv = await kv_bucket(rt.js, rt.topo.leases_bucket)
        await kv.put(key, b"alive")

    await periodic(stop, LIVENESS_INTERVAL, refresh, "liveness refresh")
    try:
        kv = await kv_bucket(rt.js, rt.topo.leases_bucket)
        await kv.delete(key)
    except Exception:
        pass


async def drop_exhausted(rt: Runtime, msg: object) -> None:
    """Max-deliveries advisory handler: delete the exhausted run request from the runs stream."""
    try:
        seq = int(json.loads(msg.data)["stream_seq"])  # type: ignore[attr-defined]
    except (ValueError, KeyError, TypeError):
        return
    try:
        await rt.js.delete_msg(rt.topo.runs_stream, seq)
        log.warning("run request exhausted its deliveries; removed it so the reaper can end the run",
                    extra={"stream_seq": seq})
    except NotFoundError:
        pass  # another runner removed it already
    except Exception as exc:
        log.warning("could not remove an exhausted run request", extra={"stream_seq": seq, "error": repr(exc)})


class Reaper:
    def __init__(self, rt: Runtime, runner_id: str | None = None,
                 executing: Callable[[str, str], bool] | None = None) -> None:
        self.rt = rt
        self.runner_id = runner_id
        self.executing = executing  # (task_id, run_id) -> is this runner executing it right now?

    async def _owner_alive(self, owner: str | None) -> bool:
        if not owner:
            return False
        kv = await kv_bucket(self.rt.js, self.rt.topo.leases_bucket)
        try:
            entry = await kv.get(liveness_key(owner))
        except Exception:  # KeyNotFoundError / KeyDeletedError
            return False
        return entry is not None and entry.value == b"alive"

    async def _ack_floor(self) -> int:
        """The runners consumer's ack floor (stream sequence); 0 when it cannot be read (then every
        request still in the stream counts as queued)."""
        try:
            info = await self.rt.js.consumer_info(self.rt.topo.runs_stream, self.rt.topo.runners_consumer)
        except Exception as exc:
            log.warning("could not read the runners consumer", extra={"error": repr(exc)})
            return 0
        return int(info.ack_floor.stream_seq or 0) if info.ack_floor is not None else 0

    async def _still_queued(self, task_id: str, ack_floor: int) -> bool:
        """`ack_floor` read before the request: a request acked since then is gone (not queued); one
        published since then lies above it (queued)."""
        try:
            request = await self.rt.js.get_last_msg(self.rt.topo.runs_stream, self.rt.topo.run_subject(task_id))
        except NotFoundError:
            return False
        if int(request.seq) > ack_floor:
            return True  # waiting for a delivery, or delivered and not yet acked
        try:  # below the floor and not acked: its deliveries ran out, and the advisory was missed
            await self.rt.js.delete_msg(self.rt.topo.runs_stream, int(request.seq))
        except NotFoundError:
            pass
        log.warning("removed a run request that ran out of deliveries", extra={"task_id": task_id, "stream_seq": request.seq})
        return False

    async def sweep(self) -> int:
        async with self.rt.sessions() as session:
            rows = (await session.execute(sql.REAP_CANDIDATES, {"reap_queued_before": now() - QUEUED_GRACE})).all()
        reaped = 0
        ack_floor = await self._ack_floor() if rows else 0
        for row in rows:
            if await self._still_queued(row.task_id, ack_floor):
                continue
            if row.run_status == RunStatus.QUEUED:
                # Never claimed, its request gone (exhausted and removed just above, or lost): the
                # scheduler's sweep publishes it again (PostgreSQL is the truth; it holds the grant
                # key). Reaping it here would throw away a run that can still run.
                continue
            if row.run_status != RunStatus.QUEUED and await self._owner_alive(row.run_owner):
                mine = self.runner_id is not None and row.run_owner == self.runner_id
                if not mine or self.executing is None or self.executing(row.task_id, row.run_id):
                    continue
            message = await lost_message(self.rt, row.task_id, row.run_id)
            outcome = await reap(self.rt.sessions, self.rt.js, self.rt.topo, task_id=row.task_id, run_id=row.run_id,
                                 seen_status=row.run_status, error=message)
            if outcome is not None:
                reaped += 1
                subject = self.rt.topo.event_subject(row.task_id)
                await self.rt.js.publish(subject, encode(ev.ErrorEvent(run_id=row.run_id, msg=message, code="lost")))
                await self.rt.js.publish(subject, encode(ev.Done(run_id=row.run_id, status=RunOutcome.ERROR.value)),
                                         headers={"Nats-Msg-Id": ev.done_msg_id(row.run_id)})
                log.warning("reaped lost run", extra={"task_id": row.task_id, "run_id": row.run_id})
                # Its next enqueued message runs, as after any end (the waiting runs: just below).
                await continue_after_end(self.rt.autocommit, self.rt.js, self.rt.topo, outcome, max_active=None,
                                         retry_seconds=self.rt.settings.zcbot_run_publish_retry_seconds)
        await self._start_waiting()
        return reaped

    async def _start_waiting(self) -> None:
        """Users with waiting runs and a free slot (a reaped run, a runner that died before it started
        them, a publish that failed): their oldest waiting runs start."""
        async with self.rt.autocommit.connect() as conn:
            users = (await conn.execute(sql.USERS_WAITING)).scalars().all()
        for user_id in users:
            await promote_waiting(self.rt.autocommit, self.rt.js, self.rt.topo, user_id,
                                  self.rt.settings.zcbot_max_runs_per_user)

    async def loop(self, stop: asyncio.Event) -> None:
        await periodic(stop, REAP_INTERVAL, self.sweep, "reaper sweep", first_now=False)
