"""Run events onto the events stream, with text/reasoning deltas coalesced (at most one event per
`DELTA_INTERVAL_SECONDS`, 100 ms).

Coalescing bounds the number of stream messages (and SSE frames) for fast token streams while
keeping order: any non-delta event flushes the buffer first.
"""

from __future__ import annotations

import asyncio
import logging

from nats.js import JetStreamContext

from zcbot_core.bus import Topology
from zcbot_core.bus import events as ev

log = logging.getLogger(__name__)
# Text and reasoning deltas: the first after a quiet spell goes out at once, later ones at most every
# DELTA_INTERVAL_SECONDS, merged (a model streaming 30 chunks/s costs 10 events/s, not 30).
DELTA_INTERVAL_SECONDS = 0.1
MAX_UNACKED = 256


class BusEventSink:
    def __init__(self, js: JetStreamContext, topo: Topology, task_id: str, run_id: str) -> None:
        self.js = js
        self.subject = topo.event_subject(task_id)
        self.run_id = run_id
        self._kind: type[ev.RunEvent] | None = None
        self._buffer: list[str] = []
        self._timer: asyncio.TimerHandle | None = None
        self._last_delta_at = float("-inf")
        self._lock = asyncio.Lock()
        self._acks: list[tuple[asyncio.Future[object], bytes, str]] = []
        self.published = 0
        nc = getattr(js, "_nc", None)  # the server's limit (1 MB unless raised), learnt at connect
        self.max_bytes = int(getattr(nc, "max_payload", 0) or ev.DEFAULT_MAX_PAYLOAD)

    async def _publish(self, event: ev.RunEvent) -> None:
        """Publish now (order is the call order), collect the ack later: no round trip per event.
        An event over the bus's max payload is cut to fit (with a marker), never dropped."""
        event, data = ev.fit_event(event, self.max_bytes)
        try:
            ack = await self.js.publish_async(self.subject, data, wait_stall=5)
        except Exception as exc:  # stalled or disconnected: fall back to an acked publish with retries
            log.warning("async event publish failed", extra={"type": event.type, "error": repr(exc)})
            await self._publish_acked(data, event.type)
            return
        self._acks.append((ack, data, event.type))
        if len(self._acks) >= MAX_UNACKED:
            await self._settle()

    async def _publish_acked(self, data: bytes, kind: str) -> None:
        for attempt in range(3):
            try:
                await self.js.publish(self.subject, data, timeout=5)
                self.published += 1
                return
            except Exception as exc:  # NATS reconnecting: retry briefly, then give up on this event
                if attempt == 2:
                    log.warning("event publish failed", extra={"type": kind, "error": repr(exc)})
                    return
                await asyncio.sleep(0.2 * (attempt + 1))

    async def _settle(self) -> None:
        """Wait for the stream's acks of everything published; republish what was not stored."""
        acks, self._acks = self._acks, []
        for ack, data, kind in acks:
            try:
                await asyncio.wait_for(ack, 5)
                self.published += 1
            except Exception:
                await self._publish_acked(data, kind)

    async def _flush_locked(self) -> None:  # publishes buffered deltas; acks settle in flush()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._buffer and self._kind is not None:
            event = self._kind(run_id=self.run_id, delta="".join(self._buffer))  # type: ignore[call-arg]
            self._buffer = []
            self._last_delta_at = asyncio.get_running_loop().time()
            await self._publish(event)

    async def flush(self) -> None:
        """Publish buffered deltas and wait until the stream has stored every event."""
        async with self._lock:
            await self._flush_locked()
            await self._settle()

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
        async with self._lock:
            if isinstance(event, (ev.TextDelta, ev.ReasoningDelta)):
                if self._kind is not type(event):
                    await self._flush_locked()
                    self._kind = type(event)
                self._buffer.append(event.delta)
                self._schedule_flush()
                return
            await self._flush_locked()
            await self._publish(event)
