"""A 3-node NATS JetStream cluster under load: the leaders of the runs and the events stream are killed
(-9) and restarted while runs with tool calls stream to clients (issue 23).

One module-scoped cluster and stack (`tests/helpers/cluster.py`): three `nats-server` processes with
routes, the services' own identities, `ZCBOT_NATS_URL` the server list and `ZCBOT_JS_REPLICAS=3`; two
gateways, two runners, an executor and the scheduler as processes; the fake LLM as a process.

Wave A (10 runs: a tool call, then a streamed answer of 40 chunks) is streaming when the runs-stream
leader is killed; wave B (10 more) is posted during that election; the events-stream leader is killed
while wave B streams. Every client follows its run like EventSource (Last-Event-ID, switching gateway
on each reconnect). Checked: every run ends `ok` with its whole answer in PostgreSQL; every client got
each event exactly once, in order, ending in `done`, equal to the run's full replay; no task is left
active; a POST answered 503 only while the runs stream had no leader.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql

from tests.helpers.cluster import ClusterStack, NatsCluster, stream_leader, stream_replicas, wait_leader
from tests.helpers.db import assert_consistent, db_rows
from tests.helpers.sse import SseFollower, sse_events
from zcbot_core.bus.subjects import Topology
from zcbot_devstack.embedded.nats_auth import NatsCredentials
from zcbot_fakellm import push_script

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(360)]

WAVE = 10
CHUNKS = 40
CHUNK_DELAY = 0.2  # 8 s of streaming per run: both kills land while runs stream
# A 503 counts as "while no leader" if it was sent before the new leader was seen plus this slack
# (the gateway's own NATS connection may take a moment longer to reach the new leader).
LEADER_SLACK_SECONDS = 1.5


T0 = time.monotonic()


def note(what: str) -> None:
    """A progress line (shown with -s; pytest keeps it for a failure's report)."""
    print(f"[cluster {time.monotonic() - T0:6.1f} s] {what}", flush=True)


def answer(i: int) -> list[str]:
    return [f"c{i}.{k} " for k in range(CHUNKS)]


@dataclass
class Posted:
    index: int
    token: str
    task_id: str
    run_id: str = ""
    unavailable: list[tuple[float, float]] = field(default_factory=list)  # (sent, answered) of each 503
    follower: SseFollower | None = None
    reader: asyncio.Task[list[dict[str, Any]]] | None = None


@pytest.fixture(scope="module")
def cluster_stack(pg_admin_url: str, template_db: str) -> Iterator[ClusterStack]:
    note("starting the cluster")
    root = Path(tempfile.mkdtemp(prefix="zcbot-cluster-"))
    creds = NatsCredentials.generate()
    cluster = NatsCluster(root / "nats", creds, Topology(f"c{secrets.token_hex(3)}")).start()
    name = f"zcbot_cl_{secrets.token_hex(4)}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template_db)))
    from sqlalchemy.engine import make_url

    db_url = make_url(pg_admin_url).set(database=name).render_as_string(hide_password=False)
    stack = ClusterStack(root / "stack", cluster, db_url)
    try:
        note("cluster up; starting the services")
        stack.start(gateways=2, runners=2)
        note("services healthy")
        yield stack
    finally:
        stack.stop()
        cluster.stop()
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if os.environ.get("ZCBOT_TEST_KEEP"):  # the services' and servers' logs, to read after a failure
            print(f"cluster test directory kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


async def login(base_url: str, platform_key: str, user: str) -> str:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as c:
        r = await c.post("/v1/auth/login", json={"user_id": user, "platform_key": platform_key})
        r.raise_for_status()
        return r.json()["token"]


async def new_task(base_url: str, token: str, name: str) -> str:
    async with httpx.AsyncClient(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as c:
        r = await c.post("/v1/tasks", json={"name": name})
        assert r.status_code == 201, r.text
        return r.json()["task_id"]


async def post_until_queued(urls: list[str], run: Posted, deadline: float) -> None:
    """POST the run's message like a client: on 503 (the bus busy) send again, to the other gateway."""
    attempt = 0
    while True:
        base = urls[(run.index + attempt) % len(urls)]
        content = f"KEY-CL-{run.index:02d} go" + (f" (again {attempt})" if attempt else "")
        sent = time.monotonic()
        async with httpx.AsyncClient(base_url=base, timeout=20,
                                     headers={"Authorization": f"Bearer {run.token}"}) as c:
            r = await c.post(f"/v1/tasks/{run.task_id}/messages", json={"content": content})
        if r.status_code == 202:
            run.run_id = r.json()["run_id"]
            return
        assert r.status_code == 503, (r.status_code, r.text)
        assert "json" in r.headers["content-type"], r.headers  # a JSON error, never a cut body
        run.unavailable.append((sent, time.monotonic()))
        assert time.monotonic() < deadline, f"run {run.index}: still 503 after the election"
        attempt += 1
        await asyncio.sleep(0.3)


def follow(stack: ClusterStack, run: Posted) -> None:
    urls = stack.gateway_urls
    first = urls[run.index % len(urls)]
    run.follower = SseFollower(first, run.token, run.task_id, run.run_id, reconnect_delay=0.2,
                               other_urls=[u for u in urls if u != first])
    run.reader = asyncio.create_task(run.follower.run(timeout=75))


def texts(run: Posted) -> int:
    assert run.follower is not None
    return run.follower.names().count("text")


async def wait_streaming(runs: list[Posted], what: str, timeout: float = 40.0) -> None:
    """Until every run of the wave streams its answer (its tool call is behind it)."""
    deadline = time.monotonic() + timeout
    while not all(texts(r) >= 3 for r in runs):
        failed = [r.reader.exception() for r in runs if r.reader is not None and r.reader.done()]
        assert not any(failed), failed
        assert time.monotonic() < deadline, f"{what}: not streaming: {[texts(r) for r in runs]}"
        await asyncio.sleep(0.1)


async def kill_leader(stack: ClusterStack, js: Any, stream: str) -> tuple[str, float, float]:
    """kill -9 the node leading `stream`; wait for the new leader, restart the node. (node, killed at,
    new leader seen at)."""
    leader = await wait_leader(js, stream)
    killed = time.monotonic()
    stack.cluster.kill9(leader)
    await wait_leader(js, stream, other_than=leader, timeout=30)
    back = time.monotonic()
    await asyncio.to_thread(stack.cluster.restart, leader)
    return leader, killed, back


async def test_leader_kills_lose_no_event_and_leave_no_run_stuck(cluster_stack: ClusterStack) -> None:
    stack = cluster_stack
    topo = stack.cluster.topo
    urls = stack.gateway_urls
    nc = await stack.cluster.admin()
    try:
        js = nc.jetstream()
        for stream in (topo.runs_stream, topo.events_stream):
            assert await stream_replicas(js, stream) == 3, f"{stream} is not replicated 3 times"
        await asyncio.gather(*(push_script(stack.fake_url, f"KEY-CL-{i:02d}", [
            {"text": f"writing {i}. ", "tool_calls": [{"name": "write", "arguments": {"path": f"r{i}.txt", "content": f"run {i}"}}]},
            {"chunks": answer(i), "chunk_delay": CHUNK_DELAY},
        ]) for i in range(2 * WAVE)))

        async def prepare(i: int) -> Posted:
            token = await login(urls[i % 2], stack.platform_key, f"cl{i}")
            return Posted(i, token, await new_task(urls[i % 2], token, f"cluster {i}"))

        runs = list(await asyncio.gather(*(prepare(i) for i in range(2 * WAVE))))
        note("scripts, users and tasks ready")
        wave_a, wave_b = runs[:WAVE], runs[WAVE:]

        note("posting wave A")
        await asyncio.gather(*(post_until_queued(urls, r, time.monotonic() + 30) for r in wave_a))
        for r in wave_a:
            follow(stack, r)
        await wait_streaming(wave_a, "wave A")
        note("wave A streams; killing the runs stream's leader")

        # The runs stream's leader dies while wave A streams and wave B is being posted.
        posting = asyncio.gather(*(post_until_queued(urls, r, time.monotonic() + 60) for r in wave_b))
        runs_node, runs_killed, runs_back = await kill_leader(stack, js, topo.runs_stream)
        note(f"runs leader {runs_node} killed, new leader after {runs_back - runs_killed:.2f} s, node restarted")
        await posting
        note("wave B posted")
        for r in wave_b:
            follow(stack, r)
        await wait_streaming(wave_b, "wave B")
        note("wave B streams; killing the events stream's leader")

        # Then the events stream's leader, while wave B (and the end of wave A) streams.
        events_node, _, _ = await kill_leader(stack, js, topo.events_stream)
        streaming_at_kill = sum(1 for r in runs if r.follower and r.follower.done is None)
        note(f"events leader {events_node} killed and restarted; {streaming_at_kill} runs still streaming")

        results = await asyncio.gather(*(r.reader for r in runs if r.reader is not None), return_exceptions=True)
        failures = [(r.index, repr(res), texts(r), r.follower and r.follower.errors)
                    for r, res in zip(runs, results) if isinstance(res, BaseException)]
        note(f"clients finished, {len(failures)} failed")
        assert not failures, f"{failures}\n{stack.logs()}"

        # Every client: each event once, in order, ending in done ok, the same as the run's replay.
        for r in runs:
            assert r.follower is not None
            # The only events without a stream id: the gateway's clean end of a stream whose history could
            # not be read (an `error` with a reconnect hint); the client reconnected with Last-Event-ID.
            hints = [e for e in r.follower.events if "id" not in e]
            assert all(e["event"] == "error" and e["data"].get("reconnect") for e in hints), (r.index, hints)
            events = [e for e in r.follower.events if "id" in e]
            ids = [e["id"] for e in events]
            assert ids == sorted(set(ids)), f"run {r.index}: ids repeated or out of order: {ids}"
            assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", (r.index, events[-1])
            full = await replay(urls[0], r)
            assert [(e["id"], e["event"], e["data"]) for e in events] == \
                   [(e["id"], e["event"], e["data"]) for e in full], f"run {r.index}: client stream != replay"
            streamed = "".join(e["data"]["delta"] for e in events if e["event"] == "text")
            assert streamed.endswith("".join(answer(r.index))), f"run {r.index}: streamed text incomplete: {streamed!r}"

        # PostgreSQL: every run ended with its whole answer; nothing left active.
        for r in runs:
            rows = db_rows(stack.db_url, "select payload->>'content' from messages where task_id=:t "
                                         "and payload->>'role'='assistant' order by idx desc limit 1", t=r.task_id)
            assert rows and rows[0][0] == "".join(answer(r.index)), (r.index, rows)
            status = db_rows(stack.db_url, "select run_status, run_error from tasks where task_id=:t", t=r.task_id)
            assert status[0] == ("idle", None), (r.index, status)
        assert_consistent(stack.db_url)

        # A 503 only while the runs stream had no leader (plus the slack for the gateway to reach it).
        for r in runs:
            for sent, answered in r.unavailable:
                assert runs_killed <= answered and sent <= runs_back + LEADER_SLACK_SECONDS, \
                    (r.index, sent - runs_killed, answered - runs_killed, runs_back - runs_killed)
        # The killed nodes are back in the cluster: each stream has a leader and 3 current replicas.
        for stream in (topo.runs_stream, topo.events_stream):
            assert await stream_leader(js, stream, timeout=5)
        print(f"runs leader {runs_node} killed (election {runs_back - runs_killed:.2f} s), events leader "
              f"{events_node} killed with {streaming_at_kill} runs streaming; "
              f"503s: {sum(len(r.unavailable) for r in runs)}; reconnects: "
              f"{sum(r.follower.connections - 1 for r in runs if r.follower)}")
    finally:
        await nc.close()


async def replay(base_url: str, run: Posted) -> list[dict[str, Any]]:
    """The run's whole stream from the start (`?run_id=`, no Last-Event-ID)."""
    out: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {run.token}"}) as c:
        async with c.stream("GET", f"/v1/tasks/{run.task_id}/events?run_id={run.run_id}") as resp:
            assert resp.status_code == 200
            async for event in sse_events(resp):
                out.append(event)
                if event["event"] == "done":
                    break
    return out
