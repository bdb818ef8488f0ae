"""Latency figures: pipeline overhead (against the loop in-process), cancel, tool round trips, LiteLLM."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness import BenchStack, Client, summarize
from zcbot_core.agent.cancel import CancelToken
from zcbot_core.agent.loop import AgentLoop
from zcbot_core.bus import ToolCallRequest, Topology, grants
from zcbot_core.bus.topology import connect
from zcbot_core.llm.profiles import load_profiles_from
from zcbot_core.tools.results import ToolOutcome
from zcbot_fakellm import push_script

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


class HistoryStore:
    """Keeps what the loop stores in a list, so the next in-process run sends the same window as the
    pipeline's run on its task (the same history: LiteLLM's per-message cost is not pipeline overhead)."""

    def __init__(self, history: list[dict[str, Any]]) -> None:
        self.history = history

    async def append(self, payload: dict[str, Any], **_: Any) -> None:
        self.history.append(payload)

    async def append_llm_step(self, message: dict[str, Any], *_: Any, **__: Any) -> None:
        self.history.append(message)


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
    POST asking for the event stream (one request), and the loop called in-process (no bus, no DB) on
    the same history as the pipeline's task, so the model gets the same window in all three."""
    headers = await client.login("pipe")
    await push_script(stack.fake_url, "BENCH-2T", TWO_TOOLS)
    profile = load_profiles_from([Path(stack.env["ZCBOT_MODELS_DIR"])])["fake"]
    os.environ[ "ZCBOT_FAKE_LLM_API_KEY"] = "sk-fake"
    result: dict[str, Any] = {}
    for label, content in (("no_tools", "hello"), ("two_tools", "BENCH-2T go")):
        # One task per way, so each way's history (the window sent to the model) grows as in the other.
        task_id = await client.task(headers, f"pipe-{label}")
        task_one = await client.task(headers, f"pipe-{label}-one-request")
        first, done, first_one, done_one, local_done, queue_wait, runner_total = [], [], [], [], [], [], []
        local_history: list[dict[str, Any]] = []
        stages: dict[str, list[float]] = {}
        for i in range(iters + 5):
            t0 = time.perf_counter()
            body = await client.post(headers, task_id, f"{content} {i}")
            events = await client.events(headers, body["events_url"])
            t1 = time.perf_counter()
            one = await client.post_events(headers, task_one, f"{content} {i}")
            if i >= 5:
                first.append(events[0][0] - t0)
                done.append(events[-1][0] - t0)
                first_one.append(one[0][0] - t1)
                done_one.append(one[-1][0] - t1)
                timings = events[-1][1]["data"].get("timings", {})
                queue_wait.append(timings.get("queue_wait", 0.0))
                runner_total.append(timings.get("total", 0.0))
                for key in ("setup", "llm", "ttft"):
                    if timings.get(key) is not None:  # ttft is null when no token came
                        stages.setdefault(key, []).append(timings[key])
            local_history.append({"role": "user", "content": f"{content} {i}"})
            loop = AgentLoop(run_id=uuid.uuid4().hex, profile=profile, system_prompt="bench", tools=LocalTools(),
                             sink=NullSink(), store=HistoryStore(local_history), cancel=CancelToken())
            t2 = time.perf_counter()
            await loop.run(list(local_history))
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

    nc = await connect(stack.admin_nats_url, "bench")
    client = ExecutorClient(nc, Topology(stack.env["ZCBOT_BUS_PREFIX"]))
    user = f"u{uuid.uuid4().hex[:8]}"
    (Path(stack.env["ZCBOT_STORAGE_ROOT"]) / user / "proj").mkdir(parents=True, exist_ok=True)
    grant = grants.issue(stack.env["ZCBOT_RUN_GRANT_KEY"], "r", user, "t")  # as the gateway makes it

    async def call(tool: str, args: dict[str, Any]) -> float:
        t0 = time.perf_counter()
        reply = await client.call(ToolCallRequest(call_id=uuid.uuid4().hex, user_id=user, task_id="t", run_id="r",
                                                  tool=tool, args=args, cwd="proj", timeout=30, grant=grant))
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
