"""Load figures: throughput, SSE fan-out, crash recovery and open runs on one runner."""

from __future__ import annotations

import asyncio
import gc
import random
import time
from typing import Any

from bench.harness import BenchStack, Client, process_cpu_seconds, raw_sse, summarize
from zcbot_fakellm import push_script


async def throughput(stack: BenchStack, client: Client, sizes: list[int], label: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in sizes:
        users = [await client.login(f"tp{label}{n}u{i % 50}") for i in range(n)]
        tasks = [await client.task(users[i], f"tp{i}") for i in range(n)]

        async def warm(i: int) -> None:  # pools and caches filled, as in a service that has been up
            body = await client.post(users[i], tasks[i], "warm up")
            await client.events(users[i], body["events_url"])

        await asyncio.gather(*(warm(i) for i in range(min(n, 50))))
        runners = [p.popen.pid for p in stack.procs if p.name == "runner" and p.popen.poll() is None]
        cpu0 = sum(process_cpu_seconds(pid) for pid in runners)
        t0 = time.perf_counter()

        async def one(i: int) -> dict[str, Any]:
            body = await client.post(users[i], tasks[i], f"hi {i}")
            events = await client.events(users[i], body["events_url"])
            return events[-1][1]

        dones = await asyncio.gather(*(one(i) for i in range(n)))
        elapsed = time.perf_counter() - t0
        runner_cpu = sum(process_cpu_seconds(pid) for pid in runners) - cpu0
        ok = sum(1 for d in dones if d["data"]["status"] == "ok")
        waits = [d["data"]["timings"].get("queue_wait", 0.0) for d in dones]
        llm_calls = sum(d["data"]["timings"].get("llm_calls", 0) for d in dones)
        out[f"concurrent_{n}"] = {
            "runs": n, "ok": ok, "seconds": round(elapsed, 3), "runs_per_second": round(n / elapsed, 2),
            "llm_calls_per_second": round(llm_calls / elapsed, 2), "queue_wait": summarize(waits),
            # What one runner process can sustain on a core of its own: LLM calls per CPU second it used.
            "runner_cpu_ms_per_llm_call": round(1000 * runner_cpu / max(llm_calls, 1), 2),
            "runner_capacity_llm_calls_per_cpu_second": round(llm_calls / runner_cpu, 1) if runner_cpu else None,
        }
    return out


async def arrivals(stack: BenchStack, client: Client, n: int, mean_gap: float = 0.3) -> dict[str, Any]:
    """n runs posted at random gaps (Poisson arrivals, exponential gaps of mean `mean_gap`), each on a
    task of its own and not waiting for the previous one: what a runner that is mostly idle does with a
    message that arrives while it waits. The back-to-back loop of `pipeline` never shows a message held
    by the pull (issue 21: a run posted < 0.5 s after the previous one waited up to 0.9 s)."""
    headers = await client.login("arrivals")
    tasks = [await client.task(headers, f"arr{i}") for i in range(n)]
    gaps = random.Random(21).expovariate  # seeded: the same arrival pattern in every run
    first: list[float] = []
    waits: list[float] = []

    async def one(task_id: str) -> None:
        t0 = time.perf_counter()
        events = await client.post_events(headers, task_id, "hello")
        first.append(events[0][0] - t0)
        waits.append(events[-1][1]["data"].get("timings", {}).get("queue_wait", 0.0))

    runs = []
    for task_id in tasks:
        runs.append(asyncio.create_task(one(task_id)))
        await asyncio.sleep(gaps(1 / mean_gap))
    await asyncio.gather(*runs)
    return {"runs": n, "mean_gap_ms": round(mean_gap * 1000), "runner_queue_wait": summarize(waits),
            "post_to_first_event": summarize(first)}


async def fanout(stack: BenchStack, client: Client, sizes: list[int]) -> dict[str, Any]:
    """Delivery = receive time - event ts, over the events created after every subscriber attached
    (the model waits before streaming); events replayed to late subscribers are not counted."""
    headers = await client.login("fan")
    token = headers["Authorization"].split()[1]
    port = int(stack.base_url.rsplit(":", 1)[1])
    out: dict[str, Any] = {}
    for n in sizes:
        # The model stays silent until every subscriber can have attached (about 1 s per 100 here).
        await push_script(stack.fake_url, "BENCH-FAN", [{"chunks": [f"c{i} " for i in range(40)],
                                                         "chunk_delay": 0.05, "first_delay": 4.0 + n / 60}])
        task_id = await client.task(headers, f"fan{n}")
        body = await client.post(headers, task_id, "BENCH-FAN go")
        samples: list[tuple[float, float]] = []
        connected: list[float] = []

        def on_event(received: float, name: str, data: bytes | None) -> None:
            if data and name != "done":
                at = data.find(b'"ts":')
                if at >= 0:
                    end = data.find(b",", at)
                    samples.append((float(data[at + 5:end]), received))

        # The measuring client must not pause itself: a full collection in this process (~80 ms
        # with 1000 readers) would show up as a late event for every subscriber at once.
        gc.collect()
        gc.disable()
        try:
            counts = await asyncio.gather(*(raw_sse("127.0.0.1", port, body["events_url"], token, on_event,
                                                    connected.append) for _ in range(n)), return_exceptions=True)
        finally:
            gc.enable()
        attached = max(connected) if connected else 0.0
        latencies = [max(received - ts, 0.0) for ts, received in samples if ts >= attached]
        complete = sum(1 for c in counts if isinstance(c, int) and c > 0)
        out[f"subscribers_{n}"] = {"complete_streams": complete, "delivery": summarize(latencies),
                                   "attach_seconds": round(attached - min(connected), 3) if connected else None}
    return out


async def open_runs(stack: BenchStack, client: Client, n: int, stream_seconds: float) -> dict[str, Any]:
    """n runs submitted at once, the model streaming 30 chunks/s for `stream_seconds` each: how many
    runs one runner process holds open at the same time, and the chunk rate it actually sustains
    (a stream the runner cannot keep up with slows down by TCP backpressure; it stays open)."""
    headers = await client.login("openruns")
    chunks = int(30 * stream_seconds)
    await push_script(stack.fake_url, "BENCH-OPEN", [{"chunks": ["o "] * chunks, "chunk_delay": 1 / 30}])
    tasks = [await client.task(headers, f"open{i}") for i in range(n)]
    peak = {"active": 0.0}
    done = asyncio.Event()
    runners = [p for p in stack.procs if p.name == "runner" and p.port and p.popen.poll() is None]
    for extra in runners[1:]:  # one runner process: the figure is per process
        extra.stop()
    runners = runners[:1] or [stack.service("runner")]

    async def sample() -> None:
        while not done.is_set():
            total = 0.0
            for proc in runners:
                r = await client.http.get(f"http://127.0.0.1:{proc.port}/metrics")
                for line in r.text.splitlines():
                    if line.startswith("zcbot_runner_active_runs "):
                        total += float(line.split()[1])
            peak["active"] = max(peak["active"], total)
            await asyncio.sleep(0.2)

    sampler = asyncio.create_task(sample())
    cpu0 = sum(process_cpu_seconds(p.popen.pid) for p in runners)
    t0 = time.perf_counter()

    async def one(task_id: str) -> str:
        body = await client.post(headers, task_id, "BENCH-OPEN go")
        events = await client.events(headers, body["events_url"])
        text = "".join(e[1]["data"].get("delta", "") for e in events if e[1]["event"] == "text")
        status = events[-1][1]["data"]["status"]
        return status if text == "o " * chunks else f"{status}, text incomplete"

    statuses = await asyncio.gather(*(one(t) for t in tasks), return_exceptions=True)
    elapsed = time.perf_counter() - t0
    runner_cpu = sum(process_cpu_seconds(p.popen.pid) for p in runners) - cpu0
    done.set()
    await sampler
    ok = sum(1 for s in statuses if s == "ok")
    outcomes: dict[str, int] = {}
    for s in statuses:
        key = s if isinstance(s, str) else f"{type(s).__name__}: {str(s)[:80]}"
        outcomes[key] = outcomes.get(key, 0) + 1
    return {"runs": n, "ok": ok, "outcomes": outcomes, "peak_concurrently_open": peak["active"],
            "chunks_per_run": chunks, "seconds": round(elapsed, 2),
            "model_chunks_per_second_sustained": round(n * chunks / elapsed, 1),
            "runner_cpu_share_of_a_core": round(runner_cpu / elapsed, 2),
            "runner_cpu_us_per_chunk": round(1e6 * runner_cpu / max(n * chunks, 1), 1)}


def _run_owner(db_url: str, task_id: str) -> str:
    import psycopg

    with psycopg.connect(db_url) as conn:
        row = conn.execute("select run_owner from tasks where task_id = %s", (task_id,)).fetchone()
    return (row[0] if row else None) or ""


async def recovery(stack: BenchStack, client: Client, iters: int) -> dict[str, Any]:
    headers = await client.login("recover")
    await push_script(stack.fake_url, "BENCH-LONG", [{"chunks": ["r "] * 100, "chunk_delay": 0.05}])
    samples = []
    for i in range(iters):
        runners = [p for p in stack.procs if p.name == "runner" and p.popen.poll() is None]
        while len(runners) < 2:
            runners.append(stack.service("runner"))
        task_id = await client.task(headers, f"rec{i}")
        body = await client.post(headers, task_id, "BENCH-LONG go")
        starts: list[float] = []
        killed: dict[str, float] = {}

        def on_event(item: tuple[float, dict[str, Any]]) -> None:
            if item[1]["event"] == "run_start":
                starts.append(item[0])

        reader = asyncio.create_task(client.sse(headers, body["events_url"], on_event))
        while not starts:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        owner = await asyncio.to_thread(_run_owner, stack.env["ZCBOT_DB_URL"], task_id)
        victim = next((p for p in runners if f"-{p.popen.pid}-" in owner), None)
        if victim is None:
            await reader
            continue
        killed["t"] = time.perf_counter()
        victim.kill9()
        stack.procs.remove(victim)
        await reader
        if len(starts) >= 2:
            samples.append(starts[1] - killed["t"])
    return {"kill9_to_resumed": summarize(samples)}
