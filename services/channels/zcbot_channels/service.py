"""The channels service: push delivery (queue group on `push.*`) and iLink poll loops.

- Push: `Topology.push_wildcard()` in queue group `<prefix>-channels`; each request is handled in
  its own task and answered with a `PushReply`.
- iLink: every `scan_interval` the active iLink bindings are listed; for each one without a local
  loop the replica tries the lease `ilink-<binding id>` (`Lease.acquire` = `kv.create`), and on
  success runs its loop, refreshing the lease (`kv.update` at our revision) until it stops or the
  lease is lost. Two replicas therefore never poll one binding at the same time.
- WeCom inbound: callbacks queued by the gateways on the `CHANNEL_IN` work queue are handled here
  (`inbound.InboundConsumer` -> `wecom.WeComConversations`), so a reply survives a gateway restart.
- The parts share one `context.ChannelsContext` (settings, database, clients, key, background
  spawn), built here; none of them imports this module.
- Drain: stop scanning and taking pushes, stop the loops (releasing their leases so another
  replica takes over at its next scan; their in-flight conversations are cancelled and resumed
  there from `pending_replies`), give in-flight pushes a grace period, close.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from zcbot_channels.config import ChannelsServiceSettings
from zcbot_channels.context import ChannelsContext
from zcbot_channels.ilink_loop import ILinkPoller
from zcbot_channels.inbound import InboundConsumer
from zcbot_channels.leases import Lease
from zcbot_channels.push_handler import deliver
from zcbot_channels.wecom import WeComConversations
from zcbot_core.bus import BusDecodeError, PushReply, PushRequest, decode, encode
from zcbot_core.channels import bindings
from zcbot_core.channels.conversation import ConversationDeps
from zcbot_core.channels.email_api import EmailClient
from zcbot_core.channels.ilink_api import ILinkClient
from zcbot_core.channels.sealing import key_from_settings
from zcbot_core.channels.settings import ChannelSettings
from zcbot_core.channels.wecom_api import WeComClient
from zcbot_core.platform.config import ConfigError
from zcbot_core.platform.service import Runtime
from zcbot_core.platform.worker import TaskGroup, instance_id, periodic

log = logging.getLogger(__name__)

DRAIN_GRACE_SECONDS = 10.0


class ChannelsService:
    def __init__(self) -> None:
        self.owner = instance_id()
        self.pollers: dict[int, tuple[ILinkPoller, asyncio.Task[None]]] = {}
        self.tasks = TaskGroup()  # push deliveries and replies in flight
        self._scan_task: asyncio.Task[None] | None = None
        self._push_sub: Any = None
        self._stop = asyncio.Event()

    # ---- lifecycle -------------------------------------------------------------------------------
    async def start(self, rt: Runtime) -> None:
        rt.require_db()
        self.rt = rt
        # The runtime's settings as given (the process's `ChannelsServiceSettings`), else extended
        # with the channel knobs from the environment (a service started in-process on a shared `Settings`).
        self.settings = ChannelsServiceSettings.extend(rt.settings)
        self.sessions = rt.sessions
        self.cs: ChannelSettings = self.settings
        try:
            self.key: bytes | None = key_from_settings(self.settings)
        except ConfigError as exc:
            self.key = None
            log.warning("iLink disabled: %s", exc)
        self.wecom = WeComClient(self.cs)
        self.ilink = ILinkClient(self.cs)
        self.conversation_deps = ConversationDeps(settings=self.settings, sessions=rt.sessions, nc=rt.nc, js=rt.js,
                                                  topo=rt.topo, reply_timeout=self.cs.reply_timeout)
        self.ctx = ChannelsContext(settings=self.settings, sessions=rt.sessions, cs=self.cs, key=self.key,
                                   wecom=self.wecom, ilink=self.ilink, email=EmailClient(self.cs),
                                   conversation_deps=self.conversation_deps,
                                   spawn=self.spawn)
        self.kv = await rt.js.key_value(rt.topo.leases_bucket)
        self._push_sub = await rt.nc.subscribe(rt.topo.push_wildcard(), queue=rt.topo.channels_push_queue_group,
                                               cb=self._on_push)
        # Started means the server knows the subscription: a push sent the moment start() returns
        # (another connection) was answered "no responders" in CI without this round trip.
        await rt.nc.flush()
        if self.key is not None:
            self._scan_task = asyncio.create_task(self._scan_loop())
        self.inbound: InboundConsumer | None = None
        if self.cs.wecom_callback_enabled:
            self.inbound = InboundConsumer(rt, WeComConversations(self.ctx))
            await self.inbound.start()
        log.info("channels service started", extra={"owner": self.owner, "wecom": self.cs.wecom_send_enabled})

    async def drain(self) -> None:
        self._stop.set()
        if getattr(self, "inbound", None) is not None:
            await self.inbound.drain()
        if self._push_sub is not None:
            try:
                await self._push_sub.unsubscribe()
            except Exception:
                pass
        if self._scan_task is not None:
            self._scan_task.cancel()
            await asyncio.gather(self._scan_task, return_exceptions=True)
        for poller, _task in list(self.pollers.values()):
            poller.stopping.set()
        running = [task for _, task in self.pollers.values()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)  # each releases its lease
        self.pollers.clear()
        await self.tasks.close(DRAIN_GRACE_SECONDS)
        await self.wecom.aclose()
        await self.ilink.aclose()
        log.info("channels service drained")

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        return self.tasks.spawn(coro)

    # ---- push ------------------------------------------------------------------------------------
    async def _on_push(self, msg: Any) -> None:
        self.spawn(self._handle_push(msg))

    async def _handle_push(self, msg: Any) -> None:
        try:
            req = decode(msg.data, PushRequest)
        except BusDecodeError as exc:
            log.warning("undecodable push request dropped", extra={"error": str(exc)})
            if msg.reply:
                await msg.respond(encode(PushReply(errors={"request": "unreadable push request"})))
            return
        if msg.subject != self.rt.topo.push_subject(req.user_id):
            reply = PushReply(errors={"request": "the subject does not match the user"})
        else:
            try:
                reply = await deliver(self.ctx, req)
            except Exception as exc:
                log.exception("push failed")
                reply = PushReply(errors={"service": f"internal error ({exc.__class__.__name__})"})
        if msg.reply:
            try:
                await msg.respond(encode(reply))
            except Exception:
                log.warning("could not answer a push request")

    # ---- iLink loops -----------------------------------------------------------------------------
    async def _scan_loop(self) -> None:
        await periodic(self._stop, self.cs.scan_interval, self.scan_once, "channel binding scan")

    async def scan_once(self) -> None:
        for binding_id in [bid for bid, (_, task) in self.pollers.items() if task.done()]:
            self.pollers.pop(binding_id, None)
        for binding in await bindings.active_ilink_bindings(self.sessions):
            if binding.id in self.pollers or self._stop.is_set():
                continue
            lease = Lease(self.kv, f"ilink-{binding.id}", self.owner)
            if not await lease.acquire():
                continue
            poller = ILinkPoller(self.ctx, binding.id, lease)
            self.pollers[binding.id] = (poller, asyncio.create_task(poller.run()))
            log.info("ilink lease acquired", extra={"binding_id": binding.id, "owner": self.owner})
