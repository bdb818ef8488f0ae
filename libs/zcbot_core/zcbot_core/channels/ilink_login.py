"""iLink QR login for a zcbot user (the gateway's binding routes call these).

`start_login` fetches a QR code and keeps its (sealed) handle in the user's ilink binding row
(a new row has status `pending`; an existing active binding keeps working meanwhile).
`poll_login` long-polls the status once; on `confirmed` the bot_token is sealed into the row,
the bot identity is stored, and the binding becomes `active` (the channels service starts its
poll loop at its next scan). A login is valid for 5 minutes.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select

from zcbot_core.channels import bindings
from zcbot_core.channels.ilink_api import ILinkClient
from zcbot_core.db.models import ChannelBinding
from zcbot_core.errors import ZcbotError

LOGIN_TTL_SECONDS = 300.0
MAX_POLL_SECONDS = 30.0


class LoginError(ZcbotError):
    code = "login_error"

    def __init__(self, message: str, status_code: int = 409) -> None:
        super().__init__(message)
        self.status_code = self.http_status = status_code


def _trusted_base(url: str | None, configured: str) -> str | None:
    """A server-given API base is kept only if it is https on a qq.com host or the configured origin."""
    if not url:
        return None
    parts = urlsplit(url)
    conf = urlsplit(configured)
    if (parts.scheme, parts.netloc) == (conf.scheme, conf.netloc):
        return url.rstrip("/")
    host = (parts.hostname or "").lower()
    if parts.scheme == "https" and (host == "qq.com" or host.endswith(".qq.com")):
        return url.rstrip("/")
    return None


async def start_login(sessions: bindings.Sessions, key: bytes, client: ILinkClient, user_id: str) -> dict[str, Any]:
    qr = await client.get_bot_qrcode()
    now = time.time()
    async with sessions() as session, session.begin():
        row = (await session.execute(
            select(ChannelBinding).where(ChannelBinding.user_id == user_id, ChannelBinding.channel == bindings.ILINK)
            .with_for_update()
        )).scalar_one_or_none()
        if row is None:
            row = ChannelBinding(user_id=user_id, channel=bindings.ILINK, status=bindings.PENDING, config={})
            session.add(row)
        cfg = bindings.with_secret(key, dict(row.config or {}), "qrcode", str(qr["qrcode"]))
        cfg["login"] = {"started_at": now}
        row.config = cfg
    return {"status": "wait", "qrcode_img_content": qr.get("qrcode_img_content"), "expires_in": int(LOGIN_TTL_SECONDS)}


async def poll_login(sessions: bindings.Sessions, key: bytes, client: ILinkClient, user_id: str,
                     wait: float = 25.0, verify_code: str | None = None) -> dict[str, Any]:
    rows = await bindings.bindings_of(sessions, user_id, bindings.ILINK)
    row = rows[0] if rows else None
    login = (row.config or {}).get("login") if row else None
    if row is None or not login:
        raise LoginError("no WeChat login in progress; start one with POST /v1/channels/ilink/login")
    qrcode = bindings.get_secret(key, row.config, "qrcode")
    if not qrcode or time.time() - float(login.get("started_at", 0)) > LOGIN_TTL_SECONDS:
        await _clear_login(sessions, row.id)
        return {"status": "expired", "detail": "the QR code expired; start a new login"}
    result = await client.get_qrcode_status(qrcode, timeout=min(max(wait, 1.0), MAX_POLL_SECONDS),
                                            base_url=login.get("poll_base"), verify_code=verify_code)
    status = str(result.get("status") or "wait")
    if status == "confirmed":
        return await _confirm(sessions, key, client, row.id, user_id, result)
    if status in ("expired", "verify_code_blocked"):
        await _clear_login(sessions, row.id)
    elif status == "scaned_but_redirect":
        host = result.get("redirect_host")
        base = _trusted_base(f"https://{host}", client.cs.ilink_base_url) if host else None
        if base:
            def set_base(cfg: dict[str, Any]) -> dict[str, Any]:
                cfg["login"] = {**(cfg.get("login") or {}), "poll_base": base}
                return cfg

            await bindings.update_config(sessions, row.id, set_base)
        status = "scaned"
    return {"status": status}


async def _clear_login(sessions: bindings.Sessions, binding_id: int) -> None:
    def clear(cfg: dict[str, Any]) -> dict[str, Any]:
        cfg.pop("login", None)
        sec = dict(cfg.get("secrets") or {})
        sec.pop("qrcode", None)
        cfg["secrets"] = sec
        return cfg

    await bindings.update_config(sessions, binding_id, clear)


async def _confirm(sessions: bindings.Sessions, key: bytes, client: ILinkClient, binding_id: int, user_id: str,
                   result: dict[str, Any]) -> dict[str, Any]:
    bot_token = result.get("bot_token")
    bot_id = result.get("ilink_bot_id")
    if not bot_token or not bot_id:
        await _clear_login(sessions, binding_id)
        raise LoginError("WeChat confirmed the login but sent no bot credentials; try again", 502)
    async with sessions() as session, session.begin():
        other = (await session.scalars(
            select(ChannelBinding).where(ChannelBinding.channel == bindings.ILINK, ChannelBinding.user_id != user_id,
                                         ChannelBinding.config["ilink_bot_id"].astext == str(bot_id))
        )).first()
        if other is not None:
            raise LoginError("this WeChat bot is already linked to another zcbot account")
        row = (await session.execute(
            select(ChannelBinding).where(ChannelBinding.id == binding_id).with_for_update()
        )).scalar_one()
        cfg = dict(row.config or {})
        if cfg.get("ilink_bot_id") != bot_id:  # a different bot: its cursor and chat context start fresh
            for name in ("cursor", "context_token_at", "seen"):
                cfg.pop(name, None)
            cfg = bindings.with_secret(key, cfg, "context_token", None)
        cfg = bindings.with_secret(key, cfg, "bot_token", str(bot_token))
        cfg = bindings.with_secret(key, cfg, "qrcode", None)
        cfg.pop("login", None)
        cfg.pop("paused_until", None)
        cfg.update({"ilink_bot_id": str(bot_id), "ilink_user_id": result.get("ilink_user_id"), "session": "ok"})
        base = _trusted_base(result.get("baseurl"), client.cs.ilink_base_url)
        if base:
            cfg["baseurl"] = base
        else:
            cfg.pop("baseurl", None)
        row.config = cfg
        row.status = bindings.ACTIVE
        await session.flush()
        await session.refresh(row)
        view = bindings.public_view(row)
    return {"status": "confirmed", "binding": view}
