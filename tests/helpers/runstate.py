"""A harness that drives the run state machine (`zcbot_core.runstate`) through its real transitions on
the test's PostgreSQL and NATS: the entry points' submit and cancel, and the runner's side played by the
test - it pulls the run requests from the real runners consumer, claims, ends (as `RunExecutor._finish`
does: the end, `done`, the ack, then `continue_after_end`), dies (its delivery terminated: the request
gone, no liveness key) or hands a run back (nak) - plus the real reaper and requeue sweeps. Used by
tests/core/runstate/test_runstate_matrix.py and test_runstate_stateful.py."""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass
from typing import Any

from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import DeliverPolicy
from nats.js.errors import NotFoundError
from sqlalchemy import select

from zcbot_core.bus import RunRequest, decode, encode
from zcbot_core.bus.codec import tag_of
from zcbot_core.bus.events import Done
from zcbot_core.db.models import Message, Task, User
from zcbot_core.platform.service import Runtime
from zcbot_core.runstate import invariants, submit
from zcbot_core.runstate import transitions as runs
from zcbot_core.runstate.claim import Claim, claim_run
from zcbot_runner.reaper import Reaper
from zcbot_scheduler.requeue import QueuedRunSweeper


@dataclass
class Held:
    run_id: str
    owner: str
    msg: Msg


def with_cap(rt: Runtime, max_active: int) -> Runtime:
    """The runtime seen by a service configured with this per-user cap (same connections)."""
    view = copy.copy(rt)
    view.settings = rt.settings.model_copy(update={"zcbot_max_runs_per_user": max_active})
    return view


class RunHarness:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.deliveries: dict[str, Msg] = {}  # run id -> a delivered request nobody claimed yet
        self.held: dict[str, Held] = {}  # task id -> the run a live (simulated) runner executes
        self.sweepers: dict[int, QueuedRunSweeper] = {}
        self._psub: Any = None
        self._handed_back: set[str] = set()  # naked: delivered again at once

    async def start(self) -> None:
        self._psub = await self.rt.js.pull_subscribe_bind(durable=self.rt.topo.runners_consumer,
                                                          stream=self.rt.topo.runs_stream)

    # ---- the entry points -------------------------------------------------------------------------
    async def add_task(self, user_id: str, task_id: str) -> None:
        async with self.rt.sessions() as s, s.begin():
            if await s.get(User, user_id) is None:
                s.add(User(user_id=user_id))
                await s.flush()
            s.add(Task(task_id=task_id, user_id=user_id, name=task_id, working_dir=task_id))

    async def submit(self, user_id: str, task_id: str, content: str, multitask: runs.Multitask, *, max_active: int,
                     max_waiting: int = 20) -> submit.SubmitResult:
        limits = submit.RunLimits(max_runs_per_user=max_active, max_waiting_per_user=max_waiting,
                                  publish_retry_seconds=2.0)
        return await submit.submit_message(self.rt.sessions, self.rt.js, self.rt.nc, self.rt.topo, user_id=user_id,
                                           task_id=task_id, content=content, multitask=multitask, limits=limits)

    async def cancel(self, user_id: str, task_id: str, *, max_active: int) -> tuple[str, bool]:
        return await runs.request_cancel(self.rt.sessions, self.rt.js, self.rt.nc, self.rt.topo, user_id=user_id,
                                         task_id=task_id, grant_key=self.rt.settings.zcbot_run_grant_key,
                                         max_active=max_active)

    async def promote(self, user_id: str, *, max_active: int) -> list[str]:
        return await runs.promote_waiting(self.rt.autocommit, self.rt.js, self.rt.topo, user_id, max_active)

    # ---- the runners' side ------------------------------------------------------------------------
    async def pull(self) -> dict[str, Msg]:
        """Every request JetStream delivers now (a redelivery of a held run replaces its message)."""
        # (A fetch of nothing waits its timeout out: fetched only when something is to come. A request the
        # server delivered to an earlier fetch's lingering pull after it returned waits in the client's
        # own queue, no longer counted as pending by the consumer: `pending_msgs`. A fetch that times out
        # while the consumer still counts messages pending is a slow machine: tried again until a deadline.)
        deadline = asyncio.get_running_loop().time() + 15.0
        while self._handed_back or self._psub.pending_msgs or (await self._psub.consumer_info()).num_pending:
            try:
                msgs = await self._psub.fetch(batch=64, timeout=1.0)
            except (NatsTimeoutError, asyncio.TimeoutError):
                if (await self._psub.consumer_info()).num_pending and asyncio.get_running_loop().time() < deadline:
                    continue
                self._handed_back.clear()
                return self.deliveries
            for msg in msgs:
                req = decode(msg.data, RunRequest)
                self._handed_back.discard(req.run_id)
                held = self.held.get(req.task_id)
                if held is not None and held.run_id == req.run_id:
                    held.msg = msg
                else:
                    self.deliveries[req.run_id] = msg
        return self.deliveries

    @staticmethod
    def task_of(msg: Msg) -> str:
        return decode(msg.data, RunRequest).task_id

    async def claim(self, run_id: str, owner: str) -> Claim | None:
        for _ in range(20):  # on a loaded machine the delivery may still be on its way (a lingering pull's)
            if run_id in self.deliveries:
                break
            await asyncio.sleep(0.1)
            await self.pull()
        msg = self.deliveries.pop(run_id)
        req = decode(msg.data, RunRequest)
        claim = await claim_run(self.rt.autocommit, req, owner)
        if claim is None:  # a stale delivery of a run that is over: acked away, as the runner does
            await msg.ack()
            return None
        self.held[req.task_id] = Held(run_id=req.run_id, owner=owner, msg=msg)
        return claim

    async def finish(self, task_id: str, status: str, *, max_active: int) -> runs.FinishOutcome:
        held = self.held.pop(task_id)
        error = "it failed" if status == "error" else None
        outcome = await runs.end_run(self.rt.autocommit, self.rt.sessions, self.rt.js, self.rt.topo, task_id=task_id,
                                     run_id=held.run_id, status=status, error=error, timings={}, owner=held.owner)
        if not outcome.finished:
            return outcome
        await self.rt.js.publish(self.rt.topo.event_subject(task_id), encode(Done(run_id=held.run_id, status=status)))
        await held.msg.ack()
        outcome.user_id = outcome.user_id or await self._user_of(task_id)
        await runs.continue_after_end(self.rt.autocommit, self.rt.js, self.rt.topo, outcome, max_active=max_active,
                                      retry_seconds=2.0)
        return outcome

    async def die(self, task_id: str) -> None:
        """The runner executing it is gone for good and so is its request (its deliveries ran out)."""
        await self.held.pop(task_id).msg.term()

    async def hand_back(self, task_id: str) -> None:
        """The runner stops without ending the run (a drain): JetStream delivers it again."""
        held = self.held.pop(task_id)
        await held.msg.nak()
        self._handed_back.add(held.run_id)

    async def lose_request(self, run_id: str) -> None:
        """A request delivered, never claimed, and gone (its deliveries ran out, or JetStream lost it)."""
        await self.deliveries.pop(run_id).term()

    async def reap(self, *, max_active: int) -> int:
        return await Reaper(with_cap(self.rt, max_active)).sweep()

    async def requeue(self, *, max_active: int) -> int:
        sweeper = self.sweepers.setdefault(max_active, QueuedRunSweeper(with_cap(self.rt, max_active), 0.0))
        return await sweeper.sweep()

    # ---- what the tests read ----------------------------------------------------------------------
    async def _user_of(self, task_id: str) -> str:
        async with self.rt.sessions() as s:
            return (await s.execute(select(Task.user_id).where(Task.task_id == task_id))).scalar_one()

    async def task(self, task_id: str) -> Any:
        return (await self.tasks([task_id]))[task_id]

    async def tasks(self, task_ids: list[str]) -> dict[str, Any]:
        async with self.rt.autocommit.connect() as conn:
            rows = await conn.execute(select(Task.__table__).where(Task.task_id.in_(task_ids)))
            return {row.task_id: row for row in rows}

    async def stored_runs(self, task_id: str) -> list[str]:
        """The run ids of the task's user messages, in history order."""
        async with self.rt.sessions() as s:
            rows = await s.execute(select(Message.run_id, Message.payload).where(Message.task_id == task_id)
                                   .order_by(Message.idx))
            return [run_id for run_id, payload in rows if payload.get("role") == "user" and run_id]

    async def history(self, task_id: str) -> list[tuple[str | None, str, str]]:
        """The task's stored messages in order: (run id, role, kind)."""
        async with self.rt.sessions() as s:
            rows = await s.execute(select(Message.run_id, Message.payload, Message.kind)
                                   .where(Message.task_id == task_id).order_by(Message.idx))
            return [(run_id, payload.get("role"), kind) for run_id, payload, kind in rows]

    async def answers(self, task_id: str) -> list[tuple[str, str]]:
        """Every `done` on the task's event stream, in order: (run id, status)."""
        subject = self.rt.topo.event_subject(task_id)
        try:
            last = (await self.rt.js.get_last_msg(self.rt.topo.events_stream, subject)).seq
        except NotFoundError:
            return []
        sub = await self.rt.js.subscribe(subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
        out: list[tuple[str, str]] = []
        try:
            while True:
                msg = await sub.next_msg(timeout=5)
                if tag_of(msg.data or b"") == Done.TAG:
                    done = decode(msg.data, Done)
                    out.append((done.run_id, done.status))
                if msg.metadata.sequence.stream >= last:
                    return out
        finally:
            await sub.unsubscribe()

    async def violations(self, *, user_id: str | list[str] | None = None, task_id: str | None = None, max_active: int | None = None,
                         max_waiting: int | None = None, settled: bool = True, bus: bool = True) -> list[str]:
        return await invariants.violations(self.rt.autocommit, user_id=user_id, task_id=task_id, max_active=max_active,
                                           max_waiting=max_waiting, settled=settled, js=self.rt.js if bus else None,
                                           topo=self.rt.topo)
