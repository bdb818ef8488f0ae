"""WeCom callback messages -> conversations (used by the gateway's callback route).

`accept()` does only what must happen before the HTTP answer (WeCom waits 5 s, then retries 3
times): signature check, decryption, parsing, and an in-process duplicate check on MsgId. The
rest runs in a background task: the binding lookup by the sender's UserID, the durable dedupe
(MsgId recorded in the binding row for 24 h, so a retry reaching another gateway replica is
dropped too), the run, and the reply via message/send.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from zcbot_core.channels import bindings
from zcbot_core.channels.conversation import MEDIA_ONLY_REPLY, ConversationDeps, run_message
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

    async def send_file(self, path: Path) -> None:
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

    def accept(self, body: bytes, msg_signature: str, timestamp: str, nonce: str) -> str:
        """Verify + decrypt + parse; start the handling in the background. Returns what happened."""
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
        task = asyncio.create_task(self._handle(sender, key, msg_type, fields))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return "accepted"

    # ---- background ------------------------------------------------------------------------------
    async def _handle(self, sender: str, key: str, msg_type: str, fields: dict[str, Any]) -> None:
        replier = WeComReplier(self.client, sender)
        try:
            binding = await bindings.find_wecom_binding(self.deps.sessions, sender)
            if binding is None:
                await self._notify_unbound(replier, sender)
                return
            if not await bindings.claim_inbound(self.deps.sessions, binding.id, f"wecom:{key}"):
                log.info("wecom duplicate dropped", extra={"msg_id": key, "binding_id": binding.id})
                return
            if msg_type != "text" or not fields.get("Content", "").strip():
                await replier.send_text(MEDIA_ONLY_REPLY)
                return
            outcome = await run_message(self.deps, binding.user_id, bindings.WECOM, fields["Content"], replier)
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
