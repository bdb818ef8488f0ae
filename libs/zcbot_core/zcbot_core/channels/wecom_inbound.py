"""WeCom callback messages -> conversations.

The gateway's callback route calls `accept()`, which does only what must happen before the HTTP
answer (WeCom waits 5 s, then retries 3 times): signature check, decryption, parsing, an
in-process duplicate check on MsgId, and handing the message to JetStream (`Nats-Msg-Id` =
MsgId, so a retry reaching another gateway replica is dropped by the stream too). The channels
service consumes it and calls `handle()`: the binding lookup by the sender's UserID, the durable
dedupe (MsgId recorded in the binding row for 24 h), the run, and the reply via message/send.

A reply survives a restart of either side: the message stays in the stream until the reply is
sent, and once its run is submitted the run id is recorded in the binding (`inbound_runs`), so a
redelivery resumes that run's reply instead of starting another run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Any

from zcbot_core import safe_fs
from zcbot_core.channels import bindings
from zcbot_core.bus import ChannelInbound, encode
from zcbot_core.channels.conversation import MEDIA_ONLY_REPLY, ConversationDeps, ReplyHooks, resume_reply, run_message
from zcbot_core.channels.settings import ChannelSettings
from zcbot_core.channels.wecom_api import WeComClient
from zcbot_core.channels.wecom_crypto import WeComCrypt, WeComCryptoError, parse_message

log = logging.getLogger(__name__)

RECENT_IDS = 4096
UNBOUND_NOTICE_EVERY = 3600.0
MAX_MESSAGE_AGE = 24 * 3600.0  # the dedupe window: anything older could be a replay


class WeComReplier:
    def __init__(self, client: WeComClient, userid: str) -> None:
        self.client = client
        self.userid = userid

    async def send_text(self, text: str) -> None:
        await self.client.send_text(self.userid, text)

    async def send_file(self, path: safe_fs.UserFile) -> None:
        await self.client.send_file(self.userid, path)


class WeComInbound:
    def __init__(self, cs: ChannelSettings, deps: ConversationDeps, client: WeComClient | None = None) -> None:
        if not cs.wecom_callback_enabled:
            raise WeComCryptoError("WeCom callback is not configured")
        self.cs = cs
        self.deps = deps
        self.crypt = WeComCrypt(cs.wecom_token or "", cs.wecom_aes_key or "", cs.wecom_corp_id or "")
        self.client = client or WeComClient(cs)
        self._recent: OrderedDict[str, float] = OrderedDict()
        self._unbound_notified: dict[str, float] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"WeComInbound(corp_id={self.cs.wecom_corp_id!r})"

    # ---- HTTP-facing ---------------------------------------------------------------------------
    def verify_url(self, msg_signature: str, timestamp: str, nonce: str, echostr: str) -> str:
        return self.crypt.verify_url(msg_signature, timestamp, nonce, echostr)

    def _seen_recently(self, key: str) -> bool:
        now = time.monotonic()
        if key in self._recent:
            self._recent.move_to_end(key)
            return True
        self._recent[key] = now
        while len(self._recent) > RECENT_IDS:
            self._recent.popitem(last=False)
        return False

    async def accept(self, body: bytes, msg_signature: str, timestamp: str, nonce: str, js: Any, topo: Any) -> str:
        """Verify + decrypt + parse, then queue it for the channels service. Returns what happened."""
        fields = parse_message(self.crypt.decrypt_msg(body, msg_signature, timestamp, nonce))
        if fields.get("ToUserName") and fields["ToUserName"] != self.cs.wecom_corp_id:
            raise WeComCryptoError("message for another corp")
        sender = fields.get("FromUserName", "")
        msg_type = fields.get("MsgType", "")
        if not sender or msg_type == "event":
            return "ignored"
        created = fields.get("CreateTime", "")
        if created.isdigit() and abs(time.time() - int(created)) > MAX_MESSAGE_AGE:
            log.info("wecom message too old; ignored (replay?)")
            return "stale"
        key = fields.get("MsgId") or f"{sender}:{fields.get('CreateTime', '')}:{msg_type}"
        if self._seen_recently(key):
            log.info("wecom duplicate dropped", extra={"msg_id": key})
            return "duplicate"
        inbound = ChannelInbound(channel=bindings.WECOM, sender=sender, key=key, msg_type=msg_type,
                                 fields={k: str(v) for k, v in fields.items()}, received_at=time.time())
        await js.publish(topo.channel_inbound_subject(bindings.WECOM), encode(inbound),
                         headers={"Nats-Msg-Id": f"wecom:{key}"}, timeout=4)
        return "accepted"

    # ---- channels service --------------------------------------------------------------------------
    async def handle(self, inbound: ChannelInbound, redelivered: bool = False) -> None:
        sender, key, msg_type, fields = inbound.sender, inbound.key, inbound.msg_type, inbound.fields
        replier = WeComReplier(self.client, sender)
        try:
            binding = await bindings.find_wecom_binding(self.deps.sessions, sender)
            if binding is None:
                await self._notify_unbound(replier, sender)
                return
            pending = await self._pending(binding.id, key) if redelivered else None
            if pending is not None:
                outcome = await resume_reply(self.deps, binding.user_id, bindings.WECOM, pending["task_id"],
                                             pending["run_id"], pending["started"], replier,
                                             self._hooks(binding.id, key), text_sent=pending.get("text_sent", False))
                log.info("wecom reply resumed", extra={"binding_id": binding.id, "run_id": pending["run_id"]})
                return
            if not redelivered and not await bindings.claim_inbound(self.deps.sessions, binding.id, f"wecom:{key}"):
                log.info("wecom duplicate dropped", extra={"msg_id": key, "binding_id": binding.id})
                return
            if msg_type != "text" or not fields.get("Content", "").strip():
                await replier.send_text(MEDIA_ONLY_REPLY)
                return
            outcome = await run_message(self.deps, binding.user_id, bindings.WECOM, fields["Content"], replier,
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
        binding = await bindings.get_binding(self.deps.sessions, binding_id)
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

            await bindings.update_config(self.deps.sessions, binding_id, apply)

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
            f"user ID {sender} (PUT /v1/channels/wecom)."
        )

    async def close(self, grace: float = 5.0) -> None:
        if self.tasks:
            _, pending = await asyncio.wait(set(self.tasks), timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=2.0)
        await self.client.aclose()
