"""The run state machine, model-based (issue 34): Hypothesis generates sequences of messages (every
`multitask` mode), cancels, runner claims, ends, failures, deaths and hand-backs, lost requests, reaper
and requeue sweeps and promotions, for random users, tasks and slot limits, against the real PostgreSQL
and NATS (`tests/helpers/runstate.RunHarness`). A model predicts every task's status, run and waiting
messages from `runstate.matrix`; after each step the database agrees with it and the invariants hold
(`runstate.invariants`, settled: no run waits while its user has a free slot). At the end every run is
let finish: then every message was answered (`done`) once, in the order the history holds them, none
is stranded, no task is stuck, and no slot is held.

Bounded for the suite (< 60 s); `ZCBOT_RUNSTATE_SOAK=1` runs a heavier setting (more and longer
sequences), `ZCBOT_RUNSTATE_EXAMPLES` / `ZCBOT_RUNSTATE_STEPS` set them exactly.

Over 400 lines on purpose: one model — its state, its rules and the end-of-sequence checks — that
Hypothesis drives as a whole; split, the rules would read the model's state across modules."""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.helpers.runstate import RunHarness
from zcbot_core.platform.config import Settings
from zcbot_core.platform.service import close_runtime, open_runtime
from zcbot_core.runstate import RunStatus, submit
from zcbot_core.runstate import transitions as runs
from zcbot_core.runstate.matrix import MATRIX, MULTITASK_EVENT, Effect, Event
from zcbot_core.runstate.status import COUNTED
from zcbot_scheduler.requeue import MAX_REQUEUES

S = RunStatus
SOAK = os.environ.get("ZCBOT_RUNSTATE_SOAK") == "1"
EXAMPLES = int(os.environ.get("ZCBOT_RUNSTATE_EXAMPLES") or (300 if SOAK else 25))
STEPS = int(os.environ.get("ZCBOT_RUNSTATE_STEPS") or (60 if SOAK else 30))
MODES = ("reject", "enqueue", "interrupt")


@dataclass
class ModelTask:
    user: str
    status: RunStatus = S.IDLE
    run: str | None = None
    owner: str | None = None  # the last runner to claim the run
    pending: list[str] = field(default_factory=list)
    place: int | None = None  # the order of its place in the user's FIFO, while waiting
    history: list[str] = field(default_factory=list)  # runs whose message is stored, in order
    answers: list[tuple[str, str]] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)


class RunStateMachine(RuleBasedStateMachine):
    loop: asyncio.AbstractEventLoop
    harness: RunHarness
    reached: Counter[tuple[str, str, bool]]  # (status, event, a message waited behind) over all examples

    def __init__(self) -> None:
        super().__init__()
        self.tasks: dict[str, ModelTask] = {}
        self.users: list[str] = []
        self.cap = self.max_waiting = 1
        self.places = itertools.count()
        self.lost: set[str] = set()  # queued runs whose request is gone
        self.requeued: dict[str, int] = {}  # queued runs published again by the requeue sweep -> times
        self.dead: set[str] = set()  # tasks whose run's runner died with its request
        self.contents = itertools.count()
        self.runners = itertools.count()
        self.h = self.harness
        self.example = f"{secrets.token_hex(3)}{next(EXAMPLE_NUMBERS):04d}"
        self.h.held.clear()  # (a failed example's leftovers are not this one's)
        self.h.deliveries.clear()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    # ---- the model --------------------------------------------------------------------------------
    def counted(self, user: str) -> int:
        return sum(1 for t in self.tasks.values() if t.user == user and t.status in COUNTED)

    def waiting(self, user: str) -> list[str]:
        found = [(t.place, tid) for tid, t in self.tasks.items() if t.user == user and t.status == S.WAITING]
        return [tid for _, tid in sorted(found)]

    def promote(self, user: str) -> None:
        for tid in self.waiting(user)[:max(self.cap - self.counted(user), 0)]:
            self.tasks[tid].status, self.tasks[tid].place = S.QUEUED, None

    def next_input(self, tid: str, *, held_slot: bool) -> None:
        """`transitions.start_next_input`, as the model sees it (the run already ended)."""
        task = self.tasks[tid]
        if not task.pending:
            task.place = None
            return
        task.run = task.pending.pop(0)
        task.history.append(task.run)
        task.owner = None
        task.status = S.QUEUED if held_slot else S.WAITING
        if held_slot:
            task.place = None

    def end(self, tid: str, status: str, *, held_slot: bool) -> None:
        task = self.tasks[tid]
        assert task.run is not None
        task.answers.append((task.run, status))
        task.status = RunOutcomeStatus[status]
        task.owner = None
        self.dead.discard(tid)
        self.lost.discard(task.run)
        self.next_input(tid, held_slot=held_slot)

    def stop(self, tid: str) -> None:
        """The run goes `cancelling`; one whose request was lost is then the reaper's (not the requeue's)."""
        task = self.tasks[tid]
        task.status = S.CANCELLING
        if task.run in self.lost:
            self.lost.discard(task.run)
            self.dead.add(tid)

    # ---- the steps --------------------------------------------------------------------------------
    @initialize(users=st.integers(1, 2), tasks_per_user=st.integers(2, 3), cap=st.sampled_from((1, 1, 2)),
                max_waiting=st.integers(1, 2))
    def setup(self, users: int, tasks_per_user: int, cap: int, max_waiting: int) -> None:
        self.cap, self.max_waiting = cap, max_waiting
        # Ids unique to this example and ordered as created (the draws pick among sorted ids: the same
        # draws, the same sequence).
        for u in range(users):
            user = f"u{self.example}-{u}"
            self.users.append(user)
            for t in range(tasks_per_user):
                tid = f"t{self.example}-{u}-{t}"
                self.run(self.h.add_task(user, tid))
                self.tasks[tid] = ModelTask(user=user)

    # Three rules, each drawing one of its actions: Hypothesis's swarm testing leaves rules out of whole
    # examples, and a sequence needs users and runners both to reach the edges (a message behind a
    # waiting run, then a cancel).
    @rule(data=st.data())
    def a_user_acts(self, data: st.DataObject) -> None:
        action = data.draw(st.sampled_from(("send", "send_behind_a_run", "cancel")), label="user action")
        getattr(self, action)(data)

    @precondition(lambda self: self.h.held or self.deliverable())
    @rule(data=st.data())
    def a_runner_acts(self, data: st.DataObject) -> None:
        actions = (["claim", "claim", "lose_request"] if self.deliverable() else []) + (
            ["finish", "finish", "runner_dies", "hand_back"] if self.h.held else [])
        getattr(self, data.draw(st.sampled_from(actions), label="runner action"))(data)

    @precondition(lambda self: self.dead or self.lost or self.any_waiting())
    @rule(data=st.data())
    def a_sweep_runs(self, data: st.DataObject) -> None:
        actions = (["reaper_sweeps"] if self.dead else []) + (["requeue_sweeps"] if self.lost else []) + (
            ["promote_users"] if self.any_waiting() else [])
        getattr(self, data.draw(st.sampled_from(actions), label="sweep"))(data)

    def any_waiting(self) -> bool:
        return any(t.status == S.WAITING for t in self.tasks.values())

    def _busy(self, data: st.DataObject) -> str | None:
        """A task with an active run, waiting ones first (the edges are there), or None."""
        waiting = sorted(t for t, task in self.tasks.items() if task.status == S.WAITING)
        active = sorted(t for t, task in self.tasks.items() if task.status in COUNTED)
        if not waiting and not active:
            return None
        prefer_waiting = data.draw(st.sampled_from((True, True, True, False)), label="waiting first")
        choices = waiting if waiting and (not active or prefer_waiting) else active
        return data.draw(st.sampled_from(choices), label="task")

    def send(self, data: st.DataObject) -> None:
        mode = data.draw(st.sampled_from(MODES), label="mode")
        self._send(data.draw(st.sampled_from(sorted(self.tasks)), label="task"), mode)

    def send_behind_a_run(self, data: st.DataObject) -> None:
        mode = data.draw(st.sampled_from(("enqueue", "interrupt")), label="mode")
        tid = self._busy(data)
        if tid is not None:
            self._send(tid, mode)

    def _send(self, tid: str, mode: str) -> None:
        task = self.tasks[tid]
        content = f"m{next(self.contents)}"
        try:
            result: Any = self.run(self.h.submit(task.user, tid, content, mode,  # type: ignore[arg-type]
                                                 max_active=self.cap, max_waiting=self.max_waiting))
        except (runs.RunConflict, runs.RunQuotaExceeded) as exc:
            result = exc
        step = MATRIX[(task.status, MULTITASK_EVENT[mode])]
        self.reached[(task.status.value, MULTITASK_EVENT[mode].value, bool(task.pending))] += 1
        if step.refused is not None:
            assert isinstance(result, step.refused), result
            return
        if task.status in (S.IDLE, S.ERROR):
            if self.counted(task.user) >= self.cap and len(self.waiting(task.user)) >= self.max_waiting:
                assert isinstance(result, submit.UserQueueFull), result
                return
            assert isinstance(result, submit.SubmitResult), result
            task.run, task.owner = result.run_id, None
            task.history.append(result.run_id)
            if self.counted(task.user) >= self.cap:
                task.status, task.place = S.WAITING, next(self.places)
                assert (result.status, result.position) == ("waiting", len(self.waiting(task.user))), result
            else:
                task.status = S.QUEUED
                assert result.status == "queued", result
            task.accepted.append(result.run_id)
            return
        if len(task.pending) >= runs.MAX_PENDING_INPUTS:
            assert isinstance(result, runs.RunQuotaExceeded), result
            return
        assert isinstance(result, submit.SubmitResult), result
        task.accepted.append(result.run_id)
        if Effect.ENDS_RUN in step.effects:  # an interrupt of a waiting run: it takes the run's place
            task.pending.insert(0, result.run_id)
            self.end(tid, "cancelled", held_slot=False)
            self.promote(task.user)
            assert result.status == task.status, (result, task)
            return
        if Effect.PENDING_FRONT in step.effects:
            task.pending.insert(0, result.run_id)
        else:
            task.pending.append(result.run_id)
        if step.to == S.CANCELLING:
            self.stop(tid)
        assert (result.status, result.position) == ("pending", task.pending.index(result.run_id) + 1), result

    def cancel(self, data: st.DataObject) -> None:
        tid = self._busy(data) if data.draw(st.sampled_from((True, True, True, False)), label="a busy task") else None
        tid = tid or data.draw(st.sampled_from(sorted(self.tasks)), label="task")
        task = self.tasks[tid]
        try:
            result: Any = self.run(self.h.cancel(task.user, tid, max_active=self.cap))
        except runs.NothingToCancel as exc:
            result = exc
        step = MATRIX[(task.status, Event.CANCEL)]
        self.reached[(task.status.value, Event.CANCEL.value, bool(task.pending))] += 1
        if step.refused is not None:
            assert isinstance(result, step.refused), result
            return
        assert result == (task.run, task.status == S.WAITING), result
        if Effect.ENDS_RUN in step.effects:
            self.end(tid, "cancelled", held_slot=False)
            self.promote(task.user)
        else:
            self.stop(tid)

    def _deliveries(self) -> list[str]:
        """The delivered run ids, by task (run ids are random: the draws pick by a stable order)."""
        delivered = self.run(self.h.pull())
        return sorted(delivered, key=lambda run_id: (self.h.task_of(delivered[run_id]), run_id))

    def deliverable(self) -> bool:
        """A request JetStream can deliver (queued, cancelled before its claim, or handed back)."""
        return any(t.status in COUNTED and tid not in self.h.held and tid not in self.dead and t.run not in self.lost
                   for tid, t in self.tasks.items())

    def claim(self, data: st.DataObject) -> None:
        runs_delivered = self._deliveries()
        if not runs_delivered:
            return
        run_id = data.draw(st.sampled_from(runs_delivered), label="delivery")
        owner = f"runner-{next(self.runners)}"
        claimed = self.run(self.h.claim(run_id, owner))
        current = {t.run: tid for tid, t in self.tasks.items() if t.status in COUNTED}
        if run_id not in current:  # a stale delivery of a run that is over
            assert claimed is None
            return
        assert claimed is not None, run_id
        task = self.tasks[current[run_id]]
        task.owner = owner
        task.status = MATRIX[(task.status, Event.CLAIM)].to or task.status
        assert claimed.cancelling == (task.status == S.CANCELLING)

    def _held(self, data: st.DataObject) -> str | None:
        held = sorted(self.h.held)
        return data.draw(st.sampled_from(held), label="held") if held else None

    def finish(self, data: st.DataObject) -> None:
        outcome = data.draw(st.sampled_from(["ok", "error", "stopped"]), label="outcome")
        tid = self._held(data)
        if tid is None:
            return
        task = self.tasks[tid]
        outcome = "cancelled" if task.status == S.CANCELLING and outcome != "error" else outcome
        ended = self.run(self.h.finish(tid, outcome, max_active=self.cap))
        assert ended.finished
        self.end(tid, outcome, held_slot=True)
        self.promote(task.user)

    def runner_dies(self, data: st.DataObject) -> None:
        tid = self._held(data)
        if tid is not None:
            self.run(self.h.die(tid))
            self.dead.add(tid)

    def hand_back(self, data: st.DataObject) -> None:
        tid = self._held(data)
        if tid is not None:
            self.run(self.h.hand_back(tid))

    def lose_request(self, data: st.DataObject) -> None:
        """A delivered request never claimed, then gone (its deliveries ran out, JetStream lost it)."""
        runs_delivered = self._deliveries()
        if not runs_delivered:
            return
        run_id = data.draw(st.sampled_from(runs_delivered), label="delivery")
        self.run(self.h.lose_request(run_id))
        for tid, task in self.tasks.items():
            if task.run == run_id and task.status == S.QUEUED:
                self.lost.add(run_id)
            elif task.run == run_id and task.status in COUNTED:  # claimed before (handed back), or cancelled
                self.dead.add(tid)

    def reaper_sweeps(self, data: st.DataObject | None = None) -> None:
        self.run(self.h.reap(max_active=self.cap))
        for tid in sorted(self.dead):
            self.end(tid, "error", held_slot=True)
        for user in self.users:
            self.promote(user)

    def requeue_sweeps(self, data: st.DataObject | None = None) -> None:
        queued = {t.run for t in self.tasks.values() if t.status == S.QUEUED}
        self.run(self.h.requeue(max_active=self.cap))
        for run_id in sorted(self.lost):
            tid = next(t for t, task in self.tasks.items() if task.run == run_id)
            times = self.requeued.get(run_id, 0)
            if times >= MAX_REQUEUES:  # given up: as a reap
                self.end(tid, "error", held_slot=True)
                self.promote(self.tasks[tid].user)
            else:  # published again
                self.lost.discard(run_id)
                self.requeued[run_id] = times + 1
        for run_id in [r for r in self.requeued if r not in queued]:  # started or ended: the sweep forgets it
            del self.requeued[run_id]

    def promote_users(self, data: st.DataObject) -> None:
        user = data.draw(st.sampled_from(self.users), label="user")
        self.run(self.h.promote(user, max_active=self.cap))
        self.promote(user)

    # ---- checks -----------------------------------------------------------------------------------
    @invariant()
    def database_agrees_with_the_model(self) -> None:
        if not self.tasks:
            return
        rows = self.run(self.h.tasks(list(self.tasks)))
        for tid, task in self.tasks.items():
            row = rows[tid]
            got = (row.run_status, row.run_id, [p["run_id"] for p in row.pending_inputs])
            assert got == (task.status, task.run, task.pending), (tid, got, task)
            if task.owner is not None:
                assert row.run_owner == task.owner, (tid, row.run_owner, task)
        # (A request lost on purpose breaks "published" until a sweep repairs it: the bus is read otherwise.)
        found = self.run(self.h.violations(user_id=self.users, max_active=self.cap, max_waiting=self.max_waiting,
                                           bus=not (self.lost or self.dead)))
        assert found == [], found

    def teardown(self) -> None:
        if not self.tasks:
            return
        self.drain()
        for tid, task in self.tasks.items():
            assert task.status in (S.IDLE, S.ERROR) and not task.pending, (tid, task)
            stored = self.run(self.h.stored_runs(tid))
            answers = self.run(self.h.answers(tid))
            assert stored == task.history, (tid, stored, task.history)
            # Every stored message answered once, in history order; no accepted message stranded.
            assert [run for run, _ in answers] == stored, (tid, answers, stored)
            assert answers == task.answers, (tid, answers, task.answers)
            assert set(task.accepted) <= set(stored), (tid, task.accepted, stored)
        for user in self.users:
            assert self.counted(user) == 0
            found = self.run(self.h.violations(user_id=user, max_active=0, max_waiting=0))
            assert found == [], found

    def drain(self) -> None:
        """Every run is let finish: runners claim what is delivered and end it, the sweeps clear the rest."""
        for _ in range(40):
            if all(t.status in (S.IDLE, S.ERROR) and not t.pending for t in self.tasks.values()):
                return
            for run_id in self._deliveries():
                if any(t.run == run_id and t.status in COUNTED for t in self.tasks.values()):
                    self.claim_run(run_id)
            for tid in sorted(self.h.held):
                if tid in self.tasks:
                    outcome = "cancelled" if self.tasks[tid].status == S.CANCELLING else "ok"
                    self.run(self.h.finish(tid, outcome, max_active=self.cap))
                    self.end(tid, outcome, held_slot=True)
                    self.promote(self.tasks[tid].user)
            if self.dead:
                self.reaper_sweeps()
            if self.lost:
                self.requeue_sweeps()
        raise AssertionError(f"runs still active after the drain: {self.tasks}")

    def claim_run(self, run_id: str) -> None:
        owner = f"runner-{next(self.runners)}"
        assert self.run(self.h.claim(run_id, owner)) is not None
        task = next(t for t in self.tasks.values() if t.run == run_id)
        task.owner = owner
        task.status = MATRIX[(task.status, Event.CLAIM)].to or task.status


EDGES = [("waiting", "submit:interrupt", False), ("waiting", "cancel", True), ("waiting", "submit:enqueue", False),
         ("running", "submit:interrupt", False), ("cancelling", "submit:enqueue", True), ("queued", "cancel", False)]
EXAMPLE_NUMBERS = itertools.count()
RunOutcomeStatus = {"ok": S.IDLE, "stopped": S.IDLE, "cancelled": S.IDLE, "error": S.ERROR}


@pytest.mark.timeout(0 if SOAK else 600)  # ~40 s alone; a machine shared by several suites may take longer
def test_the_run_state_machine_against_its_model(settings: Settings) -> None:
    loop = asyncio.new_event_loop()
    rt = loop.run_until_complete(open_runtime("runstate-model", settings))
    harness = RunHarness(rt)
    loop.run_until_complete(harness.start())
    RunStateMachine.loop, RunStateMachine.harness, RunStateMachine.reached = loop, harness, Counter()
    try:
        run_state_machine_as_test(RunStateMachine, settings=settings_for_the_suite())
        # The sequences reached the edges issue 34 is about (not only each feature's first path).
        reached = RunStateMachine.reached
        for edge in EDGES:
            assert reached[edge], (edge, "\n".join(map(str, sorted(reached.items()))))
    finally:
        loop.run_until_complete(close_runtime(rt))
        loop.close()


def settings_for_the_suite() -> Any:
    # Deterministic in the suite (the same sequences each run); the soak explores new ones every time.
    return settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, database=None,
                    derandomize=not SOAK, suppress_health_check=list(HealthCheck))
