"""A run's events against an events stream that refuses them for a while (as one without a leader
does), on the in-process stack: the run's end is written to PostgreSQL only after every event is
stored, nothing is reordered or lost, and events that cannot be stored end the run in an error that
says so (issue 23 items 3-4)."""

from __future__ import annotations

import asyncio

from tests.helpers.db import db_rows_async
from tests.helpers.stack import Stack, bare_stack, fake_llm  # noqa: F401  (fixtures)
from tests.runner.test_sink import _accept_events, _refuse_new_events, _stored
from zcbot_core.bus import Topology
from zcbot_core.bus import events as ev
from zcbot_core.bus.topology import connect
from zcbot_runner import metrics

CHUNKS = [f"c{i} " for i in range(40)]


async def _status(stack: Stack, task_id: str) -> tuple[str, str | None]:
    rows = await db_rows_async(stack.settings.zcbot_db_url, "select run_status, run_error from tasks where task_id=%s",
                               task_id)
    return rows[0][0], rows[0][1]


async def _run_with_refusals(stack: Stack, key: str, refuse_for: float | None) -> tuple[list[dict], list[ev.RunEvent], str]:
    """Post `key go`, refuse the run's events for `refuse_for` s once its text streams (None: until
    the runner has given one up); the SSE
    events, the stream's events of the task at the moment PostgreSQL first said the run ended, and
    that task id."""
    stack.fake.script(key, [{"chunks": CHUNKS, "chunk_delay": 0.05}])
    token = await stack.login(f"u{key.lower()}")
    task = await stack.create_task(token, key)
    topo = Topology(stack.settings.zcbot_bus_prefix)
    nc = await connect(stack.settings.zcbot_nats_url or "", "refuser")
    try:
        js = nc.jetstream()
        r = await stack.post(token, task["task_id"], f"{key} go")
        assert r.status_code == 202, r.text
        reader = asyncio.create_task(stack.events(token, r.json()["events_url"], timeout=90))
        for _ in range(400):
            if any(isinstance(e, ev.TextDelta) for e in await _stored(js, topo, task["task_id"])):
                break
            await asyncio.sleep(0.02)
        await _refuse_new_events(js, topo)
        if refuse_for is not None:
            await asyncio.sleep(refuse_for)
        else:
            failed = metrics.EVENTS_FAILED._value.get()
            while metrics.EVENTS_FAILED._value.get() == failed:
                await asyncio.sleep(0.02)
        await _accept_events(js, topo)
        at_end: list[ev.RunEvent] = []
        for _ in range(3000):  # the first moment PostgreSQL says the run is over
            if (await _status(stack, task["task_id"]))[0] != "running":
                at_end = await _stored(js, topo, task["task_id"])
                break
            await asyncio.sleep(0.01)
        events = await asyncio.wait_for(reader, 90)
    finally:
        await nc.close()
    return events, at_end, task["task_id"]


async def test_events_refused_for_a_while_arrive_in_order_or_end_the_run_in_an_error(bare_stack: Stack) -> None:
    """One runner for both cases (its start costs most of the test)."""
    stack = bare_stack
    runner = await stack.add_runner()
    # 1. Refused for 1.5 s, well inside the retry budget: everything arrives, in order, before the end.
    events, at_end, task_id = await _run_with_refusals(stack, "KEY-refused", 1.5)
    text = "".join(e["data"].get("delta", "") for e in events if e["event"] == "text")
    assert text == "".join(CHUNKS)
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok"
    ids = [int(e["id"]) for e in events if e.get("id")]
    assert ids == sorted(set(ids))  # each once, in stream order
    # When PostgreSQL first said the run had ended, the stream already held its whole answer.
    assert "".join(e.delta for e in at_end if isinstance(e, ev.TextDelta)) == "".join(CHUNKS)
    assert await _status(stack, task_id) == ("idle", None)

    # 2. Refused until the runner gives an event up (budget 1 s): the run ends in error, saying so.
    runner.executor.settings = runner.executor.settings.model_copy(update={"zcbot_event_publish_retry_seconds": 1.0})
    events, _, task_id = await _run_with_refusals(stack, "KEY-lost", None)
    status, error = await _status(stack, task_id)
    assert status == "error" and error is not None and "could not be stored" in error  # an English message
    errors = [e for e in events if e["event"] == "error"]
    assert errors and errors[-1]["data"]["code"] == "events_lost"
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "error"
