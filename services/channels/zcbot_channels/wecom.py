"""The channels service's half of WeCom: a callback message queued by a gateway -> the run -> the reply.

`InboundConsumer` takes the message from the `CHANNEL_IN` work queue and calls `handle()`: the
binding lookup by the sender's UserID, the durable dedupe (MsgId recorded in the binding row for
24 h), the run, and the reply via message/send. The gateway's half (signature, decryption, hand-off)
is `zcbot_core.channels.wecom_callback`.

A reply survives a restart of either side: the message stays in the stream until the reply is
sent, and once its run is submitted the run id is recorded in the binding (`inbound_runs`), so a
redelivery resumes that run's reply instead of starting another run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from zcbot_channels.context import ChannelsContext
from zcbot_core import safe_fs
from zcbot_core.bus import ChannelInbound
from zcbot_core.channels import bindings
from zcbot_core.channels.conversation import MEDIA_ONLY_REPLY, ReplyHooks, resume_reply, run_message
from zcbot_core.channels.wecom_api import WeComClient

log = logging.getLogger(__name__)

UNBOUND_NOTICE_EVERY = 3600.0


class WeComReplier:
    def __init__(self, client: WeComClient, userid: str) -> None:
        self.client = client
        self.userid = userid

    async def send_text(self, text: str) -> None:
        await self.client.send_text(self.userid, text)

    async def send_file(self, path: safe_fs.UserFile) -> None:
        await self.client.send_file(self.userid, path)


class WeComConversations:
    """Conversations of WeCom members (the client is the service's shared `WeComClient`)."""

    def __init__(self, ctx: ChannelsContext) -> None:
        self.ctx = ctx
        self.client = ctx.wecom
        self._unbound_notified: dict[str, float] = {}

    async def handle(self, inbound: ChannelInbound, redelivered: bool = False) -> None:
        sender, key, msg_type, fields = inbound.sender, inbound.key, inbound.msg_type, inbound.fields
        replier = WeComReplier(self.client, sender)
        try:
            binding = await bindings.find_wecom_binding(self.ctx.sessions, sender)
            if binding is None:
                await self._notify_unbound(replier, sender)
                return
            pending = await self._pending(binding.id, key) if redelivered else None
            if pending is not None:
                outcome = await resume_reply(self.ctx.conversation_deps, binding.user_id, bindings.WECOM, pending["task_id"],
                                             pending["run_id"], pending["started"], replier,
                                             self._hooks(binding.id, key), text_sent=pending.get("text_sent", False))
                log.info("wecom reply resumed", extra={"binding_id": binding.id, "run_id": pending["run_id"]})
                return
            if not redelivered and not await bindings.claim_inbound(self.ctx.sessions, binding.id, f"wecom:{key}"):
                log.info("wecom duplicate dropped", extra={"msg_id": key, "binding_id": binding.id})
                return
            if msg_type != "text" or not fields.get("Content", "").strip():
                await replier.send_text(MEDIA_ONLY_REPLY)
                return
            outcome = await run_message(self.ctx.conversation_deps, binding.user_id, bindings.WECOM, fields["Content"], replier,
                                        self._hooks(binding.id, key))
            log.info("wecom message handled", extra={"binding_id": binding.id, "status": outcome.status,
                                                     "run_id": outcome.run_id})
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("wecom message handling failed", extra={"error": exc.__class__.__name__})
            try:
                await replier.send_text("Sorry, something went wrong while handling your message; please try again.")
            except Exception:
                pass

    async def _pending(self, binding_id: int, key: str) -> dict[str, Any] | None:
        binding = await bindings.get_binding(self.ctx.sessions, binding_id)
        runs = (binding.config.get("inbound_runs") or {}) if binding is not None else {}
        return runs.get(key)

    def _hooks(self, binding_id: int, key: str) -> ReplyHooks:
        """Record the run behind this inbound message so a redelivery resumes its reply."""

        async def change(update: Any) -> None:
            def apply(cfg: dict[str, Any]) -> dict[str, Any] | None:
                runs = dict(cfg.get("inbound_runs") or {})
                if not update(runs):
                    return None
                cfg["inbound_runs"] = runs
                return cfg

            await bindings.update_config(self.ctx.sessions, binding_id, apply)

        async def submitted(task_id: str, run_id: str, started: float) -> None:
            await change(lambda runs: runs.__setitem__(key, {"task_id": task_id, "run_id": run_id, "started": started,
                                                             "text_sent": False}) or True)

        async def text_sent(run_id: str) -> None:
            def mark(runs: dict[str, Any]) -> bool:
                if key not in runs:
                    return False
                runs[key] = {**runs[key], "text_sent": True}
                return True

            await change(mark)

        async def finished(run_id: str) -> None:
            await change(lambda runs: runs.pop(key, None) is not None)

        return ReplyHooks(submitted=submitted, text_sent=text_sent, finished=finished)

    async def _notify_unbound(self, replier: WeComReplier, sender: str) -> None:
        now = time.monotonic()
        if now - self._unbound_notified.get(sender, -1e9) < UNBOUND_NOTICE_EVERY:
            return
        self._unbound_notified[sender] = now
        log.info("wecom message from an unbound member")
        await replier.send_text(
            f"Your WeCom account is not linked to zcbot yet. In the zcbot web app, link WeCom with the "
            f"user ID {sender} and type back the code this app then sends you (PUT /v1/channels/wecom, "
            f"then POST /v1/channels/wecom/verify)."
        )
