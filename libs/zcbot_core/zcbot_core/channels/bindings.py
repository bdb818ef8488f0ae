"""`channel_bindings` rows: one per (user, channel); the channel discriminator + a JSONB config.

Config layout (non-secret values in the clear, secrets sealed with `channels.sealing` under
`secrets`):

- wecom: `{"userid": "<WeCom member UserID>", "verified_at": epoch}` (the app's corp secret lives in
  the environment); while a proof of ownership is under way also `"pending": {...}` (the code's
  salted hash, see `wecom_binding.py`). A binding without `verified_at` carries nothing.
- ilink: `{"ilink_bot_id", "ilink_user_id", "baseurl", "cursor" (get_updates_buf),
  "context_token_at" (epoch s), "session" ("ok" | "expired"), "paused_until",
  "secrets": {"bot_token", "context_token", "qrcode" (while a login is pending)},
  "login": {"started_at"}}`.
- both: `"seen": {"<message id>": epoch}` (inbound dedupe, 24 h, bounded).

Every read-modify-write goes through `update_config` (row lock), so the poll loop, inbound
handlers, logins and pushes on any replica never overwrite each other's keys.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from zcbot_core.channels.sealing import SealError, open_sealed, seal
from zcbot_core.db.models import ChannelBinding

WECOM = "wecom"
ILINK = "ilink"
ACTIVE = "active"
PENDING = "pending"
DEDUPE_TTL_SECONDS = 24 * 3600.0
DEDUPE_MAX = 2000

Sessions = async_sessionmaker[AsyncSession]


# ---- secrets ---------------------------------------------------------------------------------
def get_secret(key: bytes, config: dict[str, Any], name: str) -> str | None:
    sealed = (config.get("secrets") or {}).get(name)
    if not sealed:
        return None
    try:
        return open_sealed(key, sealed)
    except SealError:
        return None  # rotated key or tampering: treat as absent (the user re-binds)


def with_secret(key: bytes, config: dict[str, Any], name: str, value: str | None) -> dict[str, Any]:
    new = dict(config)
    sec = dict(new.get("secrets") or {})
    if value is None:
        sec.pop(name, None)
    else:
        sec[name] = seal(key, value)
    new["secrets"] = sec
    return new


def usable(binding: Any) -> bool:
    """Can this binding (a `ChannelBinding`, or a row with its channel, status and config) carry
    messages at all (active and configured)?"""
    if binding.status != ACTIVE:
        return False
    cfg = binding.config or {}
    if binding.channel == WECOM:
        return bool(cfg.get("userid") and cfg.get("verified_at"))  # proven by a code (wecom_binding.py)
    if binding.channel == ILINK:
        return bool((cfg.get("secrets") or {}).get("bot_token"))
    return False


PUBLIC_KEYS = {
    WECOM: ("userid", "method"),  # method: how it was proven (code | oauth)
    ILINK: ("ilink_bot_id", "ilink_user_id", "session", "paused_until", "context_token_at"),
}


def public_view(binding: ChannelBinding, now: float | None = None) -> dict[str, Any]:
    """What an API may show about a binding: never secrets, cursors or dedupe state."""
    cfg = binding.config or {}
    out: dict[str, Any] = {
        "channel": binding.channel,
        "status": binding.status,
        "created_at": binding.created_at.isoformat() if binding.created_at else None,
        "updated_at": binding.updated_at.isoformat() if binding.updated_at else None,
    }
    for name in PUBLIC_KEYS.get(binding.channel, ()):
        if name in cfg:
            out[name] = cfg[name]
    if binding.channel == ILINK:
        at = cfg.get("context_token_at")
        out["push_window_open"] = bool(at and (now or time.time()) - float(at) < 23 * 3600
                                       and (cfg.get("secrets") or {}).get("context_token"))
        out["login_pending"] = bool(cfg.get("login"))
    if binding.channel == WECOM:
        out["code_pending"] = bool(cfg.get("pending"))
    return out


# ---- queries ---------------------------------------------------------------------------------
async def bindings_of(sessions: Sessions, user_id: str, channel: str | None = None) -> list[ChannelBinding]:
    async with sessions() as session:
        stmt = select(ChannelBinding).where(ChannelBinding.user_id == user_id)
        if channel is not None:
            stmt = stmt.where(ChannelBinding.channel == channel)
        return list((await session.scalars(stmt.order_by(ChannelBinding.channel))).all())


async def usable_bindings(sessions: Sessions, user_id: str) -> list[ChannelBinding]:
    """The user's bindings a push can go out on (`usable`): the targets of every push delivery."""
    return [b for b in await bindings_of(sessions, user_id) if usable(b)]


_ACTIVE_BINDINGS = (
    select(ChannelBinding.channel, ChannelBinding.status, ChannelBinding.config)
    .where(ChannelBinding.user_id == bindparam("bindings_user"), ChannelBinding.status == ACTIVE)
)


async def user_has_channel(autocommit: AsyncEngine, user_id: str) -> bool:
    """True when the user has at least one active, configured channel binding (`wechat_push` gate).
    Asked before every run: one statement on the autocommit pool (`Runtime.autocommit`), no transaction."""
    async with autocommit.connect() as conn:
        rows = (await conn.execute(_ACTIVE_BINDINGS, {"bindings_user": user_id})).all()
    return any(usable(row) for row in rows)


async def get_binding(sessions: Sessions, binding_id: int) -> ChannelBinding | None:
    async with sessions() as session:
        return await session.get(ChannelBinding, binding_id)


async def find_wecom_binding(sessions: Sessions, wecom_userid: str) -> ChannelBinding | None:
    async with sessions() as session:
        return (await session.scalars(
            select(ChannelBinding).where(ChannelBinding.channel == WECOM, ChannelBinding.status == ACTIVE,
                                         ChannelBinding.config["userid"].astext == wecom_userid,
                                         ChannelBinding.config.has_key("verified_at"))
            .order_by(ChannelBinding.id).limit(1)
        )).first()


async def active_ilink_bindings(sessions: Sessions) -> list[ChannelBinding]:
    async with sessions() as session:
        rows = (await session.scalars(
            select(ChannelBinding).where(ChannelBinding.channel == ILINK, ChannelBinding.status == ACTIVE)
            .order_by(ChannelBinding.id)
        )).all()
    return [b for b in rows if usable(b)]


# ---- updates ---------------------------------------------------------------------------------
async def update_config(
    sessions: Sessions, binding_id: int, fn: Callable[[dict[str, Any]], dict[str, Any] | None],
) -> dict[str, Any] | None:
    """Row-locked read-modify-write of a binding's config; `fn` returns the new config (None = no change).

    Returns the config after the update, or None when the binding no longer exists.
    """
    async with sessions() as session, session.begin():
        binding = (await session.execute(
            select(ChannelBinding).where(ChannelBinding.id == binding_id).with_for_update()
        )).scalar_one_or_none()
        if binding is None:
            return None
        current = dict(binding.config or {})
        new = fn(dict(current))
        if new is not None and new != current:
            binding.config = new
            return new
        return current


def _prune_seen(seen: dict[str, float], now: float) -> dict[str, float]:
    fresh = {k: v for k, v in seen.items() if now - float(v) < DEDUPE_TTL_SECONDS}
    if len(fresh) > DEDUPE_MAX:
        fresh = dict(sorted(fresh.items(), key=lambda kv: kv[1])[-DEDUPE_MAX:])
    return fresh


async def claim_inbound(sessions: Sessions, binding_id: int, message_key: str,
                        extra: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> bool:
    """Record an inbound message id; False when it was already seen within 24 h (a duplicate).

    `extra` may change other keys in the same locked update (e.g. the latest context token).
    """
    claimed = False

    def apply(cfg: dict[str, Any]) -> dict[str, Any] | None:
        nonlocal claimed
        now = time.time()
        seen = _prune_seen(dict(cfg.get("seen") or {}), now)
        if message_key in seen:
            return None
        seen[message_key] = now
        claimed = True
        cfg["seen"] = seen
        return extra(cfg) if extra is not None else cfg

    await update_config(sessions, binding_id, apply)
    return claimed
