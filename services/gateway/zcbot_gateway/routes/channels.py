"""WeChat channels: the WeCom callback endpoint and the user's channel bindings (seed 003 §8.7).

Callback (no bearer auth; WeCom signs every request):
- `GET  /v1/channels/wecom/callback?msg_signature&timestamp&nonce&echostr`: URL verification;
  answers the decrypted echostr as plain text.
- `POST /v1/channels/wecom/callback?msg_signature&timestamp&nonce`: verified, decrypted and
  de-duplicated at once, answered with an empty 200 (WeCom retries after 5 s); the run and the
  reply (message/send) happen in the channels service, which consumes the message from JetStream
  (`zcbot_core.channels.wecom_callback` here, `zcbot_channels.wecom` there), so a gateway restart
  loses nothing; the gateway holds no conversation (its one WeCom client only sends binding codes).
  Bad signature/ciphertext -> 403; WeCom not configured -> 503.

Bindings (bearer auth; secrets never appear in responses):
- `GET    /v1/channels`: the user's bindings.
- `PUT    /v1/channels/wecom {"userid"}`: start linking WeCom: a one-time code goes to that member
  through the app (202; 409 if another zcbot user has proven it, 429 + Retry-After within a
  minute of the last code, 400 if WeCom knows no such member).
- `POST   /v1/channels/wecom/verify {"code"}`: the code typed back -> the binding is active
  (`zcbot_core.channels.wecom_binding`; wrong/expired -> 400). Unproven bindings carry nothing.
- `POST   /v1/channels/wecom/oauth`: bind by scanning instead (wwlogin QR): `{url, expires_in}`,
  the WeCom login page for the app with a one-time state; WeCom then sends the browser to
- `GET    /v1/channels/wecom/oauth/callback?code&state` (no bearer: the state names the user):
  the scanner's member id from WeCom, the binding active (`method: "oauth"`), and a 303 back to
  the page with `?wecom_binding=ok` (or `=<error code>`: unknown/used/expired state, not a member,
  the member bound to another account).
- `POST   /v1/channels/ilink/login`: start a personal-WeChat QR login -> `{qrcode_img_content}`.
- `GET    /v1/channels/ilink/login?wait=25[&verify_code=]`: one long-poll of the login status
  (`wait | scaned | confirmed | expired | need_verifycode | ...`); `confirmed` activates it.
- `DELETE /v1/channels/{channel}`: unlink (the iLink poll loop stops at its next turn).

`install(app)` registers a shutdown hook that closes the iLink HTTP client (QR login); include
`router` and call `install(app)`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, HTTPException, Query, Request, Response, status
from fastapi.responses import PlainTextResponse, RedirectResponse
from pydantic import BaseModel, Field
from sqlalchemy import select

from zcbot_core.channels import bindings
from zcbot_core.channels.ilink_api import ILinkClient, ILinkError
from zcbot_core.channels.ilink_login import poll_login, start_login
from zcbot_core.channels.sealing import key_from_settings
from zcbot_core.channels.settings import ChannelSettings
from zcbot_core.channels.wecom_api import WeComClient, WeComNotConfigured
from zcbot_core.channels.wecom_binding import confirm_binding, finish_oauth, start_binding, start_oauth
from zcbot_core.channels.wecom_callback import WeComCallback
from zcbot_core.channels.wecom_crypto import WeComCryptoError
from zcbot_core.db.models import ChannelBinding
from zcbot_core.errors import ZcbotError
from zcbot_core.platform.config import ConfigError
from zcbot_gateway.deps import CurrentUser, RuntimeDep, SessionDep, SettingsDep
from zcbot_gateway.errors import ServiceUnavailable
from zcbot_gateway.hooks import add_shutdown_hook
from zcbot_gateway.http import MAX_PAGE_SIZE, PagingDep

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/channels", tags=["channels"])
ChannelPaging = PagingDep(MAX_PAGE_SIZE, MAX_PAGE_SIZE)

MAX_CALLBACK_BODY = 64 * 1024
WECOM_USERID = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")


@dataclass
class ChannelsState:
    cs: ChannelSettings
    ilink: ILinkClient
    wecom: WeComCallback | None = None
    wecom_error: str | None = None
    # Sends the binding codes only (the conversation's messages go out from the channels service).
    wecom_sender: WeComClient | None = None


def _state(app: FastAPI) -> ChannelsState:
    state: ChannelsState | None = getattr(app.state, "channels", None)
    if state is None:
        try:
            cs = ChannelSettings.from_env()
        except ConfigError as exc:
            raise ServiceUnavailable(f"channels are misconfigured: {exc}") from None
        state = ChannelsState(cs=cs, ilink=ILinkClient(cs), wecom_sender=WeComClient(cs) if cs.wecom_send_enabled else None)
        if cs.wecom_callback_enabled:
            try:
                state.wecom = WeComCallback(cs)
            except WeComCryptoError as exc:
                state.wecom_error = str(exc)
        else:
            state.wecom_error = ("the WeCom callback is not configured (ZCBOT_WECOM_CORP_ID, ZCBOT_WECOM_AGENT_ID, "
                                 "ZCBOT_WECOM_SECRET, ZCBOT_WECOM_TOKEN, ZCBOT_WECOM_AES_KEY)")
        app.state.channels = state
    return state


async def _shutdown(app: FastAPI) -> None:
    state: ChannelsState | None = getattr(app.state, "channels", None)
    if state is None:
        return
    await state.ilink.aclose()
    if state.wecom_sender is not None:
        await state.wecom_sender.aclose()
    app.state.channels = None


def install(app: FastAPI) -> None:
    """Register the shutdown hook that closes the HTTP client."""
    add_shutdown_hook(app, _shutdown)


def _wecom(request: Request) -> WeComCallback:
    state = _state(request.app)
    if state.wecom is None:
        raise ServiceUnavailable(state.wecom_error or "WeCom is not configured")
    return state.wecom


# ---- WeCom callback ------------------------------------------------------------------------------
@router.get("/wecom/callback", response_class=PlainTextResponse, include_in_schema=False)
async def wecom_verify(request: Request, rt: RuntimeDep, msg_signature: str = "", timestamp: str = "",
                       nonce: str = "", echostr: str = "") -> PlainTextResponse:
    inbound = _wecom(request)
    try:
        plain = inbound.verify_url(msg_signature, timestamp, nonce, echostr)
    except WeComCryptoError:
        log.warning("wecom callback verification rejected")
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail="invalid signature") from None
    return PlainTextResponse(plain)


@router.post("/wecom/callback", include_in_schema=False)
async def wecom_message(request: Request, rt: RuntimeDep, msg_signature: str = "", timestamp: str = "",
                        nonce: str = "") -> Response:
    inbound = _wecom(request)
    body = await request.body()
    if len(body) > MAX_CALLBACK_BODY:
        raise HTTPException(status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, detail="body too large")
    try:
        await inbound.accept(body, msg_signature, timestamp, nonce, rt.js, rt.topo)
    except WeComCryptoError:
        log.warning("wecom callback rejected")
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail="invalid signature or message") from None
    return Response(status_code=200, content=b"")


# ---- bindings ------------------------------------------------------------------------------------
class WeComBindIn(BaseModel):
    userid: str = Field(min_length=1, max_length=64, description="The member's WeCom UserID")


class WeComVerifyIn(BaseModel):
    code: str = Field(min_length=1, max_length=16, description="The code WeCom delivered to the member")


def _sealing_key(settings: Any) -> bytes:
    try:
        return key_from_settings(settings)
    except ConfigError as exc:
        raise ServiceUnavailable(str(exc)) from None


@router.get("")
async def list_bindings(user_id: CurrentUser, rt: RuntimeDep, paging: ChannelPaging) -> dict[str, Any]:
    """Your channel bindings (list envelope)."""
    rows = await bindings.bindings_of(rt.sessions, user_id)
    return paging.slice([bindings.public_view(b) for b in rows])


@router.put("/wecom", status_code=status.HTTP_202_ACCEPTED)
async def bind_wecom(request: Request, body: WeComBindIn, user_id: CurrentUser, session: SessionDep) -> dict[str, Any]:
    """Send a one-time code to the WeCom member; the binding is made by `POST /wecom/verify`."""
    userid = body.userid.strip()
    if not WECOM_USERID.match(userid):
        raise HTTPException(status.HTTP_400_BAD_REQUEST,
                            detail="userid must be 1-64 characters of letters, digits, '_', '.', '@' or '-'")
    sender = _state(request.app).wecom_sender
    if sender is None:
        raise WeComNotConfigured("WeCom is not configured (ZCBOT_WECOM_CORP_ID, ZCBOT_WECOM_AGENT_ID, ZCBOT_WECOM_SECRET)")
    # WeComUserTaken 409, CodeRecentlySent 429, BindingRefused 400, WeComError 502 (WeComUnavailable 503): mapped at the edge
    return await start_binding(session, sender, user_id, userid)


@router.post("/wecom/verify")
async def verify_wecom(body: WeComVerifyIn, user_id: CurrentUser, session: SessionDep) -> dict[str, Any]:
    """The code typed back: the binding becomes active (wrong, expired or used up: 400)."""
    return bindings.public_view(await confirm_binding(session, user_id, body.code))


@router.post("/wecom/oauth")
async def wecom_oauth_start(request: Request, user_id: CurrentUser, session: SessionDep) -> dict[str, Any]:
    """The WeCom QR login URL that binds the scanner's WeCom account to yours (one-time, 10 minutes)."""
    state = _state(request.app)
    if state.wecom_sender is None:
        raise WeComNotConfigured("WeCom is not configured (ZCBOT_WECOM_CORP_ID, ZCBOT_WECOM_AGENT_ID, ZCBOT_WECOM_SECRET)")
    redirect = state.cs.wecom_oauth_redirect_url or str(request.url_for("wecom_oauth_callback"))
    return await start_oauth(session, state.cs, user_id, redirect)


@router.get("/wecom/oauth/callback", include_in_schema=False, name="wecom_oauth_callback")
async def wecom_oauth_callback(request: Request, session: SessionDep,
                               code: Annotated[str, Query(max_length=512)] = "",
                               state: Annotated[str, Query(max_length=128)] = "") -> RedirectResponse:
    """Where WeCom sends the browser after the scan; back to the page with the outcome."""
    sender = _state(request.app).wecom_sender
    outcome = "ok"
    if sender is None:
        outcome = "wecom_not_configured"
    elif not code or not state:
        outcome = "wecom_binding_refused"
    else:
        try:
            await finish_oauth(session, sender, state, code)
        except ZcbotError as exc:  # shown by the page (its `code`); the browser is never left on a JSON error
            log.info("wecom oauth binding refused", extra={"code": exc.code})
            outcome = exc.code
    return RedirectResponse(f"/?{urlencode({'wecom_binding': outcome})}", status_code=status.HTTP_303_SEE_OTHER)


@router.post("/ilink/login")
async def ilink_login_start(request: Request, user_id: CurrentUser, rt: RuntimeDep, settings: SettingsDep) -> dict[str, Any]:
    key = _sealing_key(settings)
    state = _state(request.app)
    try:
        return await start_login(rt.sessions, key, state.ilink, user_id)
    except ILinkError as exc:
        raise ServiceUnavailable(f"WeChat login is unavailable: {exc}") from None


@router.get("/ilink/login")
async def ilink_login_poll(
    request: Request, user_id: CurrentUser, rt: RuntimeDep, settings: SettingsDep,
    wait: Annotated[float, Query(ge=0, le=30)] = 25.0,
    verify_code: Annotated[str | None, Query(max_length=32)] = None,
) -> dict[str, Any]:
    key = _sealing_key(settings)
    state = _state(request.app)
    try:  # a LoginError (expired, wrong code, ...) carries its own status, mapped at the edge
        return await poll_login(rt.sessions, key, state.ilink, user_id, wait=wait, verify_code=verify_code)
    except ILinkError as exc:
        raise ServiceUnavailable(f"WeChat login is unavailable: {exc}") from None


@router.delete("/{channel}", status_code=status.HTTP_204_NO_CONTENT)
async def unbind(channel: str, user_id: CurrentUser, session: SessionDep) -> Response:
    if channel not in (bindings.WECOM, bindings.ILINK):
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail="unknown channel (wecom or ilink)")
    row = (await session.scalars(
        select(ChannelBinding).where(ChannelBinding.user_id == user_id, ChannelBinding.channel == channel)
    )).first()
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"{channel} is not linked")
    await session.delete(row)
    await session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)
