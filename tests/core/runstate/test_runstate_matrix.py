"""The run state machine's transition matrix (`runstate.matrix`, issue 34), table-driven over every
status x every event against the real PostgreSQL and NATS: each case puts a task in the status through
the real transitions (a second task of the user holds one slot), applies the event through the real
code (the entry points, a simulated runner on the real runners consumer, the real reaper and requeue
sweeps), and checks the status and effects `MATRIX` names, then the invariants (`runstate.invariants`).

Variants: a message enqueued behind the run (where a run is active), and a free slot of the user
(where a slot decides: no run, or a waiting one)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.helpers.runstate import RunHarness
from zcbot_core.bus import CancelRequest, RunRequest, decode
from zcbot_core.bus.topology import kv_bucket
from zcbot_core.platform.config import Settings, get_settings
from zcbot_core.platform.service import close_runtime, open_runtime
from zcbot_core.runstate import RunStatus
from zcbot_core.runstate import transitions as runs
from zcbot_core.runstate.claim import claim_run
from zcbot_core.runstate.matrix import MATRIX, Effect, Event, Step
from zcbot_core.runstate.status import COUNTED
from zcbot_scheduler.requeue import MAX_REQUEUES

S = RunStatus
MAX_WAITING = 5
ROOMY = 10  # a cap no case reaches: for arranging


@pytest.fixture(scope="module")
async def harness(module_settings_env: dict[str, str]) -> AsyncIterator[RunHarness]:
    """One runtime for the module (a case is a fresh user): a case costs a few round trips, not a database."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in module_settings_env.items():
            mp.setenv(key, value)
        get_settings.cache_clear()
        rt = await open_runtime("runstate-matrix", Settings())
        get_settings.cache_clear()
    h = RunHarness(rt)
    await h.start()
    try:
        yield h
    finally:
        await close_runtime(rt)


@dataclass
class Case:
    h: RunHarness
    user: str
    task: str
    blocker: str

    async def row(self) -> Any:
        return await self.h.task(self.task)


async def arrange(h: RunHarness, status: RunStatus, pending: bool) -> Case:
    """A task of a fresh user in `status` (a message enqueued behind it when `pending`), beside another
    task of the user running (one slot held)."""
    case = Case(h, f"u{secrets.token_hex(4)}", f"t{secrets.token_hex(4)}", f"b{secrets.token_hex(4)}")
    for task in (case.task, case.blocker):
        await h.add_task(case.user, task)
    blocker = await h.submit(case.user, case.blocker, "busy", "reject", max_active=ROOMY)
    await h.pull()
    assert await h.claim(blocker.run_id, "runner-b") is not None
    if status == S.WAITING:
        await h.submit(case.user, case.task, "first", "reject", max_active=1, max_waiting=MAX_WAITING)
    elif status != S.IDLE:
        first = await h.submit(case.user, case.task, "first", "reject", max_active=ROOMY)
        if status in (S.RUNNING, S.CANCELLING, S.ERROR):
            await h.pull()
            assert await h.claim(first.run_id, "runner-a") is not None
        if status == S.ERROR:
            await h.finish(case.task, "error", max_active=ROOMY)
        if status == S.CANCELLING:
            await h.cancel(case.user, case.task, max_active=ROOMY)
    if pending:
        assert (await h.submit(case.user, case.task, "behind", "enqueue", max_active=ROOMY)).status == "pending"
    row = await case.row()
    assert row.run_status == status and len(row.pending_inputs) == int(pending), row
    return case


async def apply(case: Case, status: RunStatus, event: Event, cap: int) -> Any:
    """The event through the real code; its result (or the error it raised)."""
    h, row = case.h, await case.row()
    held = h.held.get(case.task)
    try:
        if event in (Event.SUBMIT_REJECT, Event.SUBMIT_ENQUEUE, Event.SUBMIT_INTERRUPT):
            mode = event.value.split(":")[1]
            return await h.submit(case.user, case.task, "new", mode, max_active=cap, max_waiting=MAX_WAITING)  # type: ignore[arg-type]
        if event == Event.CANCEL:
            return await h.cancel(case.user, case.task, max_active=cap)
        if event == Event.PROMOTE:
            return await h.promote(case.user, max_active=cap)
        if event == Event.CLAIM:
            if held is not None:  # a redelivery (handed back or its heartbeats lost): another runner takes it
                await h.hand_back(case.task)
            await h.pull()
            if row.run_id in h.deliveries:
                return await h.claim(row.run_id, "runner-c")
            stale = RunRequest(run_id=row.run_id or "stale-run", task_id=case.task, user_id=case.user, enqueued_at=0)
            return await claim_run(h.rt.autocommit, stale, "runner-c")  # a stale delivery: no claim
        if event in (Event.FINISH, Event.FAIL):
            outcome = "error" if event == Event.FAIL else ("cancelled" if status == S.CANCELLING else "ok")
            if held is not None:
                return await h.finish(case.task, outcome, max_active=cap)
            return await runs.end_run(h.rt.autocommit, h.rt.sessions, h.rt.js, h.rt.topo, task_id=case.task,
                                      run_id=row.run_id or "no-run", status=outcome, error=None, timings={},
                                      owner="runner-a")
        if event == Event.REAP:
            if held is not None:  # its runner is gone, and its request with it
                await h.die(case.task)
            elif status == S.QUEUED:  # its request lost again and again: the requeue sweep gives up
                await h.pull()
                await h.lose_request(row.run_id)
                await h.requeue(max_active=cap)  # published again ...
                h.sweepers[cap].requeued[row.run_id] = MAX_REQUEUES
                await h.pull()
                await h.lose_request(row.run_id)  # ... and lost once more
                return await h.requeue(max_active=cap)
            return await h.reap(max_active=cap)
        if event == Event.HAND_BACK:
            if held is not None:
                await h.hand_back(case.task)
                await h.pull()
                return row.run_id in h.deliveries
            return None
    except (runs.RunConflict, runs.NothingToCancel) as exc:
        return exc
    raise AssertionError(f"no way to apply {event}")


def expected_status(step: Step, status: RunStatus, event: Event, *, pending: bool, slot_free: bool) -> RunStatus:
    to = step.outcome(status, pending=pending, slot_free=slot_free)
    if event == Event.REAP:  # the reaper's sweep ends by giving free slots to waiting runs
        to = MATRIX[(to, Event.PROMOTE)].outcome(to, pending=False, slot_free=slot_free)
    return to


CASES = [
    pytest.param(status, event, pending, slot_free, id=f"{status}-{event}{'-pending' if pending else ''}"
                 f"{'-slot-free' if slot_free else ''}")
    for status in RunStatus for event in Event
    for pending in ((False,) if status in (S.IDLE, S.ERROR) else (False, True))
    for slot_free in ((False, True) if status in (S.IDLE, S.ERROR, S.WAITING) else (False,))
]


@pytest.mark.parametrize(("status", "event", "pending", "slot_free"), CASES)
async def test_every_status_by_every_event(harness: RunHarness, status: RunStatus, event: Event, pending: bool,
                                           slot_free: bool) -> None:
    h = harness
    case = await arrange(h, status, pending)
    before = await case.row()
    stored_before = await h.stored_runs(case.task)
    counted = 1 + (status in COUNTED)  # the blocker and, when it holds one, this run
    cap = counted + slot_free
    step = MATRIX[(status, event)]
    result = await apply(case, status, event, cap)
    after = await case.row()
    want = expected_status(step, status, event, pending=pending, slot_free=slot_free)
    assert after.run_status == want, (result, after)

    if step.refused is not None:
        assert isinstance(result, step.refused), result
        assert after == before and await h.stored_runs(case.task) == stored_before
    elif not step.applies:
        if event != Event.REAP:  # (the reaper's promotion is checked by the status above)
            assert (after.run_status, after.run_id, after.run_owner, after.pending_inputs) == (
                before.run_status, before.run_id, before.run_owner, before.pending_inputs), result
        assert not isinstance(result, Exception), result
    await check_effects(case, step, event, before, after, result, pending)
    settled = not (want == S.WAITING and slot_free)  # a free slot is given at the next end or sweep
    assert await h.violations(user_id=case.user, max_active=cap, max_waiting=MAX_WAITING, settled=settled) == []


async def check_effects(case: Case, step: Step, event: Event, before: Any, after: Any, result: Any,
                        pending: bool) -> None:
    h, effects = case.h, step.effects
    answers = dict(await h.answers(case.task))
    old = before.run_id
    old_pending = [p["run_id"] for p in before.pending_inputs]
    new_run = getattr(result, "run_id", None) if event.value.startswith("submit") else None
    if Effect.ENDS_RUN in effects:
        assert old in answers, answers  # answered
        said = {Event.CANCEL: "cancelled", Event.SUBMIT_INTERRUPT: "cancelled", Event.FAIL: "error",
                Event.REAP: "error", Event.FINISH: "cancelled" if before.run_status == S.CANCELLING else "ok"}
        assert answers[old] == said[event], answers
        if event in (Event.CANCEL, Event.SUBMIT_INTERRUPT):  # a waiting run: no runner writes its history
            history = await h.history(case.task)
            asked = max(i for i, (run, role, _) in enumerate(history) if run == old and role == "user")
            assert history[asked + 1] == (old, "assistant", "cancelled"), history  # answered in history too
    elif old is not None and before.run_status != S.ERROR:  # (an errored run was answered when it ended)
        assert old not in answers, answers
    if Effect.NEXT_INPUT in effects and (pending or Effect.PENDING_FRONT in effects):
        first = new_run if Effect.PENDING_FRONT in effects else old_pending[0]
        assert after.run_id == first and first in await h.stored_runs(case.task)
        rest = old_pending if Effect.PENDING_FRONT in effects else old_pending[1:]
        assert [p["run_id"] for p in after.pending_inputs] == rest
    elif Effect.PENDING_FRONT in effects:
        assert [p["run_id"] for p in after.pending_inputs] == [new_run, *old_pending]
    elif Effect.PENDING_BACK in effects:
        assert [p["run_id"] for p in after.pending_inputs] == [*old_pending, new_run]
        assert result.status == "pending" and result.position == len(old_pending) + 1
    if Effect.NEW_RUN in effects:
        assert after.run_id == new_run and new_run in await h.stored_runs(case.task)
        assert result.status == after.run_status
    if Effect.SIGNAL_CANCEL in effects:
        kv = await kv_bucket(h.rt.js, h.rt.topo.cancel_bucket)
        told = decode((await kv.get(h.rt.topo.kv_key(case.task))).value, CancelRequest)
        assert told.run_id == old
    if Effect.OWNER_SET in effects:
        assert after.run_owner == "runner-c" and after.run_id == old
    if Effect.REDELIVER in effects:
        assert result is True and after.run_owner == before.run_owner  # delivered again; the owner changes at its claim


# ---- the checker itself: each invariant, broken on purpose, is named -------------------------------

BROKEN = [
    pytest.param(S.IDLE, {"pending_inputs": [{"run_id": "x", "content": "c", "grant": ""}]}, "wait behind no run",
                 id="idle-with-pending"),
    pytest.param(S.ERROR, {"run_owner": "r-1"}, "an owner (r-1) without a run", id="error-with-owner"),
    pytest.param(S.WAITING, {"run_request": None}, "waiting without its request", id="waiting-without-request"),
    pytest.param(S.WAITING, {"run_queued_at": None}, "without a place in the FIFO", id="waiting-without-place"),
    pytest.param(S.QUEUED, {"run_id": "never-published"}, "its message is not stored", id="run-without-message"),
    pytest.param(S.RUNNING, {"run_owner": None}, "running without an owner", id="running-without-owner"),
    # The interrupt bug: a waiting run moved to `cancelling`, on no runner.
    pytest.param(S.WAITING, {"run_status": "cancelling"}, "its request is not in the runs stream",
                 id="cancelling-never-published"),
    pytest.param(S.QUEUED, {"pending_inputs": [{"run_id": "a", "content": "c", "grant": ""},
                                               {"run_id": "a", "content": "d", "grant": ""}]},
                 "two waiting messages share a run id", id="pending-duplicates"),
    pytest.param(S.QUEUED, {"pending_inputs": [{"run_id": "a"}]}, "lacks content, grant", id="pending-incomplete"),
]


@pytest.mark.parametrize(("status", "columns", "says"), BROKEN)
async def test_the_invariant_checker_names_each_broken_invariant(harness: RunHarness, status: RunStatus,
                                                                 columns: dict[str, Any], says: str) -> None:
    from sqlalchemy import update

    from zcbot_core.db.models import Task

    case = await arrange(harness, status, pending=False)
    assert await harness.violations(user_id=case.user, max_active=1 + (status in COUNTED)) == []
    async with harness.rt.sessions() as s, s.begin():
        await s.execute(update(Task).where(Task.task_id == case.task).values(**columns))
    found = await harness.violations(user_id=case.user)
    assert any(says in v and case.task in v for v in found), found


async def test_the_invariant_checker_counts_each_users_slots(harness: RunHarness) -> None:
    case = await arrange(harness, S.WAITING, pending=False)  # the blocker holds the one slot; this run waits
    assert await harness.violations(user_id=case.user, max_active=1) == []
    # A slot frees (a cap of 2) and nobody gives it to the waiting run.
    assert await harness.violations(user_id=case.user, max_active=2) == [
        f"user {case.user}: 1 runs wait while 1 slots are free"]
    # More runs hold slots than the cap allows, and more wait than the FIFO's bound.
    other = f"o{secrets.token_hex(4)}"
    await harness.add_task(case.user, other)
    await harness.submit(case.user, other, "more", "reject", max_active=ROOMY)
    assert await harness.violations(user_id=case.user, max_active=1, max_waiting=0, settled=False) == [
        f"user {case.user}: 2 runs hold slots, over the cap of 1", f"user {case.user}: 1 runs wait, over the bound of 0"]
