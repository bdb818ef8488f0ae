"""The reaper turns runs that can never finish into `error` (DESIGN §4.4), and leaves live ones alone."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from nats.js.errors import NotFoundError
from sqlalchemy import select, update

from zcbot_core.agent.lang import say
from zcbot_core.bus import decode, encode
from zcbot_core.bus import events as ev
from zcbot_core.bus.topology import kv_bucket
from zcbot_core.db.models import Message, Task, User
from zcbot_core.platform.config import Settings
from zcbot_core.platform.service import close_runtime, open_runtime
from zcbot_core.runstate.transitions import now
from zcbot_runner.reaper import Reaper, liveness_key


async def _task(rt, task_id: str, status: str, owner: str | None, queued_ago: float = 0) -> None:
    async with rt.sessions() as s, s.begin():
        if await s.get(User, "reaped") is None:
            s.add(User(user_id="reaped"))
            await s.flush()
        s.add(Task(task_id=task_id, user_id="reaped", name=task_id, working_dir=task_id, run_status=status,
                   run_id=f"r{task_id}", run_owner=owner, run_queued_at=now() - timedelta(seconds=queued_ago)))


async def test_reaper_ends_lost_runs_only(settings: Settings) -> None:
    rt = await open_runtime("runner", settings)
    try:
        kv = await kv_bucket(rt.js, rt.topo.leases_bucket)
        await kv.put(liveness_key("alive-runner"), b"alive")
        await _task(rt, "lost", "running", "dead-runner")
        await _task(rt, "live", "running", "alive-runner")
        await _task(rt, "old-queued", "queued", None, queued_ago=600)
        await _task(rt, "fresh-queued", "queued", None, queued_ago=1)
        await _task(rt, "pending-msg", "running", "dead-runner")
        # A request still in the runs stream will be redelivered: not lost.
        await rt.js.publish(rt.topo.run_subject("pending-msg"), b"x")
        sub = await rt.js.subscribe(rt.topo.event_subject("lost"), ordered_consumer=True)
        assert await Reaper(rt).sweep() == 1
        async with rt.sessions() as s:
            rows = dict((await s.execute(select(Task.task_id, Task.run_status))).all())
            lost = (await s.execute(select(Task.run_error).where(Task.task_id == "lost"))).scalar_one()
        # A queued run without its request is the scheduler's sweep's to publish again, never reaped.
        assert rows == {"lost": "error", "live": "running", "old-queued": "queued", "fresh-queued": "queued",
                        "pending-msg": "running"}
        assert lost == say("run_lost_error", "zh")  # no message of the run: Chinese
        first = decode((await sub.next_msg(timeout=5)).data, ev.RunEvent)
        second = decode((await sub.next_msg(timeout=5)).data, ev.RunEvent)
        assert isinstance(first, ev.ErrorEvent) and isinstance(second, ev.Done) and second.status == "error"
        assert await Reaper(rt).sweep() == 0  # idempotent
        async with rt.sessions() as s, s.begin():
            await s.execute(update(Task).where(Task.task_id == "live").values(run_owner="gone"))
        assert await Reaper(rt).sweep() == 1
    finally:
        await close_runtime(rt)


async def test_a_request_that_ran_out_of_deliveries_is_removed_and_its_run_reaped(settings: Settings) -> None:
    """The max-deliveries advisory went unheard (no runner listening): the sweep finds the request
    below the consumer's ack floor, removes it and ends the run."""
    rt = await open_runtime("runner", settings.model_copy(update={"zcbot_max_deliver": 1, "zcbot_ack_wait_seconds": 1.0}))
    try:
        await _task(rt, "exhausted", "running", "dead-runner")
        await _task(rt, "waiting", "running", "dead-runner")
        await rt.js.publish(rt.topo.run_subject("exhausted"), b"first")
        await rt.js.publish(rt.topo.run_subject("later"), b"second")
        pull = await rt.js.pull_subscribe_bind(rt.topo.runners_consumer, rt.topo.runs_stream)
        (first,) = await pull.fetch(1, timeout=5)
        assert first.data == b"first"  # delivered once, never acked: its one delivery is used up
        await asyncio.sleep(1.5)
        (second,) = await pull.fetch(1, timeout=5)  # the server gives up on "first" here
        assert second.data == b"second"
        await second.ack()  # the ack floor moves past both
        await rt.js.publish(rt.topo.run_subject("waiting"), b"third")  # not delivered yet: still queued
        assert await Reaper(rt).sweep() == 1
        async with rt.sessions() as s:
            rows = dict((await s.execute(select(Task.task_id, Task.run_status))).all())
        assert rows == {"exhausted": "error", "waiting": "running"}
        with pytest.raises(NotFoundError):
            await rt.js.get_last_msg(rt.topo.runs_stream, rt.topo.run_subject("exhausted"))
        assert (await rt.js.get_last_msg(rt.topo.runs_stream, rt.topo.run_subject("waiting"))).data == b"third"
    finally:
        await close_runtime(rt)


async def _asked(rt, task_id: str, text: str) -> None:
    async with rt.sessions() as s, s.begin():
        s.add(Message(task_id=task_id, idx=0, payload={"role": "user", "content": text}, run_id=f"r{task_id}"))


async def test_a_run_lost_to_a_database_outage_says_so_in_the_users_language(settings: Settings) -> None:
    """Issue 42, fault seed 4204: PostgreSQL stopped longer than the redeliveries. The runner left the
    run with its `db_unavailable` warning; the reaper's error names the outage, not a stopped runner."""
    rt = await open_runtime("runner", settings)
    try:
        for task_id, text in (("outage-zh", "请总结这份报告"), ("outage-en", "summarise this report"),
                              ("dead-en", "summarise this report")):
            await _task(rt, task_id, "running", "dead-runner")
            await _asked(rt, task_id, text)
            await rt.js.publish(rt.topo.event_subject(task_id), encode(ev.TextDelta(run_id=f"r{task_id}", delta="x")))
        for task_id in ("outage-zh", "outage-en"):
            await rt.js.publish(rt.topo.event_subject(task_id), encode(
                ev.Warn(run_id=f"r{task_id}", msg="db down", code=ev.DB_UNAVAILABLE)))
        assert await Reaper(rt).sweep() == 3
        async with rt.sessions() as s:
            errors = dict((await s.execute(select(Task.task_id, Task.run_error))).all())
        assert errors == {"outage-zh": say("db_outage_lost_error", "zh"), "outage-en": say("db_outage_lost_error", "en"),
                          "dead-en": say("run_lost_error", "en")}
        assert errors["outage-zh"].startswith("数据库")
        sub = await rt.js.subscribe(rt.topo.event_subject("outage-zh"), ordered_consumer=True)
        seen = [decode((await sub.next_msg(timeout=5)).data, ev.RunEvent) for _ in range(4)]
        assert isinstance(seen[2], ev.ErrorEvent) and seen[2].msg == errors["outage-zh"] and seen[2].code == "lost"
        assert isinstance(seen[3], ev.Done) and seen[3].status == "error"
    finally:
        await close_runtime(rt)
