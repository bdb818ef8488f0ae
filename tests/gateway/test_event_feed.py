"""The gateway's event feed on a real JetStream: the sequence it gives a message being submitted
(`events_from`, so the submit need not ask JetStream) is at or before every event published after it,
and it gives none while the feed is not live."""

from __future__ import annotations

import asyncio

from zcbot_core.bus import encode
from zcbot_core.bus import events as ev
from zcbot_core.platform.service import Runtime
from zcbot_gateway.sse import EventHub


async def publish(rt: Runtime, task_id: str, n: int) -> list[int]:
    seqs = []
    for i in range(n):
        ack = await rt.js.publish(rt.topo.event_subject(task_id), encode(ev.RunStart(run_id=f"r{i}", task_id=task_id)))
        seqs.append(int(ack.seq))
    return seqs


async def test_events_from_is_at_or_before_every_later_event(rt: Runtime) -> None:
    earlier = await publish(rt, "t-old", 3)  # before the feed starts: it begins from the stream's end
    hub = EventHub(rt)
    assert hub.events_from() is None  # not live yet
    await hub.start()
    try:
        assert hub.events_from() == earlier[-1] + 1
        for _ in range(5):
            bound = hub.events_from()
            assert bound is not None
            later = await publish(rt, "t-new", 2)
            assert min(later) >= bound
        async with asyncio.timeout(5):  # once received, the bound moves up to right after the last event
            while hub.events_from() != later[-1] + 1:
                await asyncio.sleep(0.01)
    finally:
        await hub.stop()
    assert hub.events_from() is None  # stopping: a submit asks JetStream instead


async def test_the_live_feed_recovers_quickly_when_its_consumer_is_lost(rt: Runtime) -> None:
    """The events stream's leader dies and its ephemeral ordered consumer with it (here: the
    consumer is deleted on the server, which is what the client sees): the next event still
    reaches a subscriber within ~2 s, not after nats-py's ~10 s of missed heartbeats (issue 23 item 6)."""
    hub = EventHub(rt)
    await hub.start()
    sub = hub.register("t-lost")
    try:
        await publish(rt, "t-lost", 1)
        async with asyncio.timeout(5):
            while not sub.pending:
                await asyncio.sleep(0.01)
        sub.pending.clear()
        info = await hub._sub.consumer_info()  # type: ignore[union-attr]
        await rt.js.delete_consumer(rt.topo.events_stream, info.name)
        await asyncio.sleep(0.2)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        (seq,) = await publish(rt, "t-lost", 1)
        async with asyncio.timeout(6):
            while not any(item is not None and item.seq == seq for item in sub.pending):
                await asyncio.sleep(0.01)
        assert loop.time() - t0 < 2.5
    finally:
        hub.unregister(sub)
        await hub.stop()


async def _frames(hub: EventHub, task_id: str, timeout: float = 20) -> list[str]:
    from zcbot_gateway.sse import StreamPlan, stream_events

    out: list[str] = []
    async with asyncio.timeout(timeout):
        async for frame in stream_events(hub, task_id, StreamPlan(start_seq=1, run_id=None, idle_when_caught_up=True)):
            out.append(frame.decode() if isinstance(frame, bytes) else frame)
    return out


async def test_a_history_read_that_keeps_failing_ends_cleanly_with_a_reconnect_hint(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """NATS goes away during a replay: the read is retried, then the stream ends with an SSE `error`
    and a reconnect hint, never a cut body; with NATS back within the retry time the replay just
    completes (issue 23 item 6)."""
    from types import SimpleNamespace

    from zcbot_core.bus import Topology
    from zcbot_core.bus.topology import connect, ensure_topology
    from zcbot_devstack.embedded import EmbeddedNats, free_port
    from zcbot_gateway import sse as sse_module

    server = EmbeddedNats(tmp_path / "nats", port=free_port()).start()
    nc = await connect(server.url, "history-test")
    try:
        topo = Topology("hist")
        js = nc.jetstream()
        await ensure_topology(js, topo)
        fake_rt = SimpleNamespace(js=js, topo=topo, nc=nc)
        for i in range(3):
            await js.publish(topo.event_subject("t-h"), encode(ev.Warn(run_id="r1", msg=f"w{i}")))
        hub = EventHub(fake_rt)  # type: ignore[arg-type]
        frames = await _frames(hub, "t-h")
        assert sum("event: warn" in f for f in frames) == 3 and "idle" in frames[-1]

        await asyncio.to_thread(server.stop)  # down for longer than the retries
        monkeypatch.setattr(sse_module, "HISTORY_RETRY_SECONDS", 1.0)
        frames = await _frames(hub, "t-h")
        assert "event: error" in frames[-1] and '"code": "events_unavailable"' in frames[-1]
        assert frames[-1].endswith(": reconnect\n\n")

        monkeypatch.setattr(sse_module, "HISTORY_RETRY_SECONDS", 15.0)  # back within the retries
        asyncio.get_running_loop().call_later(0.5, server.start)
        frames = await _frames(hub, "t-h")
        assert sum("event: warn" in f for f in frames) == 3 and "idle" in frames[-1]
    finally:
        await nc.close()
        server.stop()
