"""The runner's event sink on a real JetStream: deltas are merged at most every DELTA_INTERVAL, the
first after a quiet spell goes out at once, other events keep their order."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from tests.helpers.stream import stored_events as _stored
from tests.helpers.stream import stored_raw as _stored_raw
from zcbot_core.bus import Topology, decode
from zcbot_core.bus import events as ev
from zcbot_core.bus.topology import connect, ensure_topology
from zcbot_runner import sink as sink_module
from zcbot_runner.sink import BusEventSink


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


async def _refuse_new_events(js, topo: Topology) -> None:  # type: ignore[no-untyped-def]
    """The events stream refuses every publish (503 `maximum messages exceeded`), as a stream
    without a leader does: nothing is stored until `_accept_events`."""
    info = await js.stream_info(topo.events_stream)
    config = info.config
    config.max_msgs, config.discard = max(int(info.state.messages), 1), "new"
    if not info.state.messages:
        await js.publish(topo.event_subject("filler"), b"x")
    await js.update_stream(config)


async def _accept_events(js, topo: Topology) -> None:  # type: ignore[no-untyped-def]
    config = (await js.stream_info(topo.events_stream)).config
    config.max_msgs, config.discard = -1, "old"
    await js.update_stream(config)


async def test_refused_publishes_are_retried_in_order_before_flush_returns(nats_server_url: str,
                                                                          bus_prefix: str) -> None:
    """Issue 23 item 3: while the stream refuses events the loop goes on (emit does not wait for acks),
    nothing is reordered or dropped, and `flush` (what the runner awaits before the run's end and
    `done`) returns only once every event is stored, each once."""
    topo = Topology(bus_prefix)
    nc = await connect(nats_server_url, "sink-refused")
    try:
        js = nc.jetstream()
        await ensure_topology(js, topo)
        sink = BusEventSink(js, topo, "task2", "run2", retry_seconds=20)
        await sink.emit(ev.RunStart(run_id="run2", task_id="task2"))
        await sink.flush()
        await _refuse_new_events(js, topo)
        t0 = asyncio.get_running_loop().time()
        for i in range(20):
            await sink.emit(ev.ToolCallEvent(run_id="run2", call_id=f"c{i}", name="t", args={}, args_preview=""))
            await sink.emit(ev.TextDelta(run_id="run2", delta=f"d{i} "))
        assert asyncio.get_running_loop().time() - t0 < 1.0  # the loop was not held by the refusals
        restore = asyncio.get_running_loop().call_later(1.5, lambda: asyncio.ensure_future(_accept_events(js, topo)))
        await sink.emit(ev.Done(run_id="run2", status="ok"))
        await sink.flush()
        restore.cancel()
        raws = await _stored_raw(js, topo, "task2")
    finally:
        await nc.close()
    events = [decode(r.data, ev.RunEvent) for r in raws]
    assert sink.lost == 0 and sink.republished > 0
    assert isinstance(events[0], ev.RunStart) and isinstance(events[-1], ev.Done)
    calls = [e.call_id for e in events if isinstance(e, ev.ToolCallEvent)]
    assert calls == [f"c{i}" for i in range(20)]
    assert "".join(e.delta for e in events if isinstance(e, ev.TextDelta)) == "".join(f"d{i} " for i in range(20))
    kinds = [type(e).__name__ for e in events]  # each delta stays between the calls it was emitted between
    assert kinds[1:-1] == ["ToolCallEvent", "TextDelta"] * 20
    ids = [r.headers["Nats-Msg-Id"] for r in raws]
    # Each event's id is the attempt and its place; the `done`'s is the run's own (`events.done_msg_id`).
    assert ids == [*(f"run2:1:{n}" for n in range(1, len(raws))), "run2:done"]


async def test_a_lost_ack_is_republished_and_deduplicated(nats_server_url: str, bus_prefix: str,
                                                          monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Acks lost on the way back (each event stored, its first ack never seen by the publisher):
    every event is sent again under its Nats-Msg-Id and JetStream keeps one copy; the order is the
    emission order. (The ack is dropped after the real publish, not raced against a 0.2 ms wait,
    which a quiet machine's acks beat.)"""
    from nats.errors import TimeoutError as NatsTimeoutError

    topo = Topology(bus_prefix)
    nc = await connect(nats_server_url, "sink-dedupe")
    try:
        js = nc.jetstream()
        await ensure_topology(js, topo)
        real_publish, acked_once = js.publish, set()

        async def ack_lost_the_first_time(subject: str, payload: bytes = b"", **kwargs: Any) -> Any:
            ack = await real_publish(subject, payload, **kwargs)
            msg_id = (kwargs.get("headers") or {}).get("Nats-Msg-Id")
            if msg_id not in acked_once:
                acked_once.add(msg_id)
                raise NatsTimeoutError
            return ack

        monkeypatch.setattr(js, "publish", ack_lost_the_first_time)
        sink = BusEventSink(js, topo, "task3", "run3", attempt=2)
        for i in range(15):
            await sink.emit(ev.Warn(run_id="run3", msg=f"w{i}"))
        await sink.emit(ev.Done(run_id="run3", status="ok"))
        await sink.flush()
        raws = await _stored_raw(js, topo, "task3")
    finally:
        await nc.close()
    events = [decode(r.data, ev.RunEvent) for r in raws]
    assert sink.republished > 0 and sink.lost == 0
    assert [e.msg for e in events if isinstance(e, ev.Warn)] == [f"w{i}" for i in range(15)]
    assert len(events) == 16 and isinstance(events[-1], ev.Done)
    assert [r.headers["Nats-Msg-Id"] for r in raws] == [*(f"run3:2:{n}" for n in range(1, 16)), "run3:done"]


async def test_events_that_cannot_be_stored_are_counted_never_silently_dropped(nats_server_url: str,
                                                                               bus_prefix: str) -> None:
    topo = Topology(bus_prefix)
    nc = await connect(nats_server_url, "sink-lost")
    try:
        js = nc.jetstream()
        await ensure_topology(js, topo)
        await _refuse_new_events(js, topo)
        sink = BusEventSink(js, topo, "task4", "run4", retry_seconds=0.6)
        t0 = asyncio.get_running_loop().time()
        for i in range(5):
            await sink.emit(ev.Warn(run_id="run4", msg=f"w{i}"))
        await sink.flush()
        elapsed = asyncio.get_running_loop().time() - t0
        await _accept_events(js, topo)
        await sink.emit(ev.Done(run_id="run4", status="error"))  # stored again once the stream takes it
        await sink.flush()
        events = [decode(r.data, ev.RunEvent) for r in await _stored_raw(js, topo, "task4")]
    finally:
        await nc.close()
    assert sink.lost == 5
    assert elapsed < 5  # one outage budget in all, not one per event
    assert [type(e) for e in events] == [ev.Done]


async def test_a_discarded_sink_drops_what_is_queued_and_publishes_nothing_more(nats_server_url: str,
                                                                                  bus_prefix: str) -> None:
    """A run taken over by another runner (issue 23): the events still queued behind a slow ack are
    dropped, later emits are no-ops and `flush` returns at once."""
    topo = Topology(bus_prefix)
    async with contextlib.AsyncExitStack() as closing:
        nc = await connect(nats_server_url, "sink-discard")
        closing.push_async_callback(nc.close)
        await ensure_topology(nc.jetstream(), topo)
        sink = BusEventSink(nc.jetstream(), topo, "task5", "run5")
        await sink.emit(ev.RunStart(run_id="run5", task_id="task5", model_profile="fake", attempt=1))
        await sink.flush()
        for i in range(50):  # queued faster than they are acked
            await sink.emit(ev.Warn(run_id="run5", msg=f"w{i}"))
        sink.discard()
        await sink.emit(ev.TextDelta(run_id="run5", delta="late"))
        await sink.emit(ev.Done(run_id="run5", status="ok"))
        await asyncio.wait_for(sink.flush(), 1)
        sent = sink.seq
        await asyncio.sleep(0.3)  # a delta timer or a publisher still running would send by now
        events = await _stored(nc.jetstream(), topo, "task5")
    assert sink.seq == sent and sent <= 2  # RunStart, at most one Warn in flight
    assert isinstance(events[0], ev.RunStart) and len(events) <= sent
    assert not any(isinstance(e, (ev.Done, ev.TextDelta)) for e in events)


async def test_a_superseded_attempts_late_event_is_refused_by_the_stream(nats_server_url: str,
                                                                          bus_prefix: str) -> None:
    """Issue 42 (seed 4201, a paused stream leader): attempt 1's publish reached the stream after
    attempt 2 had started streaming (it was in a stalled server's socket), so the client read a chunk of
    the dead attempt in the middle of the new answer. Every event after a sink's first is published only
    if the sink's previous event is still the task's last: the late one is refused and counted lost,
    attempt 2's events go on."""
    topo = Topology(bus_prefix)
    async with contextlib.AsyncExitStack() as closing:
        nc = await connect(nats_server_url, "sink-fence")
        closing.push_async_callback(nc.close)
        js = nc.jetstream()
        await ensure_topology(js, topo)
        first = BusEventSink(js, topo, "task6", "run6", attempt=1)
        await first.emit(ev.RunStart(run_id="run6", task_id="task6", model_profile="fake", attempt=1))
        await first.emit(ev.Warn(run_id="run6", msg="a1"))
        await first.flush()
        second = BusEventSink(js, topo, "task6", "run6", attempt=2)
        await second.emit(ev.RunStart(run_id="run6", task_id="task6", model_profile="fake", attempt=2))
        await second.flush()
        await first.emit(ev.Warn(run_id="run6", msg="late from attempt 1"))
        await first.flush()
        await second.emit(ev.Warn(run_id="run6", msg="a2"))
        await second.emit(ev.Done(run_id="run6", status="ok"))
        await second.flush()
        raws = await _stored_raw(js, topo, "task6")
    assert first.lost == 1 and second.lost == 0
    # (a `done` carries the run's own id, whichever attempt sends it: a second copy is dropped)
    assert [r.headers["Nats-Msg-Id"] for r in raws] == ["run6:1:1", "run6:1:2", "run6:2:1", "run6:2:2", "run6:done"]


async def test_a_stale_runners_late_run_start_is_refused_and_a_new_attempt_starts_after_older_events(
        nats_server_url: str, bus_prefix: str) -> None:
    """Issue 42: the fence covers a sink's first event too. It expects the subject's end when the run
    was queued (`events_from`): a superseded attempt's `run_start` that reaches the stream after the
    next attempt took the run over is refused (it used to land inside the new answer, unfenced). A new
    attempt whose `run_start` meets older events (a previous run's late `done`, the old attempt's
    events) goes after them."""
    topo = Topology(bus_prefix)
    async with contextlib.AsyncExitStack() as closing:
        nc = await connect(nats_server_url, "sink-fence-first")
        closing.push_async_callback(nc.close)
        js = nc.jetstream()
        await ensure_topology(js, topo)
        previous = await js.publish(topo.event_subject("task7"), b"x", headers={"Nats-Msg-Id": "run0:done"})
        queued_at = previous.seq + 1  # the run's `run_events_from`
        # The previous run's `done` again, later than the queueing (its runner died after the end).
        await js.publish(topo.event_subject("task7"), b"y", headers={"Nats-Msg-Id": "run0:again"})
        stale = BusEventSink(js, topo, "task7", "run7", attempt=1, events_from=queued_at)
        taken = BusEventSink(js, topo, "task7", "run7", attempt=2, events_from=queued_at)
        await taken.emit(ev.RunStart(run_id="run7", task_id="task7", model_profile="fake", attempt=2))
        await taken.emit(ev.Warn(run_id="run7", msg="a2"))
        await taken.flush()
        await stale.emit(ev.RunStart(run_id="run7", task_id="task7", model_profile="fake", attempt=1))
        await stale.flush()  # late: attempt 2 wrote the subject since
        await stale.emit(ev.Warn(run_id="run7", msg="late from attempt 1"))
        await stale.flush()
        await taken.emit(ev.Done(run_id="run7", status="ok"))
        await taken.flush()
        # Another task: the old attempt's run_start got in first; the new attempt goes after it.
        older = BusEventSink(js, topo, "task8", "run8", attempt=1, events_from=0)
        newer = BusEventSink(js, topo, "task8", "run8", attempt=2, events_from=0)
        await older.emit(ev.RunStart(run_id="run8", task_id="task8", model_profile="fake", attempt=1))
        await older.flush()
        await newer.emit(ev.RunStart(run_id="run8", task_id="task8", model_profile="fake", attempt=2))
        await newer.emit(ev.Done(run_id="run8", status="ok"))
        await newer.flush()
        await older.emit(ev.Warn(run_id="run8", msg="late from attempt 1"))
        await older.flush()
        seven = [r.headers["Nats-Msg-Id"] for r in await _stored_raw(js, topo, "task7")]
        eight = [r.headers["Nats-Msg-Id"] for r in await _stored_raw(js, topo, "task8")]
    assert stale.lost == 2 and taken.lost == 0 and newer.lost == 0 and older.lost == 1
    assert seven == ["run0:done", "run0:again", "run7:2:1", "run7:2:2", "run7:done"]
    assert eight == ["run8:1:1", "run8:2:1", "run8:done"]
