"""Load (issue 12 item 2): hundreds of concurrent runs across 50 users through the real stack.

Gateway (real uvicorn) -> JetStream -> one in-process runner -> fake LLM, on the session's real
NATS and PostgreSQL. The fake LLM is held shut by `LLMGate` while the runs are submitted, so every
accepted run is provably in flight when the over-cap posts arrive: the 429s are asserted exactly,
not against a timer. Promises checked:

- every accepted run reaches `done` (DB: task back to `idle`, the run's assistant message stored);
- the per-user cap is never exceeded (the DB is sampled while the runs live) and holds exactly:
  the post after `cap` accepted ones is 429, and the cap frees again once the runs end;
- every run's event sequence, live and replayed via `?run_id=`, is complete and ordered:
  `run_start` first, `done{status: ok}` last, SSE ids strictly increasing (so no duplicates),
  every event tagged with its run, the text deltas adding up to the scripted answer;
- no ERROR-level log record from any zcbot logger during the load.

Found by this file (fixed): the gateway held the auth dependency's DB connection while the route
opened sessions of its own, so 64 concurrent posts deadlocked its pool (503 "database busy" after
the 30 s pool timeout); and a run request redelivered to the runner still executing it (claim
delayed past ack_wait under load) was executed twice — pinned by the last test.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from typing import Any

import httpx
import pytest

from tests.helpers.db import db_rows_async, plain_pg_url
from tests.helpers.stack import Stack, bare_stack, fake_llm, stack  # noqa: F401
from tests.helpers.wait import wait_for
from tests.reliability.conftest_shared import (  # noqa: F401
    ACTIVE_RUN_STATUSES,
    LLMGate,
    gather_limited,
    service_errors,
    settings_env,
)

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(120)]

USERS = 50
# The event-order test follows every run live and replays it again: 25 users (75 runs, 75 live
# streams at once, then 75 replays) load the same paths as 50 did, in half the time.
SEQ_USERS = 25
KEY = "LOADKEY"
ANSWER = "load answer: all good"


async def _users(stack: Stack, prefix: str, tasks_per_user: int, users: int = USERS) -> list[tuple[str, list[str]]]:
    """`users` users (platform login) with `tasks_per_user` tasks each -> [(token, [task_id, ...])]."""
    tokens = await gather_limited([lambda i=i: stack.login(f"{prefix}{i:02d}") for i in range(users)])

    async def tasks_of(token: str) -> list[str]:
        return [(await stack.create_task(token, f"load-{j}"))["task_id"] for j in range(tasks_per_user)]

    task_ids = await gather_limited([lambda t=t: tasks_of(t) for t in tokens], limit=16)
    return list(zip(tokens, task_ids, strict=True))


async def _post_all(client: httpx.AsyncClient, posts: list[tuple[str, str]]) -> list[httpx.Response]:
    async def post(token: str, task_id: str) -> httpx.Response:
        return await client.post(f"/v1/tasks/{task_id}/messages", json={"content": f"{KEY} go"},
                                 headers={"Authorization": f"Bearer {token}"})

    return await gather_limited([lambda p=p: post(*p) for p in posts], limit=64)


async def _active_per_user(url: str) -> dict[str, int]:
    rows = await db_rows_async(url, "select user_id, count(*) from tasks where run_status = any(%s) group by user_id",
                         list(ACTIVE_RUN_STATUSES))
    return {user: int(n) for user, n in rows}


class CapSampler:
    """Samples the per-user count of active runs until stopped; keeps the maximum seen."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.max_per_user = 0
        self.max_total = 0
        self.samples = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while not self._stop.is_set():
            counts = await _active_per_user(self.url)
            self.samples += 1
            self.max_per_user = max([self.max_per_user, *counts.values()])
            self.max_total = max(self.max_total, sum(counts.values()))
            try:
                await asyncio.wait_for(self._stop.wait(), 0.1)
            except TimeoutError:
                pass

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task


def _client(stack: Stack) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=stack.base_url, timeout=60,
                             limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))


# No per-user FIFO (0 waiting): the over-cap posts are refused, so the cap is seen exactly.
@pytest.mark.parametrize("settings_env", [{"ZCBOT_MAX_RUNS_PER_USER": "4", "ZCBOT_MAX_WAITING_RUNS_PER_USER": "0"}],
                         indirect=True, ids=["cap4"])
async def test_200_concurrent_runs_all_finish_and_the_cap_holds(stack: Stack,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    cap = stack.settings.zcbot_max_runs_per_user
    assert cap == 4
    stack.fake.script(KEY, [{"text": ANSWER}])
    db = stack.settings.zcbot_db_url
    users = await _users(stack, "cap", cap + 1)
    gate = LLMGate(stack.fake)
    sampler = CapSampler(db)
    sampler.start()
    try:
        async with _client(stack) as client:
            first = await _post_all(client, [(tok, tids[j]) for tok, tids in users for j in range(cap)])
            assert Counter(r.status_code for r in first) == {202: USERS * cap}, [r.text for r in first[:3]]
            run_ids = {r.json()["task_id"]: r.json()["run_id"] for r in first}
            # All 200 are in flight (the model is held): the cap is full for every user ...
            assert await _active_per_user(db) == {f"cap{i:02d}": cap for i in range(USERS)}
            over = await _post_all(client, [(tok, tids[cap]) for tok, tids in users])
            # ... so each user's next run is refused, exactly, with a clear message.
            assert [r.status_code for r in over] == [429] * USERS, [r.text for r in over if r.status_code != 429]
            assert all("limit is 4" in r.json()["detail"] for r in over), over[0].text
            await wait_for(lambda: _all_running(db, set(run_ids)), 30, what="the runner to pick up all 200 runs")
            gate.open()
            await wait_for(lambda: _all_idle(db, set(run_ids)), 45, what="all 200 runs to finish")
            await sampler.stop()
            assert sampler.samples >= 3 and sampler.max_total == USERS * cap
            assert sampler.max_per_user == cap, sampler.max_per_user  # never above the cap
            # Every accepted run reached `done`: idle, no error, its answer stored under its run_id.
            rows = await db_rows_async(db, "select t.task_id, t.run_status, t.run_error, t.run_id, m.payload->>'content' "
                                     "from tasks t join messages m on m.task_id = t.task_id and m.run_id = t.run_id "
                                     "and m.payload->>'role' = 'assistant' where t.task_id = any(%s)", list(run_ids))
            assert len(rows) == USERS * cap
            for task_id, run_status, run_error, run_id, content in rows:
                assert (run_status, run_error, run_id, content) == ("idle", None, run_ids[task_id], ANSWER)
            # The cap frees with the runs: the refused posts go through now (and finish).
            again = await _post_all(client, [(tok, tids[cap]) for tok, tids in users[:10]])
            assert [r.status_code for r in again] == [202] * 10, [r.text for r in again]
            await wait_for(lambda: _all_idle(db, {r.json()["task_id"] for r in again}), 30, what="the late runs")
    finally:
        gate.restore()
        if sampler._task is not None and not sampler._task.done():
            await sampler.stop()
    assert service_errors(caplog) == []


async def _all_running(db: str, task_ids: set[str]) -> bool:
    rows = await db_rows_async(db, "select count(*) from tasks where task_id = any(%s) and run_status = 'running'",
                         list(task_ids))
    return rows[0][0] == len(task_ids)


async def _all_idle(db: str, task_ids: set[str]) -> bool:
    rows = await db_rows_async(db, "select run_status, count(*) from tasks where task_id = any(%s) group by run_status",
                         list(task_ids))
    counts = dict(rows)
    assert not counts.get("error"), f"runs ended in error: {counts}"
    return counts.get("idle", 0) == len(task_ids)


def _check_sequence(events: list[dict[str, Any]], run_id: str) -> None:
    names = [e["event"] for e in events]
    assert names and names[0] == "run_start" and names[-1] == "done", names
    assert names.count("run_start") == 1 and names.count("done") == 1, names
    assert events[-1]["data"]["status"] == "ok", events[-1]
    assert {"llm_start", "text", "llm_end"} <= set(names), names
    ids = [e["id"] for e in events]
    assert all(a < b for a, b in zip(ids, ids[1:])), ids  # strictly increasing: ordered, no duplicates
    assert all(e["data"].get("run_id") == run_id for e in events), events
    assert "".join(e["data"]["delta"] for e in events if e["event"] == "text") == ANSWER


@pytest.mark.parametrize("settings_env", [{"ZCBOT_MAX_WAITING_RUNS_PER_USER": "0"}], indirect=True, ids=["no-fifo"])
async def test_every_event_sequence_is_complete_and_ordered_under_load(stack: Stack,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    cap = stack.settings.zcbot_max_runs_per_user  # the default (3)
    stack.fake.script(KEY, [{"reasoning": "thinking under load", "chunks": ["load ", "answer: ", "all ", "good"]}])
    db = stack.settings.zcbot_db_url
    users = await _users(stack, "seq", cap + 1, SEQ_USERS)
    gate = LLMGate(stack.fake)
    try:
        async with _client(stack) as client:
            accepted = await _post_all(client, [(tok, tids[j]) for tok, tids in users for j in range(cap)])
            assert Counter(r.status_code for r in accepted) == {202: SEQ_USERS * cap}
            over = await _post_all(client, [(tok, tids[cap]) for tok, tids in users])
            assert [r.status_code for r in over] == [429] * SEQ_USERS  # default cap, exactly
            runs = [(tok, r.json()) for (tok, _), r in zip(
                [(tok, tids[j]) for tok, tids in users for j in range(cap)], accepted, strict=True)]
            # Live subscribers on every run, connected while the model is still held.
            live = [asyncio.create_task(stack.events(tok, body["events_url"], timeout=60)) for tok, body in runs]
            await asyncio.sleep(0.5)
            gate.open()
            live_events = await asyncio.gather(*live)
        for (tok, body), events in zip(runs, live_events, strict=True):
            _check_sequence(events, body["run_id"])
        # Replays after the fact (`?run_id=`) return the very same sequence.
        replays = await gather_limited([lambda t=tok, b=body: stack.events(t, b["events_url"], timeout=30)
                                        for tok, body in runs], limit=32)
        for (tok, body), events, replay in zip(runs, live_events, replays, strict=True):
            _check_sequence(replay, body["run_id"])
            assert [e["id"] for e in replay] == [e["id"] for e in events]
        assert await _all_idle(db, {body["task_id"] for _, body in runs})
    finally:
        gate.restore()
    assert service_errors(caplog) == []


@pytest.mark.parametrize("heartbeats", [True, False], ids=["beating", "beats_lost"])
async def test_a_redelivered_run_request_is_not_executed_twice(bare_stack: Stack, heartbeats: bool,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """What the load test first tripped over: a claim delayed past ack_wait (3 s in the e2e stack)
    by a loaded DB or event loop. Reproduced deterministically by holding the task row lock (the
    claim's SELECT ... FOR UPDATE waits) past ack_wait. The runner beats from receipt, so JetStream
    keeps the delivery with it (attempt 1); with the beats lost (as while NATS restarts) JetStream
    redelivers the request to the runner still handling it, which must not execute the run a second
    time (DESIGN §4: duplicate deliveries are dropped).
    """
    if not heartbeats:
        async def silent(*_: Any) -> None:
            await asyncio.Future()

        monkeypatch.setattr("zcbot_runner.execution.keep_in_progress", silent)
    import psycopg


    stack = bare_stack
    stack.fake.script("KEY-redeliver", [{"text": "answered once"}])
    token = await stack.login("redeliver")
    task = await stack.create_task(token, "redeliver")
    r = await stack.post(token, task["task_id"], "KEY-redeliver go")  # no runner yet: it waits in the stream
    assert r.status_code == 202
    async with await psycopg.AsyncConnection.connect(plain_pg_url(stack.settings.zcbot_db_url)) as conn:
        await conn.execute("select 1 from tasks where task_id = %s for update", (task["task_id"],))
        await stack.add_runner()
        await asyncio.sleep(stack.settings.zcbot_ack_wait_seconds * 1.7)  # past ack_wait: redelivered
        await conn.rollback()
    events = await stack.events(token, r.json()["events_url"], timeout=30)
    assert events[-1]["event"] == "done"
    await asyncio.sleep(1.0)
    calls = [b for b in stack.fake.requests if "KEY-redeliver" in json.dumps(b.get("messages", []))]
    rows = await db_rows_async(stack.settings.zcbot_db_url,
                         "select payload->>'role' from messages where task_id = %s order by idx", task["task_id"])
    assert (len(calls), [row[0] for row in rows]) == (1, ["user", "assistant"])
    starts = [e["data"] for e in events if e["event"] == "run_start"]
    # Beating, the delivery stays; silent, the redelivery did happen (and was not executed again).
    assert len(starts) == 1 and starts[0]["attempt"] == (1 if heartbeats else 2), starts
