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
import json
import logging
from collections import defaultdict, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError
from prometheus_client import Counter, Gauge

from zcbot_core.bus import BusDecodeError, decode
from zcbot_core.bus import events as ev
from zcbot_core.bus.retry import retry_until
from zcbot_core.platform.service import Runtime

log = logging.getLogger(__name__)
ACTIVE_STREAMS = Gauge("zcbot_sse_active_streams", "Open SSE streams on this gateway")
QUEUE_LIMIT = 10_000
FEED_RESUBSCRIBES = Counter("zcbot_sse_feed_resubscribes_total",
                            "Times the gateway's live event feed subscribed again", ["reason"])
RECONNECT_POLL_SECONDS = 0.25
# The feed is stuck when the stream moved on and it did not for this long (its ordered consumer died
# with the stream's leader); with the ordered consumer's own heartbeat check below, a leader change
# costs the live feed about this, not the ~10 s of nats-py's default (two missed 5 s heartbeats).
FEED_STALL_SECONDS = 1.0
FEED_IDLE_HEARTBEAT_SECONDS = 0.5
# A history read that times out (no stream leader for a moment) is retried this long, then the
# client gets a clean `error` event and a reconnect hint instead of a cut body.
HISTORY_RETRY_SECONDS = 5.0


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
    """One SSE stream's live backlog. The hub appends; the stream takes everything pending at each
    wake-up and writes it as one chunk, so a client that fell behind catches up in few writes.
    A plain deque and one waiter future, no timer: `asyncio.wait_for(queue.get(), heartbeat)` made
    a task and a timer per event per subscriber, the largest cost of a 1000-subscriber fan-out;
    keep-alives are due from the hub's one sweep instead."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.pending: deque[StoredEvent | None] = deque()
        self.overflowed = False
        self.keepalive_due = False
        self.last_activity = asyncio.get_running_loop().time()
        self._waiter: asyncio.Future[None] | None = None

    def push(self, item: StoredEvent | None) -> None:
        if item is not None and len(self.pending) >= QUEUE_LIMIT:
            self.overflowed = True  # a stalled client: it resumes from the stream via Last-Event-ID
        else:
            self.pending.append(item)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def want_keepalive(self, now: float, heartbeat: float) -> None:
        if not self.pending and now - self.last_activity >= heartbeat:
            self.keepalive_due = True
            self._wake()

    async def take(self, deadline: float | None = None) -> list[StoredEvent | None]:
        """Everything pending, waiting for something (or until `deadline`, loop time); [] when a
        keep-alive is due or the deadline passed."""
        loop = asyncio.get_running_loop()
        if not self.pending and not self.overflowed and not self.keepalive_due:
            self._waiter = loop.create_future()
            try:
                if deadline is None:
                    await self._waiter
                else:
                    async with asyncio.timeout_at(deadline):
                        await self._waiter
            except TimeoutError:
                return []
            finally:
                self._waiter = None
        self.keepalive_due = False
        self.last_activity = loop.time()
        items = list(self.pending)
        self.pending.clear()
        return items


class EventHub:
    """The process-wide live feed. Its ordered consumer is ephemeral: a NATS server restart loses it,
    and nats-py would only notice after two missed idle heartbeats (~10 s of silence for every SSE
    client). So after each reconnect the hub subscribes again from the sequence after the last one
    it saw; subscribers skip what they already sent, so nothing is lost or repeated."""

    def __init__(self, rt: Runtime, heartbeat: float = 15.0) -> None:
        self.rt = rt
        self.heartbeat = heartbeat
        self.subscribers: dict[str, set[Subscriber]] = defaultdict(set)
        self._sub = None
        self._last_seq = 0
        self._watch: asyncio.Task[None] | None = None
        self._keepalives: asyncio.Task[None] | None = None
        self.closing = asyncio.Event()

    async def start(self) -> None:
        info = await self.rt.js.stream_info(self.rt.topo.events_stream)
        self._last_seq = int(info.state.last_seq)
        await self._subscribe(None)
        self._watch = asyncio.create_task(self._resubscribe_after_reconnects())
        self._keepalives = asyncio.create_task(self._keepalive_sweep())

    async def _keepalive_sweep(self) -> None:
        """Streams silent for a heartbeat get a comment line (proxies close idle connections)."""
        loop = asyncio.get_running_loop()
        while not self.closing.is_set():
            await asyncio.sleep(self.heartbeat / 4)
            now = loop.time()
            for subs in list(self.subscribers.values()):
                for sub in list(subs):
                    sub.want_keepalive(now, self.heartbeat)

    async def _subscribe(self, start_seq: int | None) -> None:
        if start_seq is None:  # from now on
            config = ConsumerConfig(deliver_policy=DeliverPolicy.NEW, idle_heartbeat=FEED_IDLE_HEARTBEAT_SECONDS)
        else:
            config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start_seq,
                                    idle_heartbeat=FEED_IDLE_HEARTBEAT_SECONDS)
        self._sub = await self.rt.js.subscribe(
            self.rt.topo.events_wildcard(), ordered_consumer=True, config=config, cb=self._on_msg,
            stream=self.rt.topo.events_stream,
        )

    async def _resubscribe_after_reconnects(self) -> None:
        """The feed's watchdog, every RECONNECT_POLL_SECONDS: after a reconnect of this gateway's
        connection, and when the feed is stuck (the stream's last sequence moved past the feed's
        and the feed has not moved for FEED_STALL_SECONDS: its consumer died with the stream's
        leader, issue 23 item 6), the feed subscribes again after the last event it saw."""
        nc = self.rt.nc
        seen = nc.stats["reconnects"]
        loop = asyncio.get_running_loop()
        progress = (self._last_seq, loop.time())  # the feed's position and when it last moved
        while not self.closing.is_set():
            await asyncio.sleep(RECONNECT_POLL_SECONDS)
            if not nc.is_connected:
                continue
            reason = "reconnect" if nc.stats["reconnects"] != seen else None
            if reason is None:
                if self._last_seq != progress[0] or getattr(self._sub, "pending_msgs", 0):
                    # Moving, or only slow (messages received and waiting for this loop): not stuck.
                    progress = (self._last_seq, loop.time())
                    continue
                if loop.time() - progress[1] < FEED_STALL_SECONDS:
                    continue
                try:
                    last = int((await self.rt.js.stream_info(self.rt.topo.events_stream)).state.last_seq)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    continue  # no leader yet: asked again at the next poll
                if last <= self._last_seq:
                    progress = (self._last_seq, loop.time())  # idle, not stuck
                    continue
                reason = "stalled"
            try:
                await self._resubscribe(reason)
                seen = nc.stats["reconnects"]
                progress = (self._last_seq, loop.time())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # JetStream not ready yet after a server restart or election: retry
                log.warning("event feed resubscribe failed; retrying", extra={"error": repr(exc)})
                await asyncio.sleep(0.5)

    async def _resubscribe(self, reason: str) -> None:
        old, self._sub = self._sub, None
        if old is not None:  # first, so two feeds never interleave (a subscriber could skip a gap)
            try:
                await old.unsubscribe()
            except Exception:
                pass
        info = await self.rt.js.stream_info(self.rt.topo.events_stream)
        start = min(self._last_seq, int(info.state.last_seq)) + 1  # (the stream may have been lost)
        self._last_seq = start - 1  # keeps `events_from` a bound for a stream that restarted lower
        await self._subscribe(start)
        FEED_RESUBSCRIBES.labels(reason=reason).inc()
        log.info("event feed resubscribed", extra={"from_seq": start, "reason": reason})

    def events_from(self) -> int | None:
        """A stream sequence at or before every event still to be published: the run of a message
        submitted now has its events there or later. Known here without asking JetStream (None
        while the feed is not live, e.g. resubscribing after a reconnect)."""
        if self._sub is None or self.closing.is_set():
            return None
        return self._last_seq + 1

    async def stop(self) -> None:
        if self.closing.is_set():
            return
        self.closing.set()
        for task in (self._watch, self._keepalives):
            if task is not None:
                task.cancel()
        for subs in list(self.subscribers.values()):
            for sub in list(subs):
                sub.overflowed = True  # wakes and ends with a reconnect hint
                sub.push(None)
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:
                pass

    async def _on_msg(self, msg) -> None:  # type: ignore[no-untyped-def]
        seq = msg.metadata.sequence.stream
        self._last_seq = max(self._last_seq, seq)  # where to resume after a reconnect, watched or not
        task_id = self.rt.topo.task_of_event_subject(msg.subject)
        subs = self.subscribers.get(task_id)
        if not subs:
            return
        try:
            event = decode(msg.data, ev.RunEvent)
        except BusDecodeError:
            return
        stored = StoredEvent(seq=seq, event=event)
        for sub in list(subs):
            sub.push(stored)

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

    async def _read(self, seq: int, subject: str):  # type: ignore[no-untyped-def]
        """The next stored event of `subject` from `seq`, a timeout retried (NotFoundError: none)."""
        try:
            # Each retry at debug only: a replay waiting out an election is not worth a warning per try.
            return await retry_until(
                lambda _remaining: self.rt.js.get_msg(self.rt.topo.events_stream, seq=seq, subject=subject, next=True),
                retryable=lambda exc: not isinstance(exc, NotFoundError), deadline_seconds=HISTORY_RETRY_SECONDS,
                first_delay=0.1, max_delay=1.0, what="event history read", logger=log, level=logging.DEBUG)
        except NotFoundError:
            raise
        except Exception as exc:
            log.warning("event history unavailable", extra={"error": repr(exc)})
            raise HistoryUnavailable() from exc

    async def history(self, task_id: str, start_seq: int) -> AsyncIterator[StoredEvent]:
        """Stored events of the task from `start_seq` on, until caught up."""
        seq = max(start_seq, 1)
        subject = self.rt.topo.event_subject(task_id)
        while True:
            try:
                raw = await self._read(seq, subject)
            except NotFoundError:
                return
            try:
                event = decode(raw.data or b"", ev.RunEvent)
            except BusDecodeError:
                seq = raw.seq + 1
                continue
            yield StoredEvent(seq=raw.seq, event=event)
            seq = raw.seq + 1


class HistoryUnavailable(Exception):
    """The stored events could not be read for HISTORY_RETRY_SECONDS (the stream had no leader)."""


def history_error_frame(run_id: str | None) -> str:
    """A clean end for a replay that cannot go on: an `error` (not a run's end) asking the client to
    reconnect; it resumes from its Last-Event-ID, so nothing is lost. Both languages: the gateway
    does not know the user's language here."""
    body = {"run_id": run_id or "", "code": "events_unavailable", "reconnect": True,
            "msg": "运行事件暂时无法读取，正在重新连接 (run events are unavailable for a moment; reconnecting)"}
    return f"event: error\ndata: {json.dumps(body, ensure_ascii=False)}\n\n: reconnect\n\n"


def done_frame(run_id: str | None, status: str) -> str:
    event = ev.Done(run_id=run_id or "", status=status)
    return f"event: done\ndata: {event.sse_data()}\n\n"


def queued_frame(run_id: str | None, position: int) -> str:
    """A waiting run's place in its user's queue (1: next); its events follow once it starts."""
    return f'event: queued\ndata: {json.dumps({"run_id": run_id or "", "position": position})}\n\n'


@dataclass
class StreamPlan:
    """Where a subscriber starts and which run it follows (None: the first run it meets)."""

    start_seq: int
    run_id: str | None
    idle_when_caught_up: bool
    # The followed run has just ended in the database: its `done` may still be on its way (the
    # runner commits the end, then publishes `done`), so wait this long for it before answering idle.
    done_grace: float = 0.0
    # The followed run waits in its user's FIFO (over the per-user cap): its place, said first.
    queued_position: int = 0


async def stream_events(hub: EventHub, task_id: str, plan: StreamPlan) -> AsyncIterator[str | bytes]:
    sub = hub.register(task_id)
    last_sent = plan.start_seq - 1
    follow = plan.run_id
    try:
        yield "retry: 1000\n\n"
        if plan.queued_position:
            yield queued_frame(follow, plan.queued_position)
        try:
            async for stored in hub.history(task_id, plan.start_seq):
                last_sent = stored.seq
                if follow and stored.event.run_id != follow:
                    continue
                yield stored.frame
                if isinstance(stored.event, ev.Done) and (follow is None or stored.event.run_id == follow):
                    return
        except HistoryUnavailable:
            yield history_error_frame(follow)
            return
        deadline = None
        if plan.idle_when_caught_up:
            if plan.done_grace <= 0:
                yield done_frame(follow, "idle")
                return
            deadline = asyncio.get_running_loop().time() + plan.done_grace
        while True:
            items = await sub.take(deadline)
            if not items:
                if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                    yield done_frame(follow, "idle")
                    return
                if sub.overflowed:
                    yield ": reconnect\n\n"
                    return
                yield ": keep-alive\n\n"
                continue
            frames: list[bytes] = []
            ended = False
            for stored in items:
                if stored is None:
                    ended = True  # shutting down
                    break
                if stored.seq <= last_sent:
                    continue
                last_sent = stored.seq
                if follow and stored.event.run_id != follow:
                    continue
                frames.append(stored.frame)
                if isinstance(stored.event, ev.Done):
                    yield b"".join(frames)
                    return
            if frames:
                yield b"".join(frames)
            if ended or sub.overflowed:
                # Shutting down (or this client fell too far behind): ask it to reconnect; it
                # resumes from its Last-Event-ID on any gateway and misses nothing.
                yield ": reconnect\n\n"
                return
    finally:
        hub.unregister(sub)
