"""Delivering a `PushRequest` (from `zcbot_core.channels.push.send_to_user`) to the user's channels.

`channel=None` tries every usable binding; a named channel is tried alone (no fallback). WeCom
can always push (the app's message/send). iLink needs a context_token from the user's last
message within `ilink_context_max_age` (~24 h server side); otherwise that channel refuses with a
message saying so. When no channel delivered (none linked, or each refused) and the push may fall
back (`channel=None`, or a scheduled job's notify, whatever channel it names), it goes by e-mail to the user's address (seed §8.7 "超期退邮件兜底"; `email_api.py`), and the
reply still names what each channel said. Each WeChat delivery is recorded in that channel's task
as a `push` message.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from zcbot_channels.context import ChannelsContext
from zcbot_core import safe_fs
from zcbot_core.bus import PushReply, PushRequest
from zcbot_core.channels import bindings
from zcbot_core.channels.conversation import record_push
from zcbot_core.channels.email_api import EmailError
from zcbot_core.channels.ilink_api import ILinkError
from zcbot_core.channels.wecom_api import WeComError
from zcbot_core.db.models import User
from zcbot_core.safe_fs import paths

if TYPE_CHECKING:
    from zcbot_core.db.models import ChannelBinding

log = logging.getLogger(__name__)

CHANNEL_LABELS = {"wecom": "WeCom", "ilink": "personal WeChat"}
EMAIL = "email"


def _resolve_file(ctx: ChannelsContext, user_id: str, file_path: str) -> safe_fs.UserFile:
    """The regular file `file_path` of the user's root; read later through safe_fs (no symlink is
    ever followed, so a folder swapped for a link meanwhile makes the send fail, nothing else)."""
    return safe_fs.UserFile.regular(paths.user_root(ctx.settings.storage_root, user_id), file_path)


def _ilink_window_error(ctx: ChannelsContext, cfg: dict) -> str | None:
    at = cfg.get("context_token_at")
    has_token = bool((cfg.get("secrets") or {}).get("context_token"))
    max_age = ctx.cs.ilink_context_max_age
    if not has_token or not at:
        return ("personal WeChat only delivers within ~24 h of the user's last message to the bot, and this user "
                "has not written to it yet; ask them to send the bot any message (or use WeCom)")
    age = time.time() - float(at)
    if age > max_age:
        return (f"personal WeChat only delivers within ~24 h of the user's last message to the bot, and the last one "
                f"was {age / 3600:.0f} h ago; ask them to send the bot any message (or use WeCom)")
    return None


async def _deliver_one(ctx: ChannelsContext, binding: "ChannelBinding", req: PushRequest, file: safe_fs.UserFile | None) -> None:
    cfg = binding.config or {}
    if binding.channel == bindings.WECOM:
        if not ctx.cs.wecom_send_enabled:
            raise WeComError("WeCom is not configured on this server")
        userid = str(cfg["userid"])
        if req.text.strip():
            await ctx.wecom.send_text(userid, req.text)
        if file is not None:
            await ctx.wecom.send_file(userid, file)
        return
    if binding.channel == bindings.ILINK:
        if ctx.key is None:
            raise ILinkError("personal WeChat is disabled on this server (ZCBOT_CHANNEL_SECRET_KEY is not set)")
        problem = _ilink_window_error(ctx, cfg)
        if problem:
            raise ILinkError(problem)
        token = bindings.get_secret(ctx.key, cfg, "bot_token")
        context_token = bindings.get_secret(ctx.key, cfg, "context_token")
        to = cfg.get("peer") or cfg.get("ilink_user_id")
        if not token or not to:
            raise ILinkError("the WeChat binding is incomplete; log in again")
        if req.text.strip():
            await ctx.ilink.send_text(str(to), req.text, token=token, context_token=context_token, base_url=cfg.get("baseurl"))
        if file is not None:
            await ctx.ilink.send_file(str(to), file, token=token, context_token=context_token, base_url=cfg.get("baseurl"))
        return
    raise ValueError(f"unknown channel {binding.channel}")


async def _email_fallback(ctx: ChannelsContext, req: PushRequest, file: safe_fs.UserFile | None,
                          reply: PushReply) -> None:
    if not ctx.cs.email_enabled:
        reply.errors[EMAIL] = "no e-mail fallback: e-mail is not configured on this server"
        return
    async with ctx.sessions() as session:
        user = await session.get(User, req.user_id)
        address = user.email if user is not None else None
    if not address:
        reply.errors[EMAIL] = "no e-mail fallback: the user has no e-mail address"
        return
    try:
        await ctx.email.send(address, req.text, file)
    except EmailError as exc:
        reply.errors[EMAIL] = str(exc)
        return
    reply.delivered.append(EMAIL)


async def deliver(ctx: ChannelsContext, req: PushRequest) -> PushReply:
    reply = PushReply()
    if req.channel not in (None, "", bindings.WECOM, bindings.ILINK):
        reply.errors[str(req.channel)] = "unknown channel (use 'wecom' or 'ilink')"
        return reply
    if not req.text.strip() and not req.file_path:
        reply.errors["request"] = "nothing to send (empty text and no file)"
        return reply
    # A scheduled job's notify must reach the user (its channel or, failing that, e-mail); a push
    # that names its channel otherwise gets that channel or nothing (the agent asked for it).
    fallback = not req.channel or req.origin == "scheduler"
    targets = await bindings.usable_bindings(ctx.sessions, req.user_id)
    if req.channel:
        targets = [b for b in targets if b.channel == req.channel]
        if not targets:
            reply.errors[req.channel] = f"{CHANNEL_LABELS[req.channel]} is not linked for this user"
            if not fallback:
                return reply
    if not targets:
        reply.errors["channels"] = "the user has no linked WeChat channel"
    file = None
    if req.file_path:
        try:
            file = _resolve_file(ctx, req.user_id, req.file_path)
        except paths.PathRejected as exc:
            reply.errors["file"] = str(exc)
            return reply
    for binding in targets:
        try:
            await _deliver_one(ctx, binding, req, file)
        except (WeComError, ILinkError) as exc:
            reply.errors[binding.channel] = str(exc)
            continue
        except Exception as exc:
            log.exception("push delivery failed", extra={"channel": binding.channel})
            reply.errors[binding.channel] = f"internal error ({exc.__class__.__name__})"
            continue
        reply.delivered.append(binding.channel)
        try:
            await record_push(ctx.sessions, ctx.settings, req.user_id, binding.channel, req.text, req.file_path)
        except Exception:
            log.exception("could not record the push in the channel task", extra={"channel": binding.channel})
    if not reply.delivered and fallback:
        await _email_fallback(ctx, req, file, reply)
    log.info("push handled", extra={"user_id": req.user_id, "origin": req.origin, "delivered": reply.delivered,
                                    "failed": sorted(reply.errors)})
    return reply
