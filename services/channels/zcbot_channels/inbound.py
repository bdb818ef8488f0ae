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

from zcbot_channels.wecom import WeComConversations
from zcbot_core.bus import BusDecodeError, ChannelInbound, decode
from zcbot_core.bus.deliveries import keep_in_progress
from zcbot_core.bus.topology import CHANNEL_ACK_WAIT_SECONDS
from zcbot_core.platform.service import Runtime
from zcbot_core.platform.worker import PullWorker

log = logging.getLogger(__name__)
MAX_IN_FLIGHT = 100


class InboundConsumer:
    def __init__(self, rt: Runtime, wecom: WeComConversations) -> None:
        self.rt = rt
        self.wecom = wecom
        self.worker: PullWorker | None = None

    async def start(self) -> None:
        psub = await self.rt.js.pull_subscribe_bind(durable=self.rt.topo.channels_consumer,
                                                    stream=self.rt.topo.channel_inbound_stream)
        self.worker = PullWorker(psub, self._handle, MAX_IN_FLIGHT, "channels inbound")
        self.worker.start()

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
        if self.worker is None:
            return
        await self.worker.stop()
        for msg in await self.worker.cancel():
            try:
                await msg.nak()  # another replica resumes the reply at once
            except Exception:
                pass
        await self.worker.close()
