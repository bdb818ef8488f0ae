"""Submitting a message on real PostgreSQL: a task with no active run is submitted in one call
(`zcbot_submit_run_v1`, migration 0003), which must leave exactly what the submit transaction leaves,
refuse what it refuses without writing anything, and keep the per-user cap exact under concurrency."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from sqlalchemy import select, update

from zcbot_core.bus import decode
from zcbot_core.bus.events import Done
from zcbot_core.db.models import Message, Task, User
from zcbot_core.platform.service import Runtime
from zcbot_core.runstate import sql, submit
from zcbot_core.runstate import transitions as runs

# Columns a submit may set to the current time or a fresh id: compared as "set", not by value.
VOLATILE = {"task_id", "run_id", "run_queued_at", "updated_at", "created_at"}


async def add_task(rt: Runtime, task_id: str, user_id: str = "sub", messages: int = 0, **columns: Any) -> None:
    async with rt.sessions() as s, s.begin():
        if await s.get(User, user_id) is None:
            s.add(User(user_id=user_id))
            await s.flush()
        s.add(Task(task_id=task_id, user_id=user_id, name="a task", working_dir="w", **columns))
        await s.flush()
        for idx in range(messages):
            s.add(Message(task_id=task_id, idx=idx, kind="chat",
                          payload={"role": "user" if idx % 2 == 0 else "assistant", "content": f"m{idx}"}))


async def task_state(rt: Runtime, task_id: str) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    async with rt.sessions() as s:
        row = (await s.execute(select(Task.__table__).where(Task.task_id == task_id))).mappings().one()
        messages = (await s.execute(
            select(Message.idx, Message.kind, Message.payload, Message.run_id, Message.model_profile,
                   Message.tokens_in, Message.tokens_out)
            .where(Message.task_id == task_id).order_by(Message.idx))).all()
    return dict(row), [tuple(m) for m in messages]


def comparable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v is not None if k in VOLATILE else v) for k, v in row.items()}


async def send(rt: Runtime, task_id: str, *, one_call: bool, user_id: str = "sub", content: Any = "hello",
                 channel: str | None = None, multitask: runs.Multitask = "reject",
                 limits: submit.RunLimits | None = None) -> submit.SubmitResult:
    if one_call:
        return await submit.submit_message(rt.sessions, rt.js, rt.nc, rt.topo, user_id=user_id, task_id=task_id,
                                         content=content, channel=channel, multitask=multitask, limits=limits)
    events_tail = asyncio.ensure_future(asyncio.sleep(0, result=7))
    return await submit._submit_in_transaction(  # noqa: SLF001 - the reference path, for an idle task too
        rt.sessions, rt.js, rt.nc, rt.topo, events_tail, user_id=user_id, task_id=task_id, content=content,
        multitask=multitask, limits=limits or submit.RunLimits(), origin="web", scheduled_job_id=None,
        channel=channel, run_id=runs.new_run_id())


IDLE_TASKS = [
    pytest.param({}, 0, "hello", None, id="new-task"),
    pytest.param({}, 3, [{"type": "text", "text": "parts"}], None, id="history-list-content"),
    pytest.param({"run_status": "error", "run_error": "boom", "run_owner": "r-9", "run_timings": {"total": 1.0},
                  "run_id": "old"}, 2, "again", None, id="after-an-error"),
    pytest.param({"run_status": "idle", "channel": "wecom"}, 1, "from wecom", "wecom", id="channel-task"),
]


@pytest.mark.parametrize(("columns", "messages", "content", "channel"), IDLE_TASKS)
async def test_the_one_call_leaves_what_the_transaction_leaves(rt: Runtime, columns: dict[str, Any], messages: int,
                                                               content: Any, channel: str | None) -> None:
    await add_task(rt, "t-call", messages=messages, **columns)
    await add_task(rt, "t-txn", messages=messages, **columns)
    by_call = await send(rt, "t-call", one_call=True, content=content, channel=channel)
    by_txn = await send(rt, "t-txn", one_call=False, content=content, channel=channel)
    (call_row, call_messages), (txn_row, txn_messages) = await task_state(rt, "t-call"), await task_state(rt, "t-txn")
    assert comparable(call_row) | {"run_events_from": None} == comparable(txn_row) | {"run_events_from": None}
    assert call_row["run_status"] == "queued" and call_row["run_id"] == by_call.run_id
    assert call_row["run_events_from"] == by_call.events_from is not None
    # the same messages, the new one carrying each submit's own run id
    assert [m[:3] + m[4:] for m in call_messages] == [m[:3] + m[4:] for m in txn_messages]
    assert call_messages[-1] == (messages, "chat", {"role": "user", "content": content}, by_call.run_id, None, None, None)
    assert txn_messages[-1][3] == by_txn.run_id
    assert (by_call.status, by_call.message_idx) == (by_txn.status, by_txn.message_idx) == ("queued", messages)


async def _cap_reached(rt: Runtime) -> dict[str, Any]:
    await add_task(rt, "t-busy", run_status="running", run_id="r-busy")
    return {"limits": submit.RunLimits(max_runs_per_user=1, max_waiting_per_user=0)}


async def _queue_full(rt: Runtime) -> dict[str, Any]:
    await add_task(rt, "t-q1", user_id="other", run_status="queued", run_id="r-q1")
    return {"limits": submit.RunLimits(max_queued_runs=1)}


async def _deleted(rt: Runtime) -> dict[str, Any]:
    async with rt.sessions() as s, s.begin():
        await s.execute(update(Task).where(Task.task_id == "t-refuse").values(deleted_at=runs.now()))
    return {}


async def _nothing(rt: Runtime) -> dict[str, Any]:
    return {}


REFUSALS = [
    pytest.param(_nothing, {"user_id": "ghost"}, runs.UserNotFound, "ghost", id="user-gone"),
    pytest.param(_nothing, {"user_id": "other"}, runs.TaskNotFound, "t-refuse", id="another-users-task"),
    pytest.param(_deleted, {}, runs.TaskNotFound, "t-refuse", id="deleted-task"),
    pytest.param(_nothing, {"channel": "wecom"}, runs.WrongChannel, "web channel", id="wrong-channel"),
    pytest.param(_cap_reached, {}, submit.UserQueueFull, "you already have 1 runs in progress (the limit is 1) and 0 waiting",
                 id="user-cap-and-queue-full"),
    pytest.param(_queue_full, {}, runs.RunQuotaExceeded, "run queue is full", id="queue-full"),
]


@pytest.mark.parametrize(("arrange", "kwargs", "error", "says"), REFUSALS)
async def test_a_refused_submit_names_why_and_writes_nothing(rt: Runtime, arrange: Any, kwargs: dict[str, Any],
                                                             error: type[Exception], says: str) -> None:
    await add_task(rt, "t-refuse", messages=1)
    await add_task(rt, "t-of-other", user_id="other")
    extra = await arrange(rt)
    before = await task_state(rt, "t-refuse")
    with pytest.raises(error, match=re.escape(says)):
        await send(rt, "t-refuse", one_call=True, **{**extra, **kwargs})
    assert await task_state(rt, "t-refuse") == before


async def test_an_active_task_rejects_or_queues_behind_its_run(rt: Runtime) -> None:
    await add_task(rt, "t-active", messages=1, run_status="running", run_id="r-now")
    before = await task_state(rt, "t-active")
    with pytest.raises(runs.RunConflict, match="already running"):
        await send(rt, "t-active", one_call=True)
    assert await task_state(rt, "t-active") == before
    waiting = await send(rt, "t-active", one_call=True, multitask="enqueue", content="next")
    row, messages = await task_state(rt, "t-active")
    assert (waiting.status, waiting.position) == ("pending", 1)
    assert row["run_id"] == "r-now" and [p["content"] for p in row["pending_inputs"]] == ["next"]
    assert messages == before[1]  # a waiting message is stored when its run starts


async def test_concurrent_submits_of_one_user_keep_the_cap_exact(rt: Runtime) -> None:
    cap, tasks = 2, 8
    for i in range(tasks):
        await add_task(rt, f"t-race-{i}")
    limits = submit.RunLimits(max_runs_per_user=cap, max_waiting_per_user=0)
    results = await asyncio.gather(*(send(rt, f"t-race-{i}", one_call=True, limits=limits) for i in range(tasks)),
                                   return_exceptions=True)
    accepted = [r for r in results if isinstance(r, submit.SubmitResult)]
    refused = [r for r in results if isinstance(r, runs.RunQuotaExceeded)]
    assert (len(accepted), len(refused)) == (cap, tasks - cap), results
    async with rt.sessions() as s:
        queued = (await s.execute(select(Task.task_id).where(Task.run_status == "queued"))).scalars().all()
        stored = (await s.execute(select(Message.task_id))).scalars().all()
    assert sorted(queued) == sorted(stored) and len(queued) == cap


SHORTCUT_CASES = [
    pytest.param(True, "daily", "Write the daily report.", id="trigger-expanded"),
    pytest.param(True, "  daily \n", "Write the daily report.", id="trigger-stripped"),
    pytest.param(True, "daily please", "daily please", id="not-exactly-a-trigger"),
    pytest.param(False, "daily", "daily", id="no-storage-root-no-expansion"),  # the scheduler's prompt
]


@pytest.mark.parametrize(("with_root", "sent", "stored"), SHORTCUT_CASES)
async def test_the_one_entry_expands_a_shortcut_trigger(rt: Runtime, tmp_path: Any, with_root: bool, sent: str,
                                                        stored: str) -> None:
    memory_dir = tmp_path / "sub" / ".memory"
    memory_dir.mkdir(parents=True)
    (memory_dir / "shortcuts.md").write_text("# Shortcuts\n- `daily`: Write the daily report.\n")
    await add_task(rt, "t-short")
    await submit.submit_message(rt.sessions, rt.js, rt.nc, rt.topo, user_id="sub", task_id="t-short", content=sent,
                                storage_root=tmp_path if with_root else None)
    _, messages = await task_state(rt, "t-short")
    assert messages[-1][2] == {"role": "user", "content": stored}


# ---- the per-user FIFO over the concurrency cap (issue 26 item 2, migration 0005) -----------------

QUEUE_LIMITS = submit.RunLimits(max_runs_per_user=1, max_waiting_per_user=2)


@pytest.mark.parametrize("one_call", [True, False], ids=["one-call", "transaction"])
async def test_over_the_cap_a_run_waits_in_order_and_only_a_full_queue_is_refused(rt: Runtime, one_call: bool) -> None:
    await add_task(rt, "t-busy", run_status="running", run_id="r-busy")
    for name in ("t-w1", "t-w2", "t-w3"):
        await add_task(rt, name, messages=1)
    first = await send(rt, "t-w1", one_call=one_call, limits=QUEUE_LIMITS)
    second = await send(rt, "t-w2", one_call=one_call, limits=QUEUE_LIMITS)
    assert [(r.status, r.position) for r in (first, second)] == [("waiting", 1), ("waiting", 2)]
    before = await task_state(rt, "t-w3")
    with pytest.raises(submit.UserQueueFull, match="and 2 waiting"):
        await send(rt, "t-w3", one_call=one_call, limits=QUEUE_LIMITS)
    assert await task_state(rt, "t-w3") == before
    row, messages = await task_state(rt, "t-w1")
    assert row["run_status"] == "waiting" and row["run_id"] == first.run_id
    assert row["run_request"] == {"origin": "web", "scheduled_job_id": None, "grant": ""}
    assert messages[-1][3] == first.run_id  # the message is stored at once; only the run waits


async def test_the_one_call_and_the_transaction_leave_the_same_waiting_run(rt: Runtime) -> None:
    await add_task(rt, "t-busy", run_status="running", run_id="r-busy")
    await add_task(rt, "t-call", messages=2)
    await add_task(rt, "t-txn", messages=2)
    await send(rt, "t-call", one_call=True, limits=QUEUE_LIMITS)
    await send(rt, "t-txn", one_call=False, limits=QUEUE_LIMITS)
    (call_row, call_messages), (txn_row, txn_messages) = await task_state(rt, "t-call"), await task_state(rt, "t-txn")
    assert comparable(call_row) | {"run_events_from": None} == comparable(txn_row) | {"run_events_from": None}
    assert [m[:3] for m in call_messages] == [m[:3] for m in txn_messages]


async def test_concurrent_submits_over_the_cap_fill_the_queue_exactly(rt: Runtime) -> None:
    cap, waiting, tasks = 2, 3, 8
    for i in range(tasks):
        await add_task(rt, f"t-race-{i}")
    limits = submit.RunLimits(max_runs_per_user=cap, max_waiting_per_user=waiting)
    results = await asyncio.gather(*(send(rt, f"t-race-{i}", one_call=True, limits=limits) for i in range(tasks)),
                                   return_exceptions=True)
    accepted = [r for r in results if isinstance(r, submit.SubmitResult)]
    assert sum(isinstance(r, submit.UserQueueFull) for r in results) == tasks - cap - waiting, results
    assert sorted(r.status for r in accepted) == ["queued"] * cap + ["waiting"] * waiting
    assert sorted(r.position for r in accepted if r.status == "waiting") == [1, 2, 3]


async def _end(rt: Runtime, task_id: str) -> None:
    async with rt.sessions() as s, s.begin():
        await s.execute(update(Task).where(Task.task_id == task_id).values(run_status="idle"))


async def test_a_freed_slot_starts_the_oldest_waiting_run_and_publishes_it(rt: Runtime) -> None:
    await add_task(rt, "t-busy", run_status="running", run_id="r-busy")
    for name in ("t-a", "t-b"):
        await add_task(rt, name)
    a = await send(rt, "t-a", one_call=True, limits=QUEUE_LIMITS)
    b = await send(rt, "t-b", one_call=True, limits=QUEUE_LIMITS)
    # The slot is still taken: nothing starts.
    assert await runs.promote_waiting(rt.autocommit, rt.js, rt.topo, "sub", 1) == []
    await _end(rt, "t-busy")
    assert await runs.promote_waiting(rt.autocommit, rt.js, rt.topo, "sub", 1) == [a.run_id]
    row, _ = await task_state(rt, "t-a")
    assert (row["run_status"], row["run_request"]) == ("queued", None)
    published = await rt.js.get_last_msg(rt.topo.runs_stream, rt.topo.run_subject("t-a"))
    assert published.headers and published.headers["Nats-Msg-Id"] == a.run_id
    assert (await task_state(rt, "t-b"))[0]["run_status"] == "waiting"
    await _end(rt, "t-a")
    assert await runs.promote_waiting(rt.autocommit, rt.js, rt.topo, "sub", 1) == [b.run_id]


async def test_a_waiting_run_is_cancelled_at_once_and_its_stream_hears_it(rt: Runtime) -> None:
    await add_task(rt, "t-busy", run_status="running", run_id="r-busy")
    await add_task(rt, "t-a")
    await add_task(rt, "t-b")
    a = await send(rt, "t-a", one_call=True, limits=QUEUE_LIMITS)
    await send(rt, "t-b", one_call=True, limits=QUEUE_LIMITS)
    assert await runs.request_cancel(rt.sessions, rt.js, rt.nc, rt.topo, user_id="sub", task_id="t-a",
                                     grant_key=rt.settings.zcbot_run_grant_key) == (a.run_id, True)
    row, _ = await task_state(rt, "t-a")
    assert (row["run_status"], row["run_request"]) == ("idle", None)
    done = decode((await rt.js.get_last_msg(rt.topo.events_stream, rt.topo.event_subject("t-a"))).data, Done)
    assert (done.run_id, done.status) == (a.run_id, "cancelled")
    async with rt.autocommit.connect() as conn:
        assert (await conn.execute(sql.WAITING_POSITION, {"position_task": "t-b"})).scalar_one() == 1
    with pytest.raises(runs.NothingToCancel):
        await runs.request_cancel(rt.sessions, rt.js, rt.nc, rt.topo, user_id="sub", task_id="t-a",
                                  grant_key=rt.settings.zcbot_run_grant_key)
