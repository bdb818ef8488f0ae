"""Run events onto the events stream: in order, each stored before the next is sent, deduplicated on
republish, with text/reasoning deltas coalesced (at most one event per `DELTA_INTERVAL_SECONDS`).

Why one event in flight per run (issue 23): with several unacked publishes in flight, a leader
change can lose event k while k+1 is stored by the new leader; republishing k then puts it after
k+1 and the client reads the answer out of order. One publisher task per run sends an event, waits
for its ack (retrying the same `Nats-Msg-Id` until the stream has it, for at most
`retry_seconds` of an outage) and only then sends the next, so the stream holds the run's events in
emission order; runs publish concurrently with each other. The agent loop does not wait for acks:
`emit` queues (bounded: a loop that outruns the stream waits for room), and deltas still queued
behind a slow ack are merged, so an election costs one late chunk, not one chunk per timeout.

The fence (issue 42): every event is published only if the task's subject still ends where the sink
expects it (`Nats-Expected-Last-Subject-Sequence`), so a superseded attempt's event that reaches the
stream late is refused instead of landing inside the next attempt's answer. An event after the
sink's first expects the sink's previous one. The first (`run_start`) expects the subject's end when
the run was queued (`events_from`, the claimed row's `run_events_from`); refused, it goes after the
subject's new last event when that one is older (another run's, an earlier attempt's, the reaper's)
and is given up when a later attempt of the run, or the run's `done`, wrote it: this attempt is
superseded. A stale runner's late `run_start` is refused like its other events.

`flush()` returns when every queued event is stored or given up; `lost` counts those given up, so
the run can end in error instead of reporting success over a partial answer. Coalescing keeps
order too: any non-delta event flushes the delta buffer first.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from nats.errors import MaxPayloadError
from nats.js import JetStreamContext
from nats.js.errors import BadRequestError, NotFoundError

from zcbot_core.bus import Topology
from zcbot_core.bus import events as ev
from zcbot_runner import metrics

log = logging.getLogger(__name__)
# Text and reasoning deltas: the first after a quiet spell goes out at once, later ones at most every
# DELTA_INTERVAL_SECONDS, merged (a model streaming 30 chunks/s costs 10 events/s, not 30).
DELTA_INTERVAL_SECONDS = 0.1
MAX_QUEUED = 1000  # events waiting for the publisher; past it `emit` waits (backpressure on the loop)
ACK_TIMEOUT_SECONDS = 2.0  # one publish's wait for its ack, doubled per retry (a slow leader is not hammered)
ACK_TIMEOUT_MAX_SECONDS = 5.0
RETRY_MAX_DELAY_SECONDS = 1.0
_DELTAS = (ev.TextDelta, ev.ReasoningDelta)
EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
WRONG_LAST_SEQUENCE = 10071  # JetStream's error code for a refused expected last (subject) sequence
MAX_REFENCES = 10  # the first event re-fenced after other writers' events, at most (they cannot outpace it forever)


class BusEventSink:
    def __init__(self, js: JetStreamContext, topo: Topology, task_id: str, run_id: str, *, attempt: int = 1,
                 retry_seconds: float = 30.0, events_from: int | None = None) -> None:
        self.js = js
        self.stream = topo.events_stream
        self.subject = topo.event_subject(task_id)
        self.run_id = run_id
        # The attempt is part of the id: a redelivered run's events are new events, not duplicates.
        self._id_prefix = f"{run_id}:{attempt}:"
        self.attempt = attempt
        self.retry_seconds = retry_seconds
        self._kind: type[ev.RunEvent] | None = None
        self._buffer: list[str] = []
        self._timer: asyncio.TimerHandle | None = None
        self._last_delta_at = float("-inf")
        self._lock = asyncio.Lock()
        self._queue: deque[ev.RunEvent] = deque()
        self._idle = asyncio.Event()
        self._idle.set()
        self._room = asyncio.Event()
        self._room.set()
        self._publisher: asyncio.Task[None] | None = None
        self._outage_since: float | None = None
        self.seq = 0  # events sent, the last part of each Nats-Msg-Id
        self.published = 0  # stored (or already stored: a deduplicated republish)
        self.republished = 0
        self.lost = 0
        self.discarded = False  # the run is another runner's now: nothing more is published
        # The stream sequence of this sink's last stored event. Each later event is published only if it
        # is still the last one of the task's subject (`Nats-Expected-Last-Subject-Sequence`): a superseded
        # attempt's publish that reaches the stream late (sent to a stalled server, or flushed from the
        # client's buffer after a reconnect) is refused instead of landing in the middle of the next
        # attempt's answer (issue 42, seed 4201: a paused stream leader).
        self.last_stored: int | None = None
        # What the first event expects (the module docstring): the subject's last sequence when the run
        # was queued (`events_from` is the one after it; 0: none). None: unknown, the first is not fenced.
        self.first_fence: int | None = None if events_from is None else max(int(events_from) - 1, 0)
        self._refences = 0
        nc = getattr(js, "_nc", None)  # the server's limit (1 MB unless raised), learnt at connect
        self.max_bytes = int(getattr(nc, "max_payload", 0) or ev.DEFAULT_MAX_PAYLOAD)

    # ---- the publisher -----------------------------------------------------------------------
    async def _enqueue(self, event: ev.RunEvent) -> None:
        if self.discarded:
            return
        while len(self._queue) >= MAX_QUEUED:
            self._room.clear()
            await self._room.wait()
            if self.discarded:
                return
        self._queue.append(event)
        self._idle.clear()
        if self._publisher is None or self._publisher.done():
            self._publisher = asyncio.create_task(self._publish_queued(), name=f"events-{self.run_id}")

    def _next(self) -> ev.RunEvent:
        """The next event; deltas of one kind queued behind it are merged into it (they were waiting
        for an ack anyway, and the client sees the same text)."""
        event = self._queue.popleft()
        if isinstance(event, _DELTAS):
            parts = [event.delta]
            while self._queue and type(self._queue[0]) is type(event):
                parts.append(self._queue.popleft().delta)  # type: ignore[attr-defined]
            if len(parts) > 1:
                event = type(event)(run_id=event.run_id, delta="".join(parts), ts=event.ts)
        return event

    async def _publish_queued(self) -> None:
        try:
            while self._queue:
                event = self._next()
                self._room.set()
                await self._store(event)
        finally:
            # No await between the empty check and here: an event queued meanwhile starts a new task.
            self._idle.set()

    async def _store(self, event: ev.RunEvent) -> None:
        """Publish and wait for the ack; retried with the same id (JetStream drops the duplicate if
        an earlier try was stored after all) until stored or the outage outlasts `retry_seconds`."""
        event, data = ev.fit_event(event, self.max_bytes)  # over the max payload: cut, with a marker
        self.seq += 1
        msg_id = ev.done_msg_id(self.run_id) if isinstance(event, ev.Done) else f"{self._id_prefix}{self.seq}"
        loop = asyncio.get_running_loop()
        tries = 0
        while True:
            headers = {"Nats-Msg-Id": msg_id}
            expected = self.last_stored if self.last_stored is not None else self.first_fence
            if expected is not None:
                headers[EXPECTED_LAST_SUBJECT_SEQ] = str(expected)
            try:
                timeout = min(ACK_TIMEOUT_SECONDS * 2 ** tries, ACK_TIMEOUT_MAX_SECONDS)
                ack = await self.js.publish(self.subject, data, timeout=timeout, headers=headers)
            except (MaxPayloadError, BadRequestError) as exc:
                stored = await self._stored_by_an_earlier_try(exc, msg_id) if tries else None
                if stored is None and self.last_stored is None and await self._refence(exc):
                    tries += 1
                    continue  # the first event, after older writers' events
                if stored is None:  # this event can never be stored (too big, or another writer moved the subject on)
                    self._give_up(event, exc)
                    return
                ack_seq = stored
            except Exception as exc:  # no ack: an election, NATS reconnecting, a slow leader
                now = loop.time()
                if self._outage_since is None:
                    self._outage_since = now
                if now - self._outage_since >= self.retry_seconds:
                    self._give_up(event, exc)
                    return
                tries += 1
                self.republished += 1
                metrics.EVENTS_REPUBLISHED.inc()
                await asyncio.sleep(min(0.05 * 2 ** tries, RETRY_MAX_DELAY_SECONDS))
                continue
            else:
                ack_seq = ack.seq
            self.published += 1
            self.last_stored = ack_seq
            self._outage_since = None
            return

    async def _stored_by_an_earlier_try(self, exc: BaseException, msg_id: str) -> int | None:
        """The sequence of this event when a try whose ack was lost stored it (JetStream checks the
        expected last sequence before the duplicate window, so the republish is refused, not acked as a
        duplicate): the subject's last message is then this very one."""
        if getattr(exc, "err_code", None) != WRONG_LAST_SEQUENCE:
            return None
        try:
            last = await self.js.get_last_msg(self.stream, self.subject)
        except Exception:  # unknown: counted as lost, never reported stored
            return None
        return last.seq if (last.headers or {}).get("Nats-Msg-Id") == msg_id else None

    async def _refence(self, exc: BaseException) -> bool:
        """The sink's first event was refused by its fence: True (and the fence moved to the subject's
        last event) when that event is older than this attempt, False when this attempt is superseded
        (a later attempt of the run or its `done` wrote it) or the subject cannot be read."""
        if getattr(exc, "err_code", None) != WRONG_LAST_SEQUENCE or self._refences >= MAX_REFENCES:
            return False
        self._refences += 1
        try:
            last = await self.js.get_last_msg(self.stream, self.subject)
        except NotFoundError:  # nothing on the subject any more (removed by age or by an operator)
            self.first_fence = 0
            return True
        except Exception:
            return False
        if last.seq is None or self._superseded_by(str((last.headers or {}).get("Nats-Msg-Id") or "")):
            return False
        self.first_fence = int(last.seq or 0)
        return True

    def _superseded_by(self, msg_id: str) -> bool:
        """`msg_id` (of the subject's last event) is this run's `done` or an event of a later attempt."""
        if msg_id == ev.done_msg_id(self.run_id):
            return True
        if not msg_id.startswith(f"{self.run_id}:"):
            return False
        attempt = msg_id[len(self.run_id) + 1:].partition(":")[0]
        return attempt.isdigit() and int(attempt) > self.attempt

    def _give_up(self, event: ev.RunEvent, exc: BaseException) -> None:
        """Counted, never silent: the run's end reports it. Later events of a long outage get one try
        each (the outage clock keeps running) until one is stored."""
        self.lost += 1
        metrics.EVENTS_FAILED.inc()
        log.warning("run event could not be stored", extra={"run_id": self.run_id, "type": event.type,
                                                             "error": repr(exc)})

    def discard(self) -> None:
        """The run was taken over by another runner (issue 23): its events are that runner's to send.
        Queued and buffered events are dropped, the publish in flight is abandoned (it may or may not
        be stored: one event at most), and later `emit`s are no-ops, so a client never reads two
        interleaved copies of the answer."""
        if self.discarded:
            return
        self.discarded = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._buffer = []
        dropped = len(self._queue)
        self._queue.clear()
        self._room.set()  # an `emit` waiting for room returns (and drops its event)
        if self._publisher is not None and not self._publisher.done():
            self._publisher.cancel()
        self._idle.set()  # `flush` returns at once (a publisher cancelled before it ran has no `finally`)
        log.info("run taken over: its queued events are dropped", extra={"run_id": self.run_id, "dropped": dropped})

    def fresh_budget(self) -> None:
        """The events that end a run (the error saying events were lost, `done`) get a retry budget of
        their own, so an outage that used up the budget mid-run does not also take the run's end."""
        self._outage_since = None

    # ---- the agent loop's side ---------------------------------------------------------------
    async def _flush_locked(self) -> None:  # queues buffered deltas; `flush` waits for their acks
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._buffer and self._kind is not None:
            event = self._kind(run_id=self.run_id, delta="".join(self._buffer))  # type: ignore[call-arg]
            self._buffer = []
            self._last_delta_at = asyncio.get_running_loop().time()
            await self._enqueue(event)

    async def flush(self) -> None:
        """Send buffered deltas and wait until the stream has stored (or given up) every event."""
        async with self._lock:
            await self._flush_locked()
        await self._idle.wait()

    async def _timer_flush(self) -> None:
        async with self._lock:
            self._timer = None
            await self._flush_locked()

    def _schedule_flush(self) -> None:
        if self._timer is None:
            loop = asyncio.get_running_loop()
            delay = max(self._last_delta_at + DELTA_INTERVAL_SECONDS - loop.time(), 0.0)
            self._timer = loop.call_later(delay, lambda: asyncio.ensure_future(self._timer_flush()))

    async def emit(self, event: ev.RunEvent) -> None:
        if self.discarded:
            return
        async with self._lock:
            if isinstance(event, _DELTAS):
                if self._kind is not type(event):
                    await self._flush_locked()
                    self._kind = type(event)
                self._buffer.append(event.delta)
                self._schedule_flush()
                return
            await self._flush_locked()
            await self._enqueue(event)
