"""The executor as a NATS service: cancel, crash, lease affinity, bad input, drain, latency."""

from __future__ import annotations

import asyncio
import json
import secrets
import statistics
import time
from typing import Any

import nats
import pytest
from nats.js.errors import KeyNotFoundError

from tests.helpers.executor_stack import ExecutorProcess, Stack, drain, granted, wait_no_processes, wait_processes
from zcbot_core.bus import ToolCallReply, ToolCallRequest, ToolCancel, decode, encode
from zcbot_core.tools.executor_client import NO_RESPONDERS_GRACE_SECONDS, ExecutorClient, probe_host


async def test_cancel_kills_the_call_process_group(one: Stack) -> None:
    # durations unique to the run: the scan sees every session's processes on the machine
    base = secrets.randbelow(80_000) + 10_000
    s1, s2, s3 = (f"sleep {base + i}" for i in range(3))
    task = asyncio.create_task(one.shell(f"{s1} & {s2}; echo never"))
    await wait_processes(lambda c: c == s2)
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_no_processes(lambda c: c in (s1, s2), timeout=3) == []
    assert time.monotonic() - started < 1.5
    # an explicit ToolCancel: the call answers "cancelled"
    task = asyncio.create_task(one.shell(s3, call_id="cancel-me"))
    await wait_processes(lambda c: c == s3)
    await one.client.cancel("cancel-me", "h1")
    r = await asyncio.wait_for(task, 3)
    assert not r.ok and "cancelled" in r.error and r.meta.get("cancelled") is True
    assert await wait_no_processes(lambda c: c == s3, timeout=3) == []


async def test_executor_crash_mid_call(stack: Stack) -> None:
    secret = "jwt-like-secret-value-of-the-executor"
    proc = ExecutorProcess(stack.url, stack.topo, stack.root, "hx", {"ZCBOT_FAKE_SECRET": secret, "JWT_SECRET": secret})
    try:
        await proc.wait_ready(stack.nc)
        r = await stack.shell("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; echo end")
        assert r.ok and r.host == "hx", r
        assert secret not in r.output and "ZCBOT_" not in r.output
        sleep = f"sleep 60.{secrets.randbelow(10**6):06d}"  # unique: the scan sees other tests' processes
        task = asyncio.create_task(stack.shell(sleep, timeout=120))
        await wait_processes(lambda c: c == sleep)
        proc.kill()
        started = time.monotonic()
        r = await asyncio.wait_for(task, 15)
        assert not r.ok and "stopped during the call" in r.error, r
        assert time.monotonic() - started < 5
        assert await wait_no_processes(lambda c: c == sleep, timeout=5) == []  # sandbox died with it
        r = await stack.shell("echo anyone")
        assert not r.ok and "executor unavailable" in r.error
    finally:
        proc.kill()


async def test_lease_affinity_and_failover(stack: Stack) -> None:
    await stack.lease_bucket(ttl=2.0)
    kv = await stack.nc.jetstream().key_value(stack.topo.sandbox_leases_bucket)
    a = await stack.executor("hA", lease_refresh_seconds=0.4)
    assert (await stack.shell("echo 1", user="u7")).host == "hA"
    assert (await stack.shell("echo 1", user="u8")).host == "hA"
    await stack.executor("hB", lease_refresh_seconds=0.4)
    for _ in range(4):
        assert (await stack.shell("echo x", user="u7")).host == "hA"
    # calls on the unassigned subject while hA lives never move the lease
    hosts = set()
    for i in range(8):
        req = ToolCallRequest(call_id=f"any{i}", user_id="u7", task_id="t", run_id="r", tool="glob",
                              args={"pattern": "*"}, cwd="task", timeout=5)
        msg = await stack.request(stack.topo.exec_any_subject(), encode(granted(req)), timeout=10)
        hosts.add(decode(msg.data, ToolCallReply).host)
    assert (await kv.get("u7")).value == b"hA"
    await asyncio.sleep(2.5)  # longer than the TTL: refreshes keep the lease
    assert (await kv.get("u7")).value == b"hA"
    await stack.crash(a)
    # u8 calls at once: hA has no responders, hB takes the call and the dead host's lease
    r = await stack.shell("echo moved", user="u8")
    assert r.ok and r.host == "hB"
    assert (await kv.get("u8")).value == b"hB"
    # u7 stays idle: its lease expires after the TTL, then the user lands on hB
    deadline = time.monotonic() + 6
    while True:
        try:
            await kv.get("u7")
        except KeyNotFoundError:
            break
        assert time.monotonic() < deadline, "lease of the dead executor did not expire"
        await asyncio.sleep(0.2)
    r = await stack.shell("echo moved", user="u7")
    assert r.ok and r.host == "hB"
    assert (await kv.get("u7")).value == b"hB"


async def test_garbage_gets_an_error_reply_and_service_keeps_serving(one: Stack) -> None:
    topo = one.topo
    for subject in (topo.exec_any_subject(), topo.exec_call_subject("h1"), topo.exec_cancel_subject("h1")):
        for payload in (b"\x00\xffgarbage", b"", encode(ToolCancel(call_id="x")) if "call" in subject else b"\xc1"):
            msg = await one.request(subject, payload, timeout=5)
            reply = decode(msg.data, ToolCallReply)
            assert not reply.ok and reply.error.startswith("bad request"), (subject, payload, reply)
    r = await one.call("glob", {"pattern": "*"})
    assert r.ok


async def test_probe_is_its_own_message(one: Stack) -> None:
    """The liveness probe is an `ExecutorProbe`, not a tool call: a tool call on the control subject
    is a bad request, a probe says whether the call runs there."""
    sleep = f"sleep {secrets.randbelow(80_000) + 10_000}"  # unique: the scan sees other sessions' processes
    task = asyncio.create_task(one.shell(sleep, call_id="probed"))
    await wait_processes(lambda c: c == sleep)
    assert await probe_host(one.nc, one.topo, "h1", "probed") is True
    assert await probe_host(one.nc, one.topo, "h1", "not-running") is False
    assert await probe_host(one.nc, one.topo, "h1") is True
    assert await probe_host(one.nc, one.topo, "nobody-here", timeout=1.0) is False
    disguised = ToolCallRequest(call_id="probed", user_id="u1", task_id="t", run_id="r", tool="__probe__", args={},
                                cwd="", timeout=0.0)
    reply = decode((await one.request(one.topo.exec_cancel_subject("h1"), encode(disguised), timeout=5)).data,
                   ToolCallReply)
    assert not reply.ok and reply.error.startswith("bad request")
    await one.client.cancel("probed", "h1")
    assert not (await asyncio.wait_for(task, 5)).ok


async def test_micro_stats_describe_the_calls(one: Stack) -> None:
    """`$SRV.STATS` times the calls themselves (not their hand-off to a task), counts the ones in
    flight and the ones that failed as requests."""
    async def stats() -> dict[str, dict[str, Any]]:
        msg = await one.nc.request(f"$SRV.STATS.{one.topo.executor_service_name}", b"", timeout=5)
        return {e["name"]: e for e in json.loads(msg.data)["endpoints"]}

    def total(snapshot: dict[str, dict[str, Any]], key: str) -> int:
        return sum(e[key] if key in e else e["data"][key] for e in snapshot.values())

    before = await stats()
    sleep = f"sleep 0.4{secrets.randbelow(10**6):06d}"  # unique: the scan sees other sessions' processes
    slow = asyncio.create_task(one.shell(f"{sleep}; echo done"))
    await wait_processes(lambda c: c == sleep)
    assert total(await stats(), "in_flight") == 1
    assert (await slow).ok
    bad = decode((await one.request(one.topo.exec_any_subject(), b"garbage", timeout=5)).data, ToolCallReply)
    assert not bad.ok
    deadline = time.monotonic() + 2
    while total(after := await stats(), "in_flight") and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert total(after, "in_flight") == 0
    assert total(after, "num_requests") - total(before, "num_requests") == 2
    assert total(after, "processing_time") - total(before, "processing_time") >= 0.4e9  # ns, the call's own time
    assert after["any"]["num_errors"] == before["any"]["num_errors"] + 1
    assert after["any"]["last_error"].startswith("bad request")
    assert total(after, "num_errors") - total(before, "num_errors") == 1  # the slow call answered normally


async def test_drain_finishes_short_calls_and_kills_the_rest(stack: Stack) -> None:
    svc = await stack.executor("h1", drain_grace_seconds=1.5)
    tag = f"{secrets.randbelow(10**6):06d}"  # unique: the scan sees other tests' and workers' processes
    short_cmd, long_cmd = f"sleep 0.7{tag}", f"sleep 40.{tag}"
    short = asyncio.create_task(stack.shell(f"{short_cmd}; echo finished"))
    long = asyncio.create_task(stack.shell(long_cmd, user="u2"))
    await wait_processes(lambda c: c in (short_cmd, long_cmd), count=2)
    await drain(stack, svc)
    r = await short
    assert r.ok and r.output.strip() == "finished"
    r = await long
    assert not r.ok and "shutting down" in r.error
    assert await wait_no_processes(lambda c: c in (short_cmd, long_cmd), timeout=3) == []
    r = await stack.shell("echo after")
    assert not r.ok and "executor unavailable" in r.error
    kv = await stack.nc.jetstream().key_value(stack.topo.sandbox_leases_bucket)
    with pytest.raises(KeyNotFoundError):
        await kv.get("u1")  # released on drain: the user may go anywhere at once


async def test_latency_cold_and_warm(one: Stack, record_property) -> None:
    colds = []
    for i in range(3):
        started = time.perf_counter()
        r = await one.call("glob", {"pattern": "*"}, user=f"cold{i}")
        colds.append(time.perf_counter() - started)
        assert r.ok
    written = await one.call("write", {"path": "f.txt", "content": "warm read\n"}, user="cold0")
    assert written.ok, written.error
    warm = []
    for _ in range(100):
        started = time.perf_counter()
        r = await one.call("read", {"path": "f.txt"}, user="cold0")
        warm.append(time.perf_counter() - started)
    p50 = statistics.median(warm)
    record_property("cold_ms", [round(c * 1000, 1) for c in colds])
    record_property("warm_p50_ms", round(p50 * 1000, 3))
    print(f"\ncold first call (through NATS): {[round(c * 1000, 1) for c in colds]} ms; warm fs p50: {p50 * 1000:.2f} ms")
    # Targets (cold <= 100 ms, warm fs p50 <= 2 ms) are measured and recorded, not asserted: speed lives in
    # bench/ (a loaded CI machine measured 4.2 ms); the test checks that every call was served.
    assert r.ok and "warm read" in r.output, r


async def test_client_timeout_and_metrics(one: Stack) -> None:
    # a warm sandbox: a new user's first call also starts the sandbox and makes the user's venv,
    # which the 0.5 s client margin below is not meant to cover
    assert (await one.shell("true")).ok
    client = ExecutorClient(one.nc, one.topo, margin=0.5, probe_interval=0.3)
    req = ToolCallRequest(call_id="slow", user_id="u1", task_id="t", run_id="r", tool="shell",
                          args={"command": "sleep 3"}, cwd="task", timeout=0.5)
    r = await client.call(granted(req))
    assert not r.ok and "timed out" in r.error  # the executor's own limit answers first
    from prometheus_client import REGISTRY

    assert REGISTRY.get_sample_value("zcbot_tool_calls_total", {"tool": "shell", "outcome": "timeout"}) >= 1
    assert REGISTRY.get_sample_value("zcbot_executor_sandboxes") >= 1


async def test_real_process_metrics_and_sigterm_drain(stack: Stack) -> None:
    import urllib.request

    proc = ExecutorProcess(stack.url, stack.topo, stack.root, "hs", {})
    try:
        await proc.wait_ready(stack.nc)
        assert (await stack.shell("echo hi")).ok
        sleep = f"sleep 1.{secrets.randbelow(10**6):06d}"  # unique: the scan sees other tests' processes
        slow = asyncio.create_task(stack.shell(f"{sleep}; echo drained-ok"))
        await wait_processes(lambda c: c == sleep)
        port = proc.env["ZCBOT_EXECUTOR_PORT"]
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())
        assert 'zcbot_tool_calls_total{outcome="ok",tool="shell"} 1.0' in body
        assert "zcbot_tool_call_seconds_bucket" in body and "zcbot_executor_sandboxes 1.0" in body
        proc.proc.send_signal(15)  # SIGTERM: the in-flight call still finishes
        r = await asyncio.wait_for(slow, 15)
        assert r.ok and r.output.strip() == "drained-ok"
        assert await asyncio.to_thread(proc.proc.wait, 20) == 0
        kv = await stack.nc.jetstream().key_value(stack.topo.sandbox_leases_bucket)
        with pytest.raises(KeyNotFoundError):
            await kv.get("u1")
    finally:
        proc.kill()


async def test_idle_sandboxes_are_reaped_and_leases_released(stack: Stack) -> None:
    svc = await stack.executor("h1", idle_seconds=0.6)
    assert (await stack.shell("echo warm")).ok
    box = svc.pool.sandboxes["u1"]
    kv = await stack.nc.jetstream().key_value(stack.topo.sandbox_leases_bucket)
    assert (await kv.get("u1")).value == b"h1"
    # The pool forgets the sandbox first, then closes it (waits for its exit), then releases the
    # lease: wait for all three, not only the first.
    deadline = time.monotonic() + 10
    while "u1" in svc.pool.sandboxes or box.proc.returncode is None:
        assert time.monotonic() < deadline, ("idle sandbox was not reaped", box.alive, box.proc.returncode)
        await asyncio.sleep(0.1)
    assert not box.alive
    while True:
        try:
            await kv.get("u1")
        except KeyNotFoundError:
            break
        assert time.monotonic() < deadline, "the lease outlived the reaped sandbox"
        await asyncio.sleep(0.1)
    r = await stack.shell("echo cold-again")  # a fresh sandbox on the next call
    assert r.ok and r.output.strip() == "cold-again"


async def test_a_call_sent_just_before_an_executor_serves_is_answered(stack: Stack) -> None:
    """A moment of "no responders" is not "no executor": the client retries the unassigned subject for
    `NO_RESPONDERS_GRACE_SECONDS` (an executor that has just started); only after that is it unavailable."""
    late = await nats.connect(stack.url)

    async def answer(msg: Any) -> None:
        req = decode(msg.data, ToolCallRequest)
        await msg.respond(encode(ToolCallReply(call_id=req.call_id, ok=True, output="late but here", error="",
                                               meta={}, host="hL")))

    async def serve_soon() -> None:
        await asyncio.sleep(0.2)
        await late.subscribe(stack.topo.exec_any_subject(), cb=answer)
        await late.flush()

    try:
        serving = asyncio.create_task(serve_soon())
        r = await stack.shell("echo hi")
        await serving
        assert r.ok and r.output == "late but here" and r.host == "hL", r
        await late.drain()
        started = time.monotonic()
        r = await stack.shell("echo nobody")
        assert not r.ok and "executor unavailable" in r.error, r
        assert NO_RESPONDERS_GRACE_SECONDS <= time.monotonic() - started < NO_RESPONDERS_GRACE_SECONDS + 2
    finally:
        if not late.is_closed:
            await late.close()
