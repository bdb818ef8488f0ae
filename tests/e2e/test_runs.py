"""Runs end to end: gateway -> JetStream -> runner loop -> executor -> SSE (issue 3).
One stack per module (`shared_stack`: each test its own users and tasks); the wall-clock test has its own."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers.db import db_exec, db_rows
from tests.helpers.stack import Stack
from tests.helpers.wait import wait_for


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


WRITE_THEN_READ = [
    {"reasoning": "I will write the file first.", "tool_calls": [
        {"name": "write", "arguments": {"path": "notes.txt", "content": "hello from the sandbox\n"}}]},
    {"text": "Now reading it back.", "tool_calls": [{"name": "read", "arguments": {"path": "notes.txt"}}]},
    {"text": "Done: notes.txt holds the greeting."},
]


async def test_two_tool_run_streams_every_event_and_persists_steps(stack: Stack) -> None:
    stack.fake.script("KEY-two-tools", WRITE_THEN_READ)
    token = await stack.login("alice")
    task = await stack.create_task(token, "Greeting")
    r = await stack.post(token, task["task_id"], "KEY-two-tools please write and read a note")
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["events_url"] == f"/v1/tasks/{task['task_id']}/events?run_id={body['run_id']}"
    events = await stack.events(token, body["events_url"])
    names = [e["event"] for e in events]
    assert names[0] == "run_start" and names[-1] == "done"
    assert events[-1]["data"]["status"] == "ok"
    for expected in ("llm_start", "reasoning", "tool_call", "tool_result", "text", "llm_end"):
        assert expected in names, (expected, names)
    ids = [e["id"] for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(e["data"]["run_id"] == body["run_id"] for e in events)
    tool_results = [e["data"] for e in events if e["event"] == "tool_result"]
    assert [t["name"] for t in tool_results] == ["write", "read"]
    assert all(t["ok"] for t in tool_results), tool_results
    assert "hello from the sandbox" in tool_results[1]["preview"]
    text_out = "".join(e["data"]["delta"] for e in events if e["event"] == "text")
    assert "Done: notes.txt holds the greeting." in text_out
    timings = events[-1]["data"]["timings"]
    for key in ("queue_wait", "ttft", "llm", "tools", "total"):
        assert key in timings
    rows = db_rows(stack.settings.zcbot_db_url, "select idx, payload->>'role' from messages where task_id=:t order by idx",
                   t=task["task_id"])
    assert [r[1] for r in rows] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert [r[0] for r in rows] == list(range(6))
    async with stack.client(token) as c:
        t = (await c.get(f"/v1/tasks/{task['task_id']}")).json()
        msgs = (await c.get(f"/v1/tasks/{task['task_id']}/messages")).json()["items"]
    assert t["run_status"] == "idle" and t["tokens_in"] > 0 and t["cost_usd"] > 0
    assert t["run_timings"]["total"] > 0
    assert msgs[-1]["payload"]["content"] == "Done: notes.txt holds the greeting."
    usage = db_rows(stack.settings.zcbot_db_url, "select count(*), sum(cost) from usage_events where task_id=:t",
                    t=task["task_id"])
    assert usage[0][0] == 3 and float(usage[0][1]) > 0
    # A late subscriber with no active run gets `done` at once; ?run_id= replays the finished run.
    late = await stack.events(token, f"/v1/tasks/{task['task_id']}/events")
    assert [e["event"] for e in late] == ["done"] and late[0]["data"]["status"] == "idle"
    replay = await stack.events(token, body["events_url"])
    assert [e["id"] for e in replay] == ids


async def test_second_message_conflicts_then_enqueue_runs_in_order(stack: Stack) -> None:
    stack.fake.script("KEY-slow", [{"text": "slow answer", "first_delay": 1.0}])
    token = await stack.login("bob")
    task = await stack.create_task(token, "Busy")
    first = await stack.post(token, task["task_id"], "KEY-slow one")
    assert first.status_code == 202
    second = await stack.post(token, task["task_id"], "another")
    assert second.status_code == 409 and "already" in second.json()["detail"]
    stack.fake.script("KEY-follow", [{"text": "follow-up answered"}])
    queued = await stack.post(token, task["task_id"], "KEY-follow queued", multitask="enqueue")
    assert queued.status_code == 202 and queued.json()["status"] == "pending"
    events = await stack.events(token, queued.json()["events_url"])
    assert events[-1]["event"] == "done" and events[-1]["data"]["run_id"] == queued.json()["run_id"]
    rows = db_rows(stack.settings.zcbot_db_url,
                   "select payload->>'role', payload->>'content' from messages where task_id=:t order by idx",
                   t=task["task_id"])
    assert [r[0] for r in rows] == ["user", "assistant", "user", "assistant"]
    assert rows[2][1] == "KEY-follow queued" and rows[3][1] == "follow-up answered"


async def test_over_the_per_user_cap_a_run_waits_its_turn(stack: Stack) -> None:
    stack.fake.script("KEY-hold", [{"text": "held", "first_delay": 2.0}])
    token = await stack.login("carol")
    cap = stack.settings.zcbot_max_runs_per_user
    tasks = [await stack.create_task(token, f"T{i}") for i in range(cap + 1)]
    results = [await stack.post(token, t["task_id"], "KEY-hold go") for t in tasks]
    assert [(r.status_code, r.json()["status"]) for r in results[:cap]] == [(202, "queued")] * cap
    # issue 26 item 2: over the cap it waits in the user's FIFO (tests/e2e/test_user_queue.py: 429 when full)
    assert (results[cap].status_code, results[cap].json()["status"], results[cap].json()["position"]) == (
        202, "waiting", 1)
    other = await stack.login("dave")  # another user is not affected by carol's cap
    t = await stack.create_task(other, "Mine")
    assert (await stack.post(other, t["task_id"], "hello")).status_code == 202


async def test_cancel_mid_stream_stops_at_once_and_keeps_partial_text_with_a_notice(stack: Stack) -> None:
    stack.fake.script("KEY-cancel", [{"text": "word " * 200, "chunks": ["tok "] * 200, "chunk_delay": 0.05}])
    token = await stack.login("erin")
    task = await stack.create_task(token, "Cancel me")
    r = await stack.post(token, task["task_id"], "KEY-cancel talk a lot")
    url = r.json()["events_url"]
    reader = asyncio.create_task(stack.events(token, url))
    await wait_for(lambda: any("KEY-cancel" in str(r["messages"]) for r in stack.fake.requests), 20,
                   what="the model call to start")
    await asyncio.sleep(0.8)  # a few of the 200 chunks (0.05 s apart) are streamed
    async with stack.client(token) as c:
        cancel = await c.post(f"/v1/tasks/{task['task_id']}/cancel")
    assert cancel.status_code == 202
    events = await asyncio.wait_for(reader, 10)
    names = [e["event"] for e in events]
    assert "text" in names and "cancelled" in names and names[-1] == "done"
    assert events[-1]["data"]["status"] == "cancelled"
    streamed = "".join(e["data"]["delta"] for e in events if e["event"] == "text")
    # History tells the truth (issue 27): the partial answer and a "cancelled" notice are stored.
    async with stack.client(token) as c:
        history = (await c.get(f"/v1/tasks/{task['task_id']}/messages")).json()["items"]
    assert [(m["kind"], m["payload"]["role"]) for m in history] == [("chat", "user"), ("cancelled", "assistant")]
    content = history[1]["payload"]["content"]
    assert streamed.strip() and content.startswith(streamed.strip()[:40]) and content.endswith("(cancelled)"), content[-80:]  # an English prompt: the notice in English
    async with stack.client(token) as c:
        assert (await c.get(f"/v1/tasks/{task['task_id']}")).json()["run_status"] == "idle"
        again = await c.post(f"/v1/tasks/{task['task_id']}/cancel")
    assert again.status_code == 409


async def test_cancel_preempts_a_silent_model_and_a_running_tool(stack: Stack) -> None:
    stack.fake.script("KEY-silent", [{"text": "late", "first_delay": 20}])
    stack.fake.script("KEY-sleep", [{"tool_calls": [{"name": "shell", "arguments": {"command": "sleep 30"}},
                                                     {"name": "read", "arguments": {"path": "x.txt"}}]}])
    token = await stack.login("frank")
    for key in ("KEY-silent", "KEY-sleep"):
        task = await stack.create_task(token, key)
        r = await stack.post(token, task["task_id"], f"{key} go")
        reader = asyncio.create_task(stack.events(token, r.json()["events_url"]))
        await asyncio.sleep(1.0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with stack.client(token) as c:
            assert (await c.post(f"/v1/tasks/{task['task_id']}/cancel")).status_code == 202
        events = await asyncio.wait_for(reader, 10)
        assert loop.time() - started < 3.0
        assert events[-1]["data"]["status"] == "cancelled"
        if key == "KEY-silent":  # no token ever came: the time to first token is unknown (null), not -1
            assert events[-1]["data"]["timings"]["ttft"] is None, events[-1]["data"]["timings"]
        if key == "KEY-sleep":
            rows = db_rows(stack.settings.zcbot_db_url,
                           "select payload->>'role', payload->>'content' from messages where task_id=:t order by idx",
                           t=task["task_id"])
            assert [r[0] for r in rows] == ["user", "assistant", "tool", "tool", "assistant"]
            assert rows[2][1] == rows[3][1] == "[cancelled by user]"
            assert rows[4][1] == "(cancelled)"  # the stored notice (nothing was streamed after the calls)


async def test_missing_api_key_and_llm_http_error_end_runs_with_clear_errors(stack: Stack, monkeypatch) -> None:
    token = await stack.login("gina")
    task = await stack.create_task(token, "Errors")
    stack.fake.script("KEY-500", [{"error": {"status": 400, "message": "bad things"}}])
    r = await stack.post(token, task["task_id"], "KEY-500 hi")
    events = await stack.events(token, r.json()["events_url"])
    err = [e for e in events if e["event"] == "error"]
    assert err and "provider" in err[0]["data"]["msg"]
    assert events[-1]["data"]["status"] == "error"
    async with stack.client(token) as c:
        t = (await c.get(f"/v1/tasks/{task['task_id']}")).json()
    assert t["run_status"] == "error" and t["run_error"]
    monkeypatch.delenv("ZCBOT_FAKE_LLM_API_KEY")
    r = await stack.post(token, task["task_id"], "no key now")
    assert r.status_code == 202  # the next POST clears the error
    events = await stack.events(token, r.json()["events_url"])
    err = [e for e in events if e["event"] == "error"]
    assert err and "ZCBOT_FAKE_LLM_API_KEY" in err[0]["data"]["msg"]


async def test_user_isolation_on_run_routes(stack: Stack) -> None:
    owner = await stack.login("henry")
    intruder = await stack.login("ivan")
    task = await stack.create_task(owner, "Private")
    tid = task["task_id"]
    async with stack.client(intruder) as c:
        assert (await c.post(f"/v1/tasks/{tid}/messages", json={"content": "hi"})).status_code == 404
        assert (await c.get(f"/v1/tasks/{tid}/messages")).status_code == 404
        assert (await c.get(f"/v1/tasks/{tid}/events")).status_code == 404
        assert (await c.post(f"/v1/tasks/{tid}/cancel")).status_code == 404
    async with stack.client() as c:
        assert (await c.post(f"/v1/tasks/{tid}/messages", json={"content": "hi"})).status_code == 401
        assert (await c.get(f"/v1/tasks/{tid}/events")).status_code == 401
    async with stack.client("not-a-token") as c:
        assert (await c.post(f"/v1/tasks/{tid}/cancel")).status_code == 401


async def test_last_event_id_resumes_without_gaps(stack: Stack) -> None:
    stack.fake.script("KEY-resume", [{"chunks": [f"c{i} " for i in range(30)], "chunk_delay": 0.03}])
    token = await stack.login("judy")
    task = await stack.create_task(token, "Resume")
    r = await stack.post(token, task["task_id"], "KEY-resume stream")
    url = r.json()["events_url"]
    first = await stack.events(token, url, stop_after=3)
    rest = await stack.events(token, f"/v1/tasks/{task['task_id']}/events",
                              headers={"Last-Event-ID": str(first[-1]["id"])})
    full = await stack.events(token, url)
    assert [e["id"] for e in first + rest] == [e["id"] for e in full]


async def test_duplicate_delivery_of_a_finished_run_is_dropped(stack: Stack) -> None:
    import time as _time

    from zcbot_core.bus import RunRequest, encode
    from zcbot_core.bus.topology import connect

    token = await stack.login("nina")
    task = await stack.create_task(token, "Dup")
    r = await stack.post(token, task["task_id"], "hello once")
    events = await stack.events(token, r.json()["events_url"])
    assert events[-1]["data"]["status"] == "ok"
    before = db_rows(stack.settings.zcbot_db_url, "select count(*) from messages where task_id=:t", t=task["task_id"])
    nc = await connect(stack.settings.zcbot_nats_url, "dup-test")
    try:
        topo = stack.runners[0][1].topo
        req = RunRequest(run_id=r.json()["run_id"], task_id=task["task_id"], user_id=stack.user_id("nina"), enqueued_at=_time.time())
        # A different Nats-Msg-Id gets past JetStream's dedupe window: the runner itself must drop it.
        await nc.jetstream().publish(topo.run_subject(task["task_id"]), encode(req), headers={"Nats-Msg-Id": "again"})
        for _ in range(50):
            info = await nc.jetstream().stream_info(topo.runs_stream)
            if info.state.messages == 0:
                break
            await asyncio.sleep(0.1)
        assert info.state.messages == 0  # consumed and acked
    finally:
        await nc.close()
    after = db_rows(stack.settings.zcbot_db_url, "select count(*) from messages where task_id=:t", t=task["task_id"])
    assert after == before
    async with stack.client(token) as c:
        assert (await c.get(f"/v1/tasks/{task['task_id']}")).json()["run_status"] == "idle"


@pytest.mark.parametrize(("prompt", "expected"), [
    ("KEY-long go", ["wall-clock limit of 1 s", '"continue"']),
    ("KEY-long 开始写吧", ["1 秒", "继续"]),  # the user's language (seed §3.1: reply 继续)
])
async def test_wall_clock_limit_ends_the_run_with_a_clear_error(bare_stack: Stack, prompt: str,
                                                                 expected: list[str]) -> None:
    from zcbot_core.platform.service import open_runtime
    from zcbot_runner.service import RunnerService

    stack = bare_stack
    limited = stack.settings.model_copy(update={"zcbot_run_wall_clock_seconds": 1.0})
    rt = await open_runtime("runner", limited)
    svc = RunnerService()
    await svc.start(rt)
    stack.runners.append((svc, rt))
    stack.fake.script("KEY-long", [{"chunks": ["x "] * 100, "chunk_delay": 0.1}])
    token = await stack.login("olga")
    task = await stack.create_task(token, "Long")
    r = await stack.post(token, task["task_id"], prompt)
    events = await stack.events(token, r.json()["events_url"])
    errors = [e["data"]["msg"] for e in events if e["event"] == "error"]
    assert errors and all(word in errors[0] for word in expected), errors
    assert events[-1]["data"]["status"] == "error"
    async with stack.client(token) as c:
        t = (await c.get(f"/v1/tasks/{task['task_id']}")).json()
    assert t["run_status"] == "error" and t["run_error"] == errors[0]


async def test_a_task_sets_its_own_wall_clock(stack: Stack) -> None:
    token = await stack.login("wally")
    async with stack.client(token) as c:
        for bad in (0, -5, 8 * 24 * 3600, "soon"):
            r = await c.post("/v1/tasks", json={"name": "Bad", "wall_clock_seconds": bad})
            assert r.status_code in (400, 422), r.text
    task = await stack.create_task(token, "Short", wall_clock_seconds=1)
    assert task["wall_clock_seconds"] == 1
    stack.fake.script("KEY-long-own", [{"chunks": ["x "] * 100, "chunk_delay": 0.1}])
    r = await stack.post(token, task["task_id"], "KEY-long-own 写一份长报告")
    events = await stack.events(token, r.json()["events_url"])
    errors = [e["data"]["msg"] for e in events if e["event"] == "error"]
    assert errors and "1 秒" in errors[0] and "继续" in errors[0], errors  # the server default is 6 h
    async with stack.client(token) as c:
        patched = await c.patch(f"/v1/tasks/{task['task_id']}", json={"wall_clock_seconds": None})
        assert patched.status_code == 200 and patched.json()["wall_clock_seconds"] is None


async def _end_run_in_db_only(stack: Stack, user: str) -> tuple[str, str, str]:
    """A task whose run has ended in PostgreSQL while its `done` is not on the bus yet: the moment
    between the runner's finishing commit and its `done` publish."""
    token = await stack.login(user)
    task = await stack.create_task(token, "Ending")
    run_id = "e" * 32
    db_exec(stack.settings.zcbot_db_url,
            "update tasks set run_id=:r, run_status='idle', run_events_from=1 where task_id=:t", r=run_id, t=task["task_id"])
    return token, task["task_id"], run_id


async def test_a_stream_opened_between_the_end_commit_and_done_gets_the_real_done(stack: Stack) -> None:
    from zcbot_core.bus import encode
    from zcbot_core.bus import events as ev
    from zcbot_core.bus.topology import connect

    token, task_id, run_id = await _end_run_in_db_only(stack, "olga")
    reader = asyncio.create_task(stack.events(token, f"/v1/tasks/{task_id}/events?run_id={run_id}"))
    await asyncio.sleep(0.5)  # the client is attached and has replayed an empty history
    nc = await connect(stack.settings.zcbot_nats_url, "done-late")
    try:
        done = ev.Done(run_id=run_id, status="ok", timings={"total": 0.01}, final_text="hi")
        await nc.jetstream().publish(stack.runners[0][1].topo.event_subject(task_id), encode(done))
    finally:
        await nc.close()
    events = await reader
    assert [e["event"] for e in events] == ["done"]
    assert events[0]["data"]["status"] == "ok" and events[0]["data"]["timings"] == {"total": 0.01}


async def test_a_run_that_ended_without_done_answers_idle_after_the_grace(stack: Stack, monkeypatch) -> None:
    from zcbot_gateway.routes import runs as run_routes

    monkeypatch.setattr(run_routes, "DONE_GRACE_SECONDS", 0.5)
    token, task_id, run_id = await _end_run_in_db_only(stack, "pavel")
    events = await stack.events(token, f"/v1/tasks/{task_id}/events?run_id={run_id}", timeout=10)
    assert [(e["event"], e["data"]["status"]) for e in events] == [("done", "idle")]


async def test_a_silent_stream_gets_keepalive_comments(stack: Stack) -> None:
    """Heartbeat 1 s here: a model silent for 2.5 s leaves the stream with keep-alive comments
    (so proxies keep it open), then the run's events follow on the same stream."""
    stack.fake.script("KEY-quiet", [{"text": "after the pause", "first_delay": 2.5}])
    token = await stack.login("quinn")
    task = await stack.create_task(token, "Quiet")
    r = await stack.post(token, task["task_id"], "KEY-quiet go")
    lines: list[str] = []
    async with stack.client(token) as c, c.stream("GET", r.json()["events_url"]) as resp:
        async for line in resp.aiter_lines():
            lines.append(line)
            if line.startswith("event: done"):
                break
    first_text = next(i for i, line in enumerate(lines) if line == "event: text")
    assert lines[:first_text].count(": keep-alive") >= 1
    assert "event: done" in lines


async def test_post_asking_for_the_event_stream_streams_the_new_run(stack: Stack) -> None:
    stack.fake.script("KEY-inline", [{"chunks": ["one ", "two ", "three"]}])
    token = await stack.login("ivan")
    task = await stack.create_task(token, "Inline stream")
    r, events = await stack.post_stream(token, task["task_id"], "KEY-inline go")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    run_id = r.headers["x-run-id"]
    assert r.headers["x-run-status"] == "queued" and r.headers["x-accel-buffering"] == "no"
    assert r.headers["content-location"] == f"/v1/tasks/{task['task_id']}/events?run_id={run_id}"
    names = [e["event"] for e in events]
    assert names[0] == "run_start" and names[-1] == "done", names
    assert {e["data"]["run_id"] for e in events} == {run_id}
    assert "".join(e["data"]["delta"] for e in events if e["event"] == "text") == "one two three"
    assert events[-1]["data"]["status"] == "ok"
    # The same events, with the same ids, as the two-request way (POST, then GET events_url).
    replay = await stack.events(token, r.headers["content-location"])
    assert [(e["id"], e["event"]) for e in replay] == [(e["id"], e["event"]) for e in events]


async def test_post_asking_for_the_event_stream_keeps_json_errors_and_saves_nothing(stack: Stack) -> None:
    stack.fake.script("KEY-hold-inline", [{"text": "held", "first_delay": 1.0}])
    token = await stack.login("judith")
    task = await stack.create_task(token, "Inline errors")
    missing, events = await stack.post_stream(token, "t_" + "0" * 24, "hello")
    assert missing.status_code == 404 and missing.json()["detail"] == "task not found" and events == []
    first = await stack.post(token, task["task_id"], "KEY-hold-inline one")
    assert first.status_code == 202
    busy, events = await stack.post_stream(token, task["task_id"], "second")
    assert busy.status_code == 409 and "already" in busy.json()["detail"] and events == []
    empty, _ = await stack.post_stream(token, task["task_id"], "")
    assert empty.status_code == 422
    rows = db_rows(stack.settings.zcbot_db_url, "select payload->>'content' from messages where task_id=:t "
                   "and payload->>'role' = 'user' order by idx", t=task["task_id"])
    assert [row[0] for row in rows] == ["KEY-hold-inline one"]


async def test_post_asking_for_the_event_stream_of_an_enqueued_run_follows_only_that_run(stack: Stack) -> None:
    stack.fake.script("KEY-first-inline", [{"chunks": ["a ", "b "], "first_delay": 0.5}])
    stack.fake.script("KEY-next-inline", [{"text": "next answer"}])
    token = await stack.login("kim")
    task = await stack.create_task(token, "Inline enqueue")
    first = (await stack.post(token, task["task_id"], "KEY-first-inline go")).json()
    r, events = await stack.post_stream(token, task["task_id"], "KEY-next-inline then", multitask="enqueue")
    assert r.status_code == 200 and r.headers["x-run-status"] == "pending"
    run_id = r.headers["x-run-id"]
    assert run_id != first["run_id"] and {e["data"]["run_id"] for e in events} == {run_id}
    assert [e["event"] for e in events][0] == "run_start" and events[-1]["event"] == "done"
    assert "".join(e["data"]["delta"] for e in events if e["event"] == "text") == "next answer"
