"""`send_to_user`: deliver text (and optionally a file) to a user's WeChat channels (seed 003 §8.7).

Request/reply over `Topology.push_subject(user_id)` to the channels service (queue group, so
one replica answers). `channel=None` broadcasts to every active channel; a named channel is
tried alone, with no fallback. `file_path` is relative to the user's root. The reply lists the
channels that got it (`delivered`) and why the others did not (`errors`, channel -> message);
when nothing answers (channels service down) `errors` has the key `"service"`. Callers:
the `wechat_push` tool and the scheduler's notify fallback.
"""

from __future__ import annotations

import logging

from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from zcbot_core.bus import BusDecodeError, PushReply, PushRequest, Topology, decode, encode

log = logging.getLogger(__name__)


async def send_to_user(
    nc: NATS,
    topo: Topology,
    user_id: str,
    text: str,
    file_path: str | None = None,
    channel: str | None = None,
    timeout: float = 10,
    origin: str = "tool",
) -> PushReply:
    req = PushRequest(user_id=user_id, text=text, file_path=file_path, channel=channel, origin=origin)
    try:
        msg = await nc.request(topo.push_subject(user_id), encode(req), timeout=timeout)
    except NoRespondersError:
        return PushReply(errors={"service": "the channels service is not running; nothing was sent"})
    except (NatsTimeoutError, TimeoutError):
        return PushReply(errors={"service": f"the channels service did not answer within {timeout:g} s "
                                            "(the message may still arrive)"})
    try:
        return decode(msg.data, PushReply)
    except BusDecodeError as exc:
        log.warning("bad push reply", extra={"error": str(exc)})
        return PushReply(errors={"service": "the channels service sent an unreadable reply"})
