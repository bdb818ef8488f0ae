"""Proof of ownership for a WeCom binding (issue 22): a one-time code sent to the WeCom member
through the app, typed back by the zcbot user.

Claiming a member's UserID used to be enough to receive that person's messages. Now
`start_binding` sends a 6-digit code to the member (WeCom `message/send`, as the app) and keeps only
its salted hash, on the user's wecom row under `pending`; `confirm_binding` makes the binding
active, with `verified_at`, only for the right code within `CODE_TTL_SECONDS` and at most
`MAX_ATTEMPTS` wrong tries per code. A new code is sent at most once per `RESEND_SECONDS` (the
member is not flooded; WeCom also limits an app's messages per member). While a code is pending, an
earlier verified binding of the same user keeps working. Only verified bindings carry messages or
block another account's claim (`bindings.usable`, `bindings.find_wecom_binding`).

Or by scanning (seed 003 §8.7, issue 40): `start_oauth` gives the wwlogin QR URL for the app with a
one-time `state` (only its hash is kept, under `oauth`, for `OAUTH_TTL_SECONDS`); the member scans
it in WeCom, WeCom redirects the browser to the callback with `code` and `state`, and
`finish_oauth` finds the user by the state, asks WeCom who scanned (`auth/getuserinfo`) and makes
the binding active the same way a typed code does (`method: "oauth"`). The state is used once.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from zcbot_core.channels import bindings
from zcbot_core.channels.wecom_api import ALL_RECIPIENTS_INVALID, WeComClient, WeComError
from zcbot_core.db.models import ChannelBinding
from zcbot_core.errors import ZcbotError

CODE_DIGITS = 6
CODE_TTL_SECONDS = 600
RESEND_SECONDS = 60
MAX_ATTEMPTS = 5
OAUTH_TTL_SECONDS = 600


class BindingRefused(ZcbotError):
    """The code is wrong, expired or used up, or no code was sent (the caller's fault: 400)."""

    code = "wecom_binding_refused"
    http_status = 400


class WeComUserTaken(ZcbotError):
    code = "wecom_user_taken"
    http_status = 409


class CodeRecentlySent(ZcbotError):
    code = "wecom_code_recently_sent"
    http_status = 429

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"验证码刚刚发送过，请 {retry_after} 秒后再试")
        self.headers = {"Retry-After": str(retry_after)}  # type: ignore[misc]


def _digest(salt: str, code: str) -> str:
    return hashlib.sha256(f"{salt}:{code}".encode()).hexdigest()


def code_message(code: str) -> str:
    minutes = CODE_TTL_SECONDS // 60
    return (f"你的 zcbot 绑定验证码：{code}（{minutes} 分钟内有效）。"
            "请在 zcbot 中输入它以绑定企业微信；如果不是你本人操作，请忽略这条消息。")


async def _row(session: AsyncSession, user_id: str) -> ChannelBinding | None:
    return (await session.scalars(
        select(ChannelBinding).where(ChannelBinding.user_id == user_id, ChannelBinding.channel == bindings.WECOM)
        .with_for_update()
    )).first()


async def _verified_owner(session: AsyncSession, userid: str, other_than: str) -> str | None:
    """The zcbot account that has proven this WeCom member, other than `other_than`."""
    return (await session.scalars(
        select(ChannelBinding.user_id).where(
            ChannelBinding.channel == bindings.WECOM, ChannelBinding.user_id != other_than,
            ChannelBinding.status == bindings.ACTIVE, ChannelBinding.config["userid"].astext == userid,
            ChannelBinding.config.has_key("verified_at"))
        .limit(1)
    )).first()


async def start_binding(session: AsyncSession, client: WeComClient, user_id: str, userid: str,
                        now: float | None = None) -> dict[str, Any]:
    """Send a code to the WeCom member `userid` and remember its hash for `user_id`. Commits."""
    now = time.time() if now is None else now
    if await _verified_owner(session, userid, user_id) is not None:
        raise WeComUserTaken("this WeCom user ID is linked to another zcbot account")
    row = await _row(session, user_id)
    # Kept outside `pending`, so a code used up by wrong guesses does not allow an immediate new one.
    last_sent = float((row.config or {}).get("code_sent_at", 0)) if row is not None else 0.0
    wait = last_sent + RESEND_SECONDS - now
    if wait > 0:
        raise CodeRecentlySent(max(1, math.ceil(wait)))
    code = f"{secrets.randbelow(10 ** CODE_DIGITS):0{CODE_DIGITS}d}"
    salt = secrets.token_hex(8)
    try:
        await client.send_text(userid, code_message(code))
    except WeComError as exc:
        await session.rollback()
        if exc.errcode == ALL_RECIPIENTS_INVALID:
            raise BindingRefused("WeCom has no member with this user ID in the app's visible range") from None
        raise
    pending = {"userid": userid, "salt": salt, "digest": _digest(salt, code),
               "expires_at": now + CODE_TTL_SECONDS, "attempts": 0}
    if row is None:
        row = ChannelBinding(user_id=user_id, channel=bindings.WECOM, status=bindings.PENDING,
                             config={"pending": pending, "code_sent_at": now})
        session.add(row)
    else:
        row.config = {**(row.config or {}), "pending": pending, "code_sent_at": now}
    await session.commit()
    return {"channel": bindings.WECOM, "status": "code_sent", "userid": userid, "expires_in": CODE_TTL_SECONDS}


async def confirm_binding(session: AsyncSession, user_id: str, code: str, now: float | None = None) -> ChannelBinding:
    """Activate the pending binding when `code` is the one sent. Commits either way (attempts count)."""
    now = time.time() if now is None else now
    row = await _row(session, user_id)
    config = dict(row.config or {}) if row is not None else {}
    pending = config.get("pending")
    if row is None or not pending:
        raise BindingRefused("no binding code is pending: send the WeCom user ID first (PUT /v1/channels/wecom)")
    if now >= float(pending["expires_at"]) or int(pending["attempts"]) >= MAX_ATTEMPTS:
        config.pop("pending")
        row.config = config
        await session.commit()
        raise BindingRefused("the code expired or was tried too often: request a new one")
    if not hmac.compare_digest(_digest(pending["salt"], code.strip()), pending["digest"]):
        pending = {**pending, "attempts": int(pending["attempts"]) + 1}
        left = MAX_ATTEMPTS - pending["attempts"]
        if left <= 0:
            config.pop("pending")
        else:
            config["pending"] = pending
        row.config = config
        await session.commit()
        raise BindingRefused(f"wrong code ({left} tries left)" if left > 0 else "wrong code: request a new one")
    config.pop("pending")
    return await _activate(session, row, config, pending["userid"], now, "code")


async def _activate(session: AsyncSession, row: ChannelBinding, config: dict[str, Any], userid: str, now: float,
                    method: str) -> ChannelBinding:
    """The member proven (a typed code, a scan): the binding is active. Commits."""
    # Two accounts may both be proving the same member; one member, one account: decide under a lock.
    await session.execute(select(func.pg_advisory_xact_lock(func.hashtext("wecom-binding:" + userid))))
    if await _verified_owner(session, userid, row.user_id) is not None:
        raise WeComUserTaken("this WeCom user ID is linked to another zcbot account")
    row.config = {**config, "userid": userid, "verified_at": now, "method": method}  # a new dict: seen as changed
    row.status = bindings.ACTIVE
    await session.commit()
    await session.refresh(row)
    return row


# ---- binding by scanning (wwlogin QR, OAuth) -------------------------------------------------------
def _state_digest(state: str) -> str:
    return hashlib.sha256(f"wecom-oauth:{state}".encode()).hexdigest()


async def start_oauth(session: AsyncSession, cs: Any, user_id: str, redirect_uri: str,
                      now: float | None = None) -> dict[str, Any]:
    """The QR login URL for `user_id` (a `ChannelSettings` `cs`), with a fresh one-time state. Commits."""
    now = time.time() if now is None else now
    state = secrets.token_urlsafe(24)
    oauth = {"digest": _state_digest(state), "expires_at": now + OAUTH_TTL_SECONDS}
    row = await _row(session, user_id)
    if row is None:
        session.add(ChannelBinding(user_id=user_id, channel=bindings.WECOM, status=bindings.PENDING,
                                   config={"oauth": oauth}))
    else:
        row.config = {**(row.config or {}), "oauth": oauth}
    await session.commit()
    query = {"login_type": "CorpApp", "appid": cs.wecom_corp_id, "agentid": str(cs.wecom_agent_id),
             "redirect_uri": redirect_uri, "state": state}
    return {"channel": bindings.WECOM, "url": f"{cs.wecom_login_url}?{urlencode(query)}", "expires_in": OAUTH_TTL_SECONDS}


async def finish_oauth(session: AsyncSession, client: WeComClient, state: str, code: str,
                       now: float | None = None) -> ChannelBinding:
    """The scan's redirect: the binding of the user whose state this is, proven as the member who
    scanned. BindingRefused for an unknown, used or expired state and for a scanner outside the
    enterprise. Commits."""
    now = time.time() if now is None else now
    row = (await session.scalars(
        select(ChannelBinding).where(ChannelBinding.channel == bindings.WECOM,
                                     ChannelBinding.config["oauth"]["digest"].astext == _state_digest(state))
        .with_for_update()
    )).first()
    if row is None:
        raise BindingRefused("this WeCom sign-in link is unknown or was already used: start again from zcbot")
    config = dict(row.config or {})
    oauth = config.pop("oauth")
    row.config = config  # used once, whatever happens next
    if now >= float(oauth["expires_at"]):
        await session.commit()
        raise BindingRefused("the WeCom sign-in link expired: start again from zcbot")
    try:
        userid = await client.user_of_code(code)
    except WeComError:
        await session.commit()
        raise
    if userid is None:
        await session.commit()
        raise BindingRefused("the scanning WeCom account is not a member of this enterprise")
    config.pop("pending", None)
    return await _activate(session, row, config, userid, now, "oauth")
