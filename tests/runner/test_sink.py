"""The runner's event sink on a real JetStream: deltas are merged at most every DELTA_INTERVAL, the
first after a quiet spell goes out at once, other events keep their order."""

from __future__ import annotations

import asyncio

from zcbot_core.bus import Topology, decode
from zcbot_core.bus import events as ev
from zcbot_core.bus.topology import connect, ensure_topology
from zcbot_runner import sink as sink_module
from zcbot_runner.sink import BusEventSink


async def _stored(js, topo: Topology, task_id: str) -> list[ev.RunEvent]:  # type: ignore[no-untyped-def]
    out, seq = [], 1
    while True:
        try:
            raw = await js.get_msg(topo.events_stream, seq=seq, subject=topo.event_subject(task_id), next=True)
        except Exception:
            return out
        out.append(decode(raw.data, ev.RunEvent))
        seq = raw.seq + 1


async def test_deltas_are_throttled_with_a_leading_edge(nats_server_url: str, bus_prefix: str) -> None:
    topo = Topology(bus_prefix)
    nc = await connect(nats_server_url, "sink-test")
    try:
        js = nc.jetstream()
        await ensure_topology(js, topo)
        sink = BusEventSink(js, topo, "task1", "run1")
        await sink.emit(ev.RunStart(run_id="run1", task_id="task1", model_profile="fake", attempt=1))
        for i in range(30):  # a model streaming ~30 chunks/s for 1 s
            await sink.emit(ev.TextDelta(run_id="run1", delta=f"w{i} "))
            await asyncio.sleep(1 / 30)
        await sink.emit(ev.Done(run_id="run1", status="ok"))
        await sink.flush()
        events = await _stored(js, topo, "task1")
    finally:
        await nc.close()
    deltas = [e for e in events if isinstance(e, ev.TextDelta)]
    assert "".join(d.delta for d in deltas) == "".join(f"w{i} " for i in range(30))
    interval = sink_module.DELTA_INTERVAL_SECONDS
    assert 5 <= len(deltas) <= int(1.0 / interval) + 3  # ~10 merged events, not 30
    assert deltas[0].delta == "w0 "  # the first went out alone, at once (not held for the interval)
    assert max(len(d.delta.split()) for d in deltas) <= 5  # later ones merge about interval x 30 chunks
    assert isinstance(events[0], ev.RunStart) and isinstance(events[-1], ev.Done)
