"""The runner's step store on real PostgreSQL: the owner writes each step in one autocommit statement
(fence, running totals, usage event, message); a fence miss writes nothing; a step the statement cannot
place (another writer appended meanwhile) is written by the locking transaction instead."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from sqlalchemy import select, update

from tests.helpers.db import plain_pg_url, wait_for_lock_waiter
from zcbot_core.db.models import Message, Task, UsageEvent, User
from zcbot_core.llm.client import Usage
from zcbot_core.platform.config import Settings
from zcbot_core.platform.service import Runtime, close_runtime, open_runtime
from zcbot_runner.store import DbStepStore, RunSuperseded


@pytest.fixture
async def rt(settings: Settings) -> AsyncIterator[Runtime]:
    runtime = await open_runtime("runner", settings)
    async with runtime.sessions() as s, s.begin():
        s.add(User(user_id="stepper"))
        await s.flush()
        s.add(Task(task_id="t-step", user_id="stepper", name="t", working_dir="t", run_status="running",
                   run_id="r-1", run_owner="me"))
    try:
        yield runtime
    finally:
        await close_runtime(runtime)


def store(rt: Runtime, owner: str = "me") -> DbStepStore:
    return DbStepStore(rt.sessions, task_id="t-step", user_id="stepper", run_id="r-1", profile="fake",
                       owner=owner, autocommit=rt.autocommit)


async def state(rt: Runtime) -> tuple[list[tuple[int, str, Any]], list[tuple[Any, Decimal]], tuple[Any, ...]]:
    async with rt.sessions() as s:
        messages = [(m.idx, m.kind, m.payload) for m in
                    (await s.execute(select(Message).where(Message.task_id == "t-step").order_by(Message.idx))).scalars()]
        usage = [(u.units, u.cost) for u in
                 (await s.execute(select(UsageEvent).where(UsageEvent.task_id == "t-step"))).scalars()]
        totals = tuple((await s.execute(select(Task.tokens_in, Task.tokens_out, Task.tokens_cached, Task.cost_usd)
                                        .where(Task.task_id == "t-step"))).one())
    return messages, usage, totals


async def test_the_owner_writes_steps_with_usage_and_totals(rt: Runtime) -> None:
    steps = store(rt)
    await steps.append({"role": "user", "content": "hi"})
    await steps.append_llm_step({"role": "assistant", "content": "hello"}, Usage(100, 20, 30), 0.5, "fake")
    await steps.append({"role": "tool", "tool_call_id": "c1", "content": "out"}, kind="chat")
    messages, usage, totals = await state(rt)
    assert [(idx, payload["role"]) for idx, _, payload in messages] == [(0, "user"), (1, "assistant"), (2, "tool")]
    assert usage == [({"prompt_tokens": 100, "completion_tokens": 20, "cached_tokens": 30}, Decimal("0.5"))]
    assert totals == (100, 20, 30, Decimal("0.5"))


async def test_a_step_of_a_run_held_elsewhere_writes_nothing_but_its_usage(rt: Runtime) -> None:
    stale = store(rt, owner="someone-else")
    with pytest.raises(RunSuperseded):
        await stale.append({"role": "tool", "tool_call_id": "c1", "content": "late"})
    with pytest.raises(RunSuperseded):
        await stale.append_llm_step({"role": "assistant", "content": "late"}, Usage(10, 5, 0), 0.25, "fake")
    messages, usage, totals = await state(rt)
    assert messages == []
    # the call was made and paid for: its usage is kept, its message is not
    assert usage == [({"prompt_tokens": 10, "completion_tokens": 5, "cached_tokens": 0}, Decimal("0.25"))]
    assert totals == (10, 5, 0, Decimal("0.25"))


@pytest.mark.parametrize("llm_step", [False, True], ids=["message", "llm_step"])
async def test_a_step_racing_another_writer_is_written_after_it(rt: Runtime, settings: Settings,
                                                                llm_step: bool) -> None:
    """Another writer holds the task row and appends idx 0: the one-statement step started meanwhile
    reads a stale next idx, is refused by the unique index, and the transaction writes it as idx 1."""
    async with await psycopg.AsyncConnection.connect(plain_pg_url(settings.zcbot_db_url)) as other:
        await other.execute("select 1 from tasks where task_id = 't-step' for update")
        await other.execute("insert into messages (task_id, idx, payload, kind) "
                            "values ('t-step', 0, '{\"role\": \"user\", \"content\": \"first\"}', 'chat')")
        steps = store(rt)
        attempts: list[bool | None] = []
        one_statement = steps._owned_step  # noqa: SLF001 - observe which path wrote the step

        async def observed(*args: Any, **kwargs: Any) -> bool | None:
            attempts.append(await one_statement(*args, **kwargs))
            return attempts[-1]

        steps._owned_step = observed  # type: ignore[method-assign]
        write = asyncio.create_task(
            steps.append_llm_step({"role": "assistant", "content": "second"}, Usage(1, 1, 0), 0.0, "fake")
            if llm_step else steps.append({"role": "assistant", "content": "second"}))
        await wait_for_lock_waiter(settings.zcbot_db_url)  # the step's statement waits for the row lock
        assert not write.done()
        await other.commit()
    await asyncio.wait_for(write, 10)
    messages, usage, _ = await state(rt)
    assert [(idx, payload["content"]) for idx, _, payload in messages] == [(0, "first"), (1, "second")]
    assert len(usage) == (1 if llm_step else 0)
    assert attempts == [None]  # the statement was refused; the transaction wrote the step


async def run_state(rt: Runtime) -> tuple[Any, ...]:
    async with rt.sessions() as s:
        return tuple((await s.execute(select(Task.run_status, Task.run_owner, Task.run_error, Task.run_timings)
                                      .where(Task.task_id == "t-step"))).one())


async def test_the_last_step_and_the_runs_end_are_written_together(rt: Runtime) -> None:
    steps = store(rt)
    await steps.append({"role": "user", "content": "hi"})
    await steps.append_llm_step({"role": "assistant", "content": "bye"}, Usage(7, 3, 0), 0.5, "fake", last=True)
    assert (await state(rt))[0] == [(0, "chat", {"role": "user", "content": "hi"})]  # kept for the end
    assert await steps.end_run(status="ok", error=None, timings={"total": 0.1}) is True
    messages, usage, totals = await state(rt)
    assert [payload["content"] for _, _, payload in messages] == ["hi", "bye"]
    assert usage == [({"prompt_tokens": 7, "completion_tokens": 3, "cached_tokens": 0}, Decimal("0.5"))]
    assert totals == (7, 3, 0, Decimal("0.5"))
    assert await run_state(rt) == ("idle", None, None, {"total": 0.1})
    assert await steps.end_run(status="ok", error=None, timings={}) is False  # nothing kept any more


async def test_an_ending_with_an_error_keeps_the_error(rt: Runtime) -> None:
    steps = store(rt)
    await steps.append_llm_step({"role": "assistant", "content": "partial"}, Usage(1, 1, 0), 0.0, "fake", last=True)
    assert await steps.end_run(status="error", error="wall clock", timings={}) is True
    assert (await run_state(rt))[:3] == ("error", None, "wall clock")


async def test_with_a_message_waiting_the_last_step_is_written_and_the_end_left_to_the_caller(rt: Runtime) -> None:
    async with rt.sessions() as s, s.begin():
        await s.execute(update(Task).where(Task.task_id == "t-step")
                        .values(pending_inputs=[{"run_id": "r-2", "content": "next"}]))
    steps = store(rt)
    await steps.append_llm_step({"role": "assistant", "content": "done"}, Usage(2, 2, 0), 0.25, "fake", last=True)
    assert await steps.end_run(status="ok", error=None, timings={}) is False
    messages, usage, _ = await state(rt)
    assert [payload["content"] for _, _, payload in messages] == ["done"] and len(usage) == 1
    assert (await run_state(rt))[:2] == ("running", "me")  # finish_run starts the waiting message


async def test_a_last_step_of_a_run_held_elsewhere_is_refused_and_its_usage_kept(rt: Runtime) -> None:
    stale = store(rt, owner="someone-else")
    await stale.append_llm_step({"role": "assistant", "content": "late"}, Usage(4, 4, 0), 0.1, "fake", last=True)
    with pytest.raises(RunSuperseded):
        await stale.end_run(status="ok", error=None, timings={})
    messages, usage, _ = await state(rt)
    assert messages == [] and len(usage) == 1
    assert (await run_state(rt))[:2] == ("running", "me")


async def test_a_store_without_an_owner_writes_the_last_step_at_once(rt: Runtime) -> None:
    plain = DbStepStore(rt.sessions, task_id="t-step", user_id="stepper", run_id="r-1", profile="fake")
    await plain.append_llm_step({"role": "assistant", "content": "now"}, Usage(1, 1, 0), 0.0, "fake", last=True)
    assert [payload["content"] for _, _, payload in (await state(rt))[0]] == ["now"]
    assert await plain.end_run(status="ok", error=None, timings={}) is False


async def test_a_last_step_racing_another_writer_is_written_after_it(rt: Runtime, settings: Settings) -> None:
    """As above for the last step with the run's end: the statement is refused by the unique index, so
    it ends nothing; the step is then written as idx 1 and the caller ends the run its usual way."""
    async with await psycopg.AsyncConnection.connect(plain_pg_url(settings.zcbot_db_url)) as other:
        await other.execute("select 1 from tasks where task_id = 't-step' for update")
        await other.execute("insert into messages (task_id, idx, payload, kind) "
                            "values ('t-step', 0, '{\"role\": \"user\", \"content\": \"first\"}', 'chat')")
        steps = store(rt)
        await steps.append_llm_step({"role": "assistant", "content": "second"}, Usage(1, 1, 0), 0.0, "fake", last=True)
        ending = asyncio.create_task(steps.end_run(status="ok", error=None, timings={}))
        await wait_for_lock_waiter(settings.zcbot_db_url)  # the statement waits for the row lock
        assert not ending.done()
        await other.commit()
    assert await asyncio.wait_for(ending, 10) is False
    messages, usage, _ = await state(rt)
    assert [(idx, payload["content"]) for idx, _, payload in messages] == [(0, "first"), (1, "second")]
    assert len(usage) == 1
    assert (await run_state(rt))[:2] == ("running", "me")  # not ended by the refused statement
