"""SSE relay of run events from JetStream (DESIGN §3, §4).

One ordered JetStream consumer per gateway process receives every new event and fans it out in
process to the subscribers of its task (so 1000 browsers cost one NATS subscription). A new
subscriber registers for live events first, then replays the stored history from its start
sequence with direct gets, then continues live, skipping sequences it already sent: nothing is
missed and nothing is sent twice. The SSE `id:` is the stream sequence, so `Last-Event-ID`
resumes exactly.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass

from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError
from prometheus_client import Gauge

from zcbot_core.bus import BusDecodeError, decode
from zcbot_core.bus import events as ev
from zcbot_core.service import Runtime

log = logging.getLogger(__name__)
ACTIVE_STREAMS = Gauge("zcbot_sse_active_streams", "Open SSE streams on this gateway")
QUEUE_LIMIT = 10_000
RECONNECT_POLL_SECONDS = 0.25


@dataclass
class StoredEvent:
    seq: int
    event: ev.RunEvent
    _frame: bytes | None = None

    @property
    def frame(self) -> bytes:
        """The SSE frame, encoded once however many subscribers receive it."""
        if self._frame is None:
            text = f"id: {self.seq}\nevent: {self.event.type}\ndata: {self.event.sse_data()}\n\n"
            self._frame = text.encode()
        return self._frame


class Subscriber:
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.queue: asyncio.Queue[StoredEvent | None] = asyncio.Queue(QUEUE_LIMIT)
        self.overflowed = False


class EventHub:
    """The process-wide live feed. Its ordered consumer is ephemeral: a NATS server restart loses it,
    and nats-py would only notice after two missed idle heartbeats (~10 s of silence for every SSE
    client). So after each reconnect the hub subscribes again from the sequence after the last one
    it saw; subscribers skip what they already sent, so nothing is lost or repeated."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.subscribers: dict[str, set[Subscriber]] = defaultdict(set)
        self._sub = None
        self._last_seq = 0
        self._watch: asyncio.Task[None] | None = None
        self.closing = asyncio.Event()

    async def start(self) -> None:
        info = await self.rt.js.stream_info(self.rt.topo.events_stream)
        self._last_seq = int(info.state.last_seq)
        await self._subscribe(None)
        self._watch = asyncio.create_task(self._resubscribe_after_reconnects())

    async def _subscribe(self, start_seq: int | None) -> None:
        if start_seq is None:  # from now on
            config = ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
        else:
            config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start_seq)
        self._sub = await self.rt.js.subscribe(
            self.rt.topo.events_wildcard(), ordered_consumer=True, config=config, cb=self._on_msg,
            stream=self.rt.topo.events_stream,
        )

    async def _resubscribe_after_reconnects(self) -> None:
        nc = self.rt.nc
        seen = nc.stats["reconnects"]
        while not self.closing.is_set():
            await asyncio.sleep(RECONNECT_POLL_SECONDS)
            if nc.stats["reconnects"] == seen or not nc.is_connected:
                continue
            try:
                old, self._sub = self._sub, None
                if old is not None:  # first, so two feeds never interleave (a subscriber could skip a gap)
                    try:
                        await old.unsubscribe()
                    except Exception:
                        pass
                info = await self.rt.js.stream_info(self.rt.topo.events_stream)
                start = min(self._last_seq, int(info.state.last_seq)) + 1  # (the stream may have been lost)
                await self._subscribe(start)
                seen = nc.stats["reconnects"]
                log.info("event feed resubscribed after a NATS reconnect", extra={"from_seq": start})
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # JetStream not ready yet after a server restart: retry
                log.warning("event feed resubscribe failed; retrying", extra={"error": repr(exc)})
                await asyncio.sleep(0.5)

    async def stop(self) -> None:
        if self.closing.is_set():
            return
        self.closing.set()
        if self._watch is not None:
            self._watch.cancel()
        for subs in list(self.subscribers.values()):
            for sub in list(subs):
                sub.overflowed = True  # wakes on the next item or heartbeat and ends with a reconnect hint
                if not sub.queue.full():
                    sub.queue.put_nowait(None)
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:
                pass

    async def _on_msg(self, msg) -> None:  # type: ignore[no-untyped-def]
        task_id = self.rt.topo.task_of_event_subject(msg.subject)
        subs = self.subscribers.get(task_id)
        if not subs:
            return
        try:
            event = decode(msg.data, ev.RunEvent)
        except BusDecodeError:
            return
        stored = StoredEvent(seq=msg.metadata.sequence.stream, event=event)
        self._last_seq = max(self._last_seq, stored.seq)
        for sub in list(subs):
            try:
                sub.queue.put_nowait(stored)
            except asyncio.QueueFull:
                sub.overflowed = True  # a stalled client: it resumes from the stream via Last-Event-ID

    def register(self, task_id: str) -> Subscriber:
        sub = Subscriber(task_id)
        if self.closing.is_set():
            sub.overflowed = True
        self.subscribers[task_id].add(sub)
        ACTIVE_STREAMS.inc()
        return sub

    def unregister(self, sub: Subscriber) -> None:
        subs = self.subscribers.get(sub.task_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                self.subscribers.pop(sub.task_id, None)
        ACTIVE_STREAMS.dec()

    async def history(self, task_id: str, start_seq: int) -> AsyncIterator[StoredEvent]:
        """Stored events of the task from `start_seq` on, until caught up."""
        seq = max(start_seq, 1)
        subject = self.rt.topo.event_subject(task_id)
        while True:
            try:
                raw = await self.rt.js.get_msg(self.rt.topo.events_stream, seq=seq, subject=subject, next=True)
            except NotFoundError:
                return
            try:
                event = decode(raw.data or b"", ev.RunEvent)
            except BusDecodeError:
                seq = raw.seq + 1
                continue
            yield StoredEvent(seq=raw.seq, event=event)
            seq = raw.seq + 1


def done_frame(run_id: str | None, status: str) -> str:
    event = ev.Done(run_id=run_id or "", status=status)
    return f"event: done\ndata: {event.sse_data()}\n\n"


@dataclass
class StreamPlan:
    """Where a subscriber starts and which run it follows (None: the first run it meets)."""

    start_seq: int
    run_id: str | None
    idle_when_caught_up: bool


async def stream_events(hub: EventHub, task_id: str, plan: StreamPlan, heartbeat: float) -> AsyncIterator[str | bytes]:
    sub = hub.register(task_id)
    last_sent = plan.start_seq - 1
    follow = plan.run_id
    try:
        yield "retry: 1000\n\n"
        async for stored in hub.history(task_id, plan.start_seq):
            last_sent = stored.seq
            if follow and stored.event.run_id != follow:
                continue
            yield stored.frame
            if isinstance(stored.event, ev.Done) and (follow is None or stored.event.run_id == follow):
                return
        if plan.idle_when_caught_up:
            yield done_frame(follow, "idle")
            return
        while True:
            try:
                stored = await asyncio.wait_for(sub.queue.get(), heartbeat)
            except asyncio.TimeoutError:
                if sub.overflowed:
                    yield ": reconnect\n\n"
                    return
                yield ": keep-alive\n\n"
                continue
            if stored is None or sub.overflowed:
                # Shutting down (or this client fell too far behind): ask it to reconnect; it
                # resumes from its Last-Event-ID on any gateway and misses nothing.
                yield ": reconnect\n\n"
                return
            if stored.seq <= last_sent:
                continue
            last_sent = stored.seq
            if follow and stored.event.run_id != follow:
                continue
            yield stored.frame
            if isinstance(stored.event, ev.Done):
                return
    finally:
        hub.unregister(sub)
