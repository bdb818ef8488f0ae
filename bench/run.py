"""zcbot benchmark: `python -m bench.run [--quick]` prints one JSON document (issue 11).

Starts the real stack (embedded NATS/PostgreSQL unless ZCBOT_NATS_URL/ZCBOT_DB_URL are set) with the
fake LLM answering instantly, and measures pipeline overhead (against the same loop driven
in-process), cancel latency, tool round trips, throughput, SSE fan-out and crash recovery.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness import BenchStack, Client, machine_info, process_cpu_seconds, raw_sse, summarize
from zcbot_core.agent.cancel import CancelToken
from zcbot_core.agent.loop import AgentLoop
from zcbot_core.bus import ToolCallRequest, Topology
from zcbot_core.bus.topology import connect
from zcbot_core.llm.profiles import load_profiles_from
from zcbot_core.testing.fake_llm import push_script
from zcbot_core.tools.results import ToolOutcome

TWO_TOOLS = [
    {"tool_calls": [{"name": "write", "arguments": {"path": "b.txt", "content": "bench"}}]},
    {"tool_calls": [{"name": "read", "arguments": {"path": "b.txt"}}]},
    {"text": "done"},
]


class NullSink:
    def __init__(self) -> None:
        self.first: float | None = None

    async def emit(self, event: Any) -> None:
        self.first = self.first or time.perf_counter()


class NullStore:
    async def append(self, payload: dict[str, Any], **_: Any) -> None:
        return None

    async def append_llm_step(self, *_: Any) -> None:
        return None


class LocalTools:
    """The same fs tools executed in-process on a temp dir: the loop without bus or sandbox."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="zcbot-bench-local-"))

    def schemas(self) -> list[dict[str, Any]]:
        from zcbot_core.tools.sandbox_schemas import SANDBOX_TOOL_SCHEMAS

        return list(SANDBOX_TOOL_SCHEMAS)

    async def execute(self, name: str, args: dict[str, Any], call_id: str) -> ToolOutcome:
        path = self.root / args.get("path", "x")
        if name == "write":
            path.write_text(args.get("content", ""))
            return ToolOutcome.make(True, f"wrote {path.name}")
        return ToolOutcome.make(True, path.read_text())


async def pipeline(stack: BenchStack, client: Client, iters: int) -> dict[str, Any]:
    """Each iteration runs the same message three ways: POST then GET its `events_url` (two requests),
    POST asking for the event stream (one request), and the loop called in-process (no bus, no DB)."""
    headers = await client.login("pipe")
    await push_script(stack.fake_url, "BENCH-2T", TWO_TOOLS)
    profile = load_profiles_from([Path(stack.env["ZCBOT_MODELS_DIR"])])["fake"]
    os.environ[ "ZCBOT_FAKE_LLM_API_KEY"] = "sk-fake"
    result: dict[str, Any] = {}
    for label, content in (("no_tools", "hello"), ("two_tools", "BENCH-2T go")):
        task_id = await client.task(headers, f"pipe-{label}")
        first, done, first_one, done_one, local_done, queue_wait, runner_total = [], [], [], [], [], [], []
        stages: dict[str, list[float]] = {}
        for i in range(iters + 5):
            t0 = time.perf_counter()
            body = await client.post(headers, task_id, f"{content} {i}")
            events = await client.events(headers, body["events_url"])
            t1 = time.perf_counter()
            one = await client.post_events(headers, task_id, f"{content} {i}b")
            if i >= 5:
                first.append(events[0][0] - t0)
                done.append(events[-1][0] - t0)
                first_one.append(one[0][0] - t1)
                done_one.append(one[-1][0] - t1)
                timings = events[-1][1]["data"].get("timings", {})
                queue_wait.append(timings.get("queue_wait", 0.0))
                runner_total.append(timings.get("total", 0.0))
                for key in ("setup", "llm", "ttft"):
                    stages.setdefault(key, []).append(timings.get(key, 0.0))
            loop = AgentLoop(run_id=uuid.uuid4().hex, profile=profile, system_prompt="bench", tools=LocalTools(),
                             sink=NullSink(), store=NullStore(), cancel=CancelToken())
            t2 = time.perf_counter()
            await loop.run([{"role": "user", "content": f"{content} {i}"}])
            if i >= 5:
                local_done.append(time.perf_counter() - t2)
        p_done, p_one, l_done = summarize(done), summarize(done_one), summarize(local_done)
        result[label] = {
            "post_to_first_event": summarize(first), "post_to_done": p_done,
            "post_stream_to_first_event": summarize(first_one), "post_stream_to_done": p_one,
            "in_process_loop_done": l_done,
            "runner_queue_wait": summarize(queue_wait), "runner_total": summarize(runner_total),
            **{f"runner_{k}": summarize(v) for k, v in stages.items()},
            "overhead_p50_ms": round(p_done["p50_ms"] - l_done["p50_ms"], 3),
            "overhead_p99_ms": round(p_done["p99_ms"] - l_done["p99_ms"], 3),
            "ratio_p50": round(p_done["p50_ms"] / max(l_done["p50_ms"], 1e-6), 2),
            "overhead_one_request_p50_ms": round(p_one["p50_ms"] - l_done["p50_ms"], 3),
            "overhead_one_request_p99_ms": round(p_one["p99_ms"] - l_done["p99_ms"], 3),
            "ratio_one_request_p50": round(p_one["p50_ms"] / max(l_done["p50_ms"], 1e-6), 2),
        }
    return result


async def cancel_latency(stack: BenchStack, client: Client, iters: int) -> dict[str, Any]:
    headers = await client.login("cancel")
    await push_script(stack.fake_url, "BENCH-STREAM", [{"chunks": ["x "] * 100, "chunk_delay": 0.1}])
    await push_script(stack.fake_url, "BENCH-SILENT", [{"text": "late", "first_delay": 5.0}])
    out: dict[str, Any] = {}
    for label, key, trigger in (("streaming_100ms", "BENCH-STREAM", "text"), ("silent_5s", "BENCH-SILENT", "llm_start")):
        task_id = await client.task(headers, f"cancel-{label}")
        samples = []
        for i in range(iters):
            body = await client.post(headers, task_id, f"{key} {i}")
            state: dict[str, float] = {}
            seen = asyncio.Event()

            def on_event(item: tuple[float, dict[str, Any]]) -> None:
                name = item[1]["event"]
                if name == trigger and not seen.is_set():
                    seen.set()
                if name == "cancelled":
                    state["cancelled"] = item[0]

            reader = asyncio.create_task(client.sse(headers, body["events_url"], on_event))
            await seen.wait()
            await asyncio.sleep(0.25)
            t0 = time.perf_counter()
            await client.http.post(f"/v1/tasks/{task_id}/cancel", headers=headers)
            await reader
            samples.append(state["cancelled"] - t0)
        out[label] = summarize(samples)
    return out


async def tool_round_trip(stack: BenchStack, iters: int) -> dict[str, Any]:
    from zcbot_core.tools.executor_client import ExecutorClient

    nc = await connect(stack.env["ZCBOT_NATS_URL"], "bench")
    client = ExecutorClient(nc, Topology(stack.env["ZCBOT_BUS_PREFIX"]))
    user = f"u{uuid.uuid4().hex[:8]}"
    (Path(stack.env["ZCBOT_STORAGE_ROOT"]) / user / "proj").mkdir(parents=True, exist_ok=True)

    async def call(tool: str, args: dict[str, Any]) -> float:
        t0 = time.perf_counter()
        reply = await client.call(ToolCallRequest(call_id=uuid.uuid4().hex, user_id=user, task_id="t", run_id="r",
                                                  tool=tool, args=args, cwd="proj", timeout=30))
        elapsed = time.perf_counter() - t0
        if not reply.ok:
            raise RuntimeError(f"{tool} failed: {reply.error}")
        return elapsed

    cold = await call("write", {"path": "f.txt", "content": "hello\nworld\n"})
    cases = {
        "read": ("read", {"path": "f.txt"}),
        "write": ("write", {"path": "g.txt", "content": "x" * 100}),
        "edit": None,
        "grep": ("grep", {"pattern": "hello", "path": "."}),
        "shell_true": ("shell", {"command": "true"}),
        "run_python_pass": ("run_python", {"code": "pass"}),
    }
    out: dict[str, Any] = {"cold_first_call": summarize([cold])}
    for label, spec in cases.items():
        samples = []
        for i in range(iters):
            if label == "edit":
                await call("write", {"path": "e.txt", "content": f"alpha {i}\n"})
                samples.append(await call("edit", {"path": "e.txt", "old_str": f"alpha {i}", "new_str": "beta"}))
            else:
                samples.append(await call(*spec))
        out[label] = summarize(samples[3:])
    local = Path(tempfile.mkdtemp()) / "f.txt"
    local.write_text("hello\nworld\n")
    t_local = []
    for _ in range(iters):
        t0 = time.perf_counter()
        local.read_text()
        t_local.append(time.perf_counter() - t0)
    out["in_process_read"] = summarize(t_local)
    out["read_ratio_p50"] = round(out["read"]["p50_ms"] / max(out["in_process_read"]["p50_ms"], 1e-6), 1)
    await nc.close()
    return out


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


async def llm_client_overhead(stack: BenchStack, iters: int) -> dict[str, Any]:
    """LiteLLM streaming call (our client) vs a raw OpenAI-compatible stream over httpx, same server."""
    import httpx

    from zcbot_core.llm.client import stream_chat

    profile = load_profiles_from([Path(stack.env["ZCBOT_MODELS_DIR"])])["fake"]
    os.environ["ZCBOT_FAKE_LLM_API_KEY"] = "sk-fake"
    messages = [{"role": "system", "content": "bench"}, {"role": "user", "content": "hello"}]

    async def noop(_: str) -> None:
        return None

    lite, raw = [], []
    async with httpx.AsyncClient(timeout=30) as http:
        for i in range(iters + 5):
            t0 = time.perf_counter()
            await stream_chat(profile, messages, None, noop, noop)
            t1 = time.perf_counter()
            async with http.stream("POST", f"{stack.fake_url}/chat/completions",
                                   json={"model": "fake-model", "messages": messages, "stream": True,
                                         "stream_options": {"include_usage": True}}) as r:
                async for _ in r.aiter_lines():
                    pass
            t2 = time.perf_counter()
            if i >= 5:
                lite.append(t1 - t0)
                raw.append(t2 - t1)
    a, b = summarize(lite), summarize(raw)
    return {"litellm_stream_chat": a, "raw_httpx_stream": b, "added_p50_ms": round(a["p50_ms"] - b["p50_ms"], 3)}


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


async def main_async(quick: bool, only: list[str] | None = None) -> dict[str, Any]:
    stack = BenchStack.create()
    report: dict[str, Any] = {"machine": machine_info(), "started_at": time.time()}
    try:
        stack.start_infra()
        stack.service("executor")
        stack.service("gateway")
        stack.service("runner")
        client = Client(stack.base_url, stack.env["PLATFORM_KEY"])
        iters = 20 if quick else 100
        wanted = set(only or ["pipeline", "llm", "cancel", "tools", "throughput", "fanout", "recovery", "open_runs"])
        if "pipeline" in wanted:
            report["pipeline"] = await pipeline(stack, client, iters)
        if "llm" in wanted:
            report["llm_client"] = await llm_client_overhead(stack, 20 if quick else 100)
        if "cancel" in wanted:
            report["cancel"] = await cancel_latency(stack, client, 5 if quick else 20)
        if "tools" in wanted:
            report["tool_round_trip"] = await tool_round_trip(stack, 30 if quick else 200)
        if "throughput" in wanted:
            report["throughput_one_runner"] = await throughput(stack, client, [50] if quick else [50, 200], "a")
            stack.service("runner")
            report["throughput_two_runners"] = await throughput(stack, client, [50] if quick else [50, 200], "b")
        if "fanout" in wanted:
            report["sse_fanout"] = await fanout(stack, client, [200] if quick else [200, 1000])
        if "recovery" in wanted:
            report["recovery"] = await recovery(stack, client, 2 if quick else 5)
        if "open_runs" in wanted:
            report["open_runs_one_process"] = await open_runs(stack, client, 200 if quick else 1000,
                                                              5.0 if quick else 10.0)
        await client.close()
    finally:
        stack.stop()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--only", nargs="*", choices=("pipeline", "llm", "cancel", "tools", "throughput", "fanout", "recovery",
                                                  "open_runs"),
                        help="run only these figures")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    report = asyncio.run(main_async(args.quick, args.only))
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    sys.exit(main())
