"""Durable consumption of inbound channel messages (WeCom callbacks queued by the gateways).

A message stays in the `CHANNEL_IN` work queue until its reply is sent: the handler heartbeats
(`in_progress`) while the run lives and acks at the end. On drain, unfinished handlers are
cancelled and their messages `nak`ed, so another replica resumes them at once (the run id is in
the binding's `inbound_runs`, so the reply is resumed, not the run repeated).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nats.errors import TimeoutError as NatsTimeoutError

from zcbot_core.bus import BusDecodeError, ChannelInbound, decode
from zcbot_core.bus.deliveries import keep_in_progress
from zcbot_core.bus.topology import CHANNEL_ACK_WAIT_SECONDS
from zcbot_core.service import Runtime

from zcbot_channels.wecom import WeComConversations

log = logging.getLogger(__name__)
MAX_IN_FLIGHT = 100


class InboundConsumer:
    def __init__(self, rt: Runtime, wecom: WeComConversations) -> None:
        self.rt = rt
        self.wecom = wecom
        self.stop = asyncio.Event()
        self.handlers: dict[asyncio.Task[None], Any] = {}
        self._loop: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.psub = await self.rt.js.pull_subscribe_bind(durable=self.rt.topo.channels_consumer,
                                                         stream=self.rt.topo.channel_inbound_stream)
        self._loop = asyncio.create_task(self._pull())

    async def _pull(self) -> None:
        while not self.stop.is_set():
            if len(self.handlers) >= MAX_IN_FLIGHT:
                await asyncio.sleep(0.1)
                continue
            try:
                msgs = await self.psub.fetch(batch=10, timeout=1.0)
            except (NatsTimeoutError, asyncio.TimeoutError):
                continue
            except Exception as exc:
                if self.stop.is_set():
                    return
                log.warning("inbound fetch failed", extra={"error": repr(exc)})
                await asyncio.sleep(0.5)
                continue
            for msg in msgs:
                task = asyncio.create_task(self._handle(msg))
                self.handlers[task] = msg
                task.add_done_callback(lambda t: self.handlers.pop(t, None))

    async def _handle(self, msg: Any) -> None:
        try:
            inbound = decode(msg.data, ChannelInbound)
        except BusDecodeError as exc:
            log.warning("dropping undecodable inbound message", extra={"error": str(exc)})
            await msg.term()
            return
        redelivered = bool(msg.metadata and msg.metadata.num_delivered > 1)
        beat = asyncio.create_task(keep_in_progress(lambda: msg, CHANNEL_ACK_WAIT_SECONDS / 3))
        try:
            await self.wecom.handle(inbound, redelivered=redelivered)
        finally:
            beat.cancel()
        await msg.ack()

    async def drain(self) -> None:
        self.stop.set()
        if self._loop is not None:
            await asyncio.gather(self._loop, return_exceptions=True)
        unfinished = dict(self.handlers)
        for task in unfinished:
            task.cancel()
        if unfinished:
            await asyncio.gather(*unfinished, return_exceptions=True)
        for task, msg in unfinished.items():
            try:
                await msg.nak()  # another replica resumes the reply at once
            except Exception:
                pass
        try:
            await self.psub.unsubscribe()
        except Exception:
            pass
