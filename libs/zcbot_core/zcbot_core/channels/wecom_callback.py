"""The gateway's half of WeCom: the callback's signature check, decryption and hand-off.

`accept()` does only what must happen before the HTTP answer (WeCom waits 5 s, then retries 3
times): signature check, decryption, parsing, an in-process duplicate check on MsgId, and
publishing the message to the `CHANNEL_IN` work queue (`Nats-Msg-Id` = MsgId, so a retry reaching
another gateway replica is dropped by the stream too). The run and the reply are the channels
service's half (`zcbot_channels.wecom.WeComConversations`), so a gateway restart loses nothing
and the gateway holds no WeCom client and no conversation state.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any

from zcbot_core.bus import ChannelInbound, encode
from zcbot_core.channels import bindings
from zcbot_core.channels.settings import ChannelSettings
from zcbot_core.channels.wecom_crypto import WeComCrypt, WeComCryptoError, parse_message

log = logging.getLogger(__name__)

RECENT_IDS = 4096
MAX_MESSAGE_AGE = 24 * 3600.0  # the dedupe window: anything older could be a replay


class WeComCallback:
    def __init__(self, cs: ChannelSettings) -> None:
        if not cs.wecom_callback_enabled:
            raise WeComCryptoError("WeCom callback is not configured")
        self.cs = cs
        self.crypt = WeComCrypt(cs.wecom_token or "", cs.wecom_aes_key or "", cs.wecom_corp_id or "")
        self._recent: OrderedDict[str, float] = OrderedDict()

    def __repr__(self) -> str:
        return f"WeComCallback(corp_id={self.cs.wecom_corp_id!r})"

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
