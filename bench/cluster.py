"""Cluster figures (issue 23): a leader kill on the durable stack's 3-node JetStream cluster, and the
gateway's fan-in (what one gateway sustains consuming the whole event stream).

- `leader_kills`: runs stream to clients (each an EventSource-like `SseFollower`, reconnecting with
  Last-Event-ID) while the events stream's leader is killed -9: events lost (the client's text
  against the scripted answer and against the run's replay; target 0), duplicates, and the time
  from the kill to each live feed's next event. Then the runs stream's leader is killed while
  messages are posted at a steady rate: POST latency during the election, 503s, and whether those
  runs complete.
- `fan_in`: every gateway consumes every run event (its feed is one ordered consumer of the whole
  events stream; a client's events are picked from it). Events published straight into the stream
  at full speed, first for runs nobody on this gateway watches (what a gateway pays for the other
  gateways' users), then for one watched run (relayed to an SSE client): the gateway's CPU per
  event, the events per second one core sustains, and how far the feed lagged.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.harness import BenchStack, Client, process_cpu_seconds, summarize
from tests.helpers.cluster import wait_leader
from tests.helpers.sse import SseFollower
from zcbot_core.bus import Topology
from zcbot_core.bus import events as ev
from zcbot_core.bus.codec import encode
from zcbot_core.bus.topology import connect
from zcbot_fakellm import push_script

CHUNKS = 60
CHUNK_DELAY = 0.1


class _Stamped(list):  # type: ignore[type-arg]
    """A follower's event list that stamps each event's arrival (perf_counter) as it is appended."""

    def append(self, item: dict[str, Any]) -> None:
        item["_t"] = time.perf_counter()
        super().append(item)


def _answer(i: int) -> str:
    return "".join(f"k{i}.{n} " for n in range(CHUNKS))


async def _replay(client: Client, headers: dict[str, str], url: str) -> list[dict[str, Any]]:
    return [event for _, event in await client.sse(headers, url)]


async def leader_kills(stack: BenchStack, client: Client, runs: int, posts: int) -> dict[str, Any]:
    if stack.cluster is None:
        return {"skipped": "needs the durable stack (a 3-node cluster); run without --fast"}
    topo = Topology(stack.env["ZCBOT_BUS_PREFIX"])
    nc = await stack.cluster.admin()
    js = nc.jetstream()
    headers = await client.login("leaders")
    token = headers["Authorization"].split()[1]
    out: dict[str, Any] = {}
    try:
        # ---- the events stream's leader, while `runs` runs stream ----------------------------
        followers: list[tuple[int, str, SseFollower]] = []
        before = (await js.stream_info(topo.events_stream)).state
        for i in range(runs):
            await push_script(stack.fake_url, f"BENCH-LK-{i:02d}", [
                {"chunks": [f"k{i}.{n} " for n in range(CHUNKS)], "chunk_delay": CHUNK_DELAY}])
            task_id = await client.task(headers, f"lk{i}")
            body = await client.post(headers, task_id, f"BENCH-LK-{i:02d} go")
            follower = SseFollower(stack.base_url, token, task_id, body["run_id"], events=_Stamped())
            followers.append((i, body["events_url"], follower))
        readers = [asyncio.create_task(f.run(timeout=120)) for _, _, f in followers]
        while not all(f.names().count("text") >= 5 for _, _, f in followers):
            await asyncio.sleep(0.02)
        leader = await wait_leader(js, topo.events_stream)
        killed = time.perf_counter()
        stack.cluster.kill9(leader)
        await wait_leader(js, topo.events_stream, other_than=leader, timeout=60)
        elected = time.perf_counter() - killed
        await asyncio.to_thread(stack.cluster.restart, leader)
        await asyncio.gather(*readers)
        lost = duplicated = differ = hints = 0
        recover: list[float] = []
        stalls: list[float] = []
        for i, url, f in followers:
            ids = [e["id"] for e in f.events if "id" in e]  # a reconnect hint (`error`, no id) has none
            duplicated += len(ids) - len(set(ids))
            hints += sum(1 for e in f.events if "id" not in e)
            text = "".join(e["data"]["delta"] for e in f.events if e["event"] == "text")
            lost += sum(1 for piece in _answer(i).split(" ")[:-1] if f"{piece} " not in text)
            replay = await _replay(client, headers, url)
            seen = [(e["event"], e.get("data")) for e in f.events]
            differ += sum(1 for e in replay if (e["event"], e.get("data")) not in seen)
            # The live feed's stall: the longest silence after the kill (the run streams every 0.1 s),
            # and when it ended, counted from the kill.
            times = [e["_t"] for e in f.events if e["_t"] > killed - CHUNK_DELAY * 3]
            gaps = [(b - a, b) for a, b in zip(times, times[1:])]
            if gaps and times[-1] > killed:
                gap, resumed = max(gaps)
                stalls.append(gap)
                recover.append(resumed - killed)
        state = (await js.stream_info(topo.events_stream)).state  # what a run's events cost on disk
        stored = max(1, state.messages - before.messages)
        out["events_stream"] = {"events_of_these_runs": stored, "bytes_per_stored_event": round((state.bytes - before.bytes) / stored, 1),
                                "events_per_run": round(stored / runs, 1), "chunks_per_run": CHUNKS}
        out["events_leader_kill"] = {
            "runs": runs, "events_lost": lost, "events_duplicated": duplicated,
            "replayed_but_not_received": differ, "reconnect_hints": hints, "election_s": round(elected, 3),
            "kill_to_live_feed_resumed": summarize(recover), "longest_feed_stall": summarize(stalls),
            "reconnects": sum(f.connections - 1 for _, _, f in followers)}

        # ---- the runs stream's leader, while messages are posted at 10/s -----------------------
        tasks = [await client.task(headers, f"lp{i}") for i in range(posts)]
        results: list[tuple[float, float, int]] = []

        async def post(task_id: str, at: float) -> None:
            await asyncio.sleep(max(0.0, at - time.perf_counter()))
            sent = time.perf_counter()
            r = await client.http.post(f"/v1/tasks/{task_id}/messages", json={"content": "hello"}, headers=headers)
            results.append((sent, time.perf_counter(), r.status_code))

        leader = await wait_leader(js, topo.runs_stream)
        start = time.perf_counter() + 0.5
        posting = asyncio.gather(*(post(t, start + n * 0.1) for n, t in enumerate(tasks)))
        await asyncio.sleep(max(0.0, start + 0.5 - time.perf_counter()))
        killed = time.perf_counter()
        stack.cluster.kill9(leader)
        await wait_leader(js, topo.runs_stream, other_than=leader, timeout=60)
        back = time.perf_counter()
        await posting
        await asyncio.to_thread(stack.cluster.restart, leader)
        during = [b - a for a, b, _ in results if a < back and b > killed]
        ok_runs = await _completed(client, headers, tasks, timeout=60)
        out["runs_leader_kill"] = {
            "posts": posts, "election_s": round(back - killed, 3),
            "post_latency_during_election": summarize(during),
            "post_latency_all": summarize([b - a for a, b, _ in results]),
            "status_counts": {str(s): sum(1 for *_, c in results if c == s) for s in sorted({c for *_, c in results})},
            "runs_completed_ok": ok_runs}
    finally:
        await nc.close()
    return out


async def _completed(client: Client, headers: dict[str, str], tasks: list[str], timeout: float) -> int:
    """How many of the tasks ended their run idle with an assistant answer (waiting up to `timeout`)."""
    deadline = time.perf_counter() + timeout
    done: set[str] = set()
    while time.perf_counter() < deadline and len(done) < len(tasks):
        for task_id in tasks:
            if task_id in done:
                continue
            r = await client.http.get(f"/v1/tasks/{task_id}", headers=headers)
            if r.status_code == 200 and r.json().get("run_status") == "idle":
                done.add(task_id)
        await asyncio.sleep(0.5)
    ok = 0
    for task_id in done:
        r = await client.http.get(f"/v1/tasks/{task_id}/messages", headers=headers)
        items = r.json().get("items", r.json()) if r.status_code == 200 else []
        ok += any(m.get("payload", {}).get("role") == "assistant" for m in items)
    return ok


async def fan_in(stack: BenchStack, client: Client, events: int) -> dict[str, Any]:
    gateway = next(p for p in stack.procs if p.name == "gateway")
    topo = Topology(stack.env["ZCBOT_BUS_PREFIX"])
    headers = await client.login("fanin")
    await push_script(stack.fake_url, "BENCH-HANG", [{"hang": True}])
    task_id = await client.task(headers, "fanin")
    body = await client.post(headers, task_id, "BENCH-HANG watch")
    marks: dict[str, float] = {}
    received = {"n": 0}

    def on_event(item: tuple[float, dict[str, Any]]) -> None:
        received["n"] += 1
        delta = item[1].get("data", {}).get("delta", "")
        if delta.startswith("MARK-"):
            marks[delta] = item[0]

    reader = asyncio.create_task(client.sse(headers, body["events_url"], on_event))
    nc = await connect(stack.admin_nats_url, "bench-fanin")
    js = nc.jetstream()
    out: dict[str, Any] = {}
    try:
        await asyncio.sleep(1.0)
        for label, count, watched in (("unwatched", events, False), ("watched", events // 5, True)):
            datas = [encode(ev.TextDelta(run_id=body["run_id"] if watched else f"fake{n % 500}", delta="x" * 40))
                     for n in range(count)]
            subjects = [topo.event_subject(task_id if watched else f"fan{n % 500}") for n in range(count)]
            before_rx = received["n"]
            cpu0, t0 = process_cpu_seconds(gateway.popen.pid), time.perf_counter()
            for start in range(0, count, 500):  # 500 publishes in flight, each acked (stored on 3 nodes)
                await asyncio.gather(*(js.publish(subjects[n], datas[n]) for n in range(start, min(count, start + 500))))
            stored = time.perf_counter()
            mark = f"MARK-{label}"
            await js.publish(topo.event_subject(task_id), encode(ev.TextDelta(run_id=body["run_id"], delta=mark)))
            while mark not in marks and time.perf_counter() - stored < 120:
                await asyncio.sleep(0.01)
            cpu = process_cpu_seconds(gateway.popen.pid) - cpu0
            wall = marks.get(mark, time.perf_counter()) - t0
            out[label] = {
                "events": count, "stored_per_s": round(count / (stored - t0), 1),
                "gateway_caught_up_after_s": round(wall, 3),
                "feed_lag_after_last_store_s": round(marks.get(mark, time.perf_counter()) - stored, 3),
                "gateway_cpu_us_per_event": round(cpu / count * 1e6, 1),
                "events_per_gateway_core_s": round(count / cpu) if cpu > 0 else None,
                "relayed_to_client": received["n"] - before_rx - 1}
    finally:
        await nc.close()
        await client.http.post(f"/v1/tasks/{task_id}/cancel", headers=headers)
        try:
            await asyncio.wait_for(reader, 30)
        except Exception:
            reader.cancel()
    return out
