"""Faithful fakes of the WeCom app API and the iLink (ClawBot) bot API + CDN, for tests.
Over 400 lines on purpose: both channels' fakes share one HTTP fake server and its crypto (not a test module).

Built from /work/shared/CHANNELS_PROTOCOLS.md (and the public sources it cites), and strict
about what the real servers check: tokens, signatures, field shapes, sizes, unique client ids,
the latest context token, the CDN ciphertext. Anything a client gets wrong is recorded in
`violations` (tests assert it stays empty) and answered the way the real server would.

The WeCom side also *produces* callbacks: its crypto is an independent implementation (straight
`cryptography` primitives), so tests do not check zcbot's crypto against itself.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import math
import os
import re
import secrets
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from zcbot_core.platform.service import serve_http
from zcbot_devstack.embedded import free_port


class _Server:
    """A Starlette app served by uvicorn on a free port inside the test's event loop."""

    def __init__(self) -> None:
        self.port = free_port()
        self._task: Any = None
        self._server: Any = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def routes(self) -> list[Route]:  # pragma: no cover - overridden
        raise NotImplementedError

    async def start(self) -> "_Server":
        self._task, self._server = await serve_http(Starlette(routes=self.routes()), "127.0.0.1", self.port)
        for _ in range(400):
            if getattr(self._server, "started", False):
                break
            await asyncio.sleep(0.01)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            await asyncio.wait({self._task}, timeout=5)


# ============================================================================================
# WeCom
# ============================================================================================


def wecom_sign(token: str, timestamp: str, nonce: str, encrypt: str) -> str:
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, encrypt])).encode()).hexdigest()


def wecom_encrypt(encoding_aes_key: str, msg: str, receiveid: str, prefix: bytes | None = None) -> str:
    key = base64.b64decode(encoding_aes_key + "=")
    body = msg.encode()
    plain = (prefix or os.urandom(16)) + struct.pack(">I", len(body)) + body + receiveid.encode()
    pad = 32 - len(plain) % 32
    plain += bytes([pad]) * pad
    enc = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    return base64.b64encode(enc.update(plain) + enc.finalize()).decode()


@dataclass
class SentWeCom:
    touser: str
    msgtype: str
    content: str | None = None
    media_id: str | None = None
    filename: str | None = None
    data: bytes | None = None


class FakeWeCom(_Server):
    """`/cgi-bin/gettoken`, `/cgi-bin/message/send`, `/cgi-bin/media/upload` of one corp + app."""

    def __init__(self, *, corp_id: str = "ww_fakecorp0001", agent_id: int = 1000002,
                 members: tuple[str, ...] = ("alice_w",)) -> None:
        super().__init__()
        self.corp_id = corp_id
        self.agent_id = agent_id
        self.secret = "S" + secrets.token_urlsafe(30)
        self.token = "T" + secrets.token_urlsafe(20)
        self.aes_key = base64.b64encode(os.urandom(32)).decode().rstrip("=")
        assert len(self.aes_key) == 43
        self.members = set(members)
        self.tokens: dict[str, float] = {}  # access_token -> expiry (monotonic)
        self.issued: list[str] = []
        self.gettoken_calls = 0
        self.sent: list[SentWeCom] = []
        self.media: dict[str, tuple[str, bytes]] = {}
        self.errors: list[int] = []  # errcodes answered
        self.violations: list[str] = []
        self.sent_event = asyncio.Event()
        self.scan_codes: dict[str, str | None] = {}  # OAuth code -> the scanner's UserID (None: not a member)

    # ---- control ------------------------------------------------------------------------------
    def expire_tokens(self) -> None:
        """Every issued token now answers 42001 (expired)."""
        for tok in self.tokens:
            self.tokens[tok] = 0.0

    def scan(self, userid: str | None) -> str:
        """Someone scans the wwlogin QR in WeCom and confirms: the one-time code WeCom puts on the
        redirect (`redirect_uri?code=CODE&state=STATE&appid=CORPID`, as WeCom's docs give it)."""
        code = secrets.token_urlsafe(24)
        self.scan_codes[code] = userid
        return code

    def texts_to(self, user: str) -> list[str]:
        return [m.content or "" for m in self.sent if m.touser == user and m.msgtype == "text"]

    def files_to(self, user: str) -> list[SentWeCom]:
        return [m for m in self.sent if m.touser == user and m.msgtype == "file"]

    async def wait_sent(self, predicate: Any, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out; WeCom got {self.sent!r}")
            self.sent_event.clear()
            try:
                await asyncio.wait_for(self.sent_event.wait(), min(remaining, 0.5))
            except asyncio.TimeoutError:
                pass

    # ---- callbacks (what WeCom sends to the app's URL) ------------------------------------------
    def verify_query(self, plain: str = "") -> tuple[dict[str, str], str]:
        plain = plain or str(secrets.randbelow(10**19))
        echostr = wecom_encrypt(self.aes_key, plain, self.corp_id)
        ts, nonce = str(int(time.time())), str(secrets.randbelow(10**9))
        return {"msg_signature": wecom_sign(self.token, ts, nonce, echostr), "timestamp": ts, "nonce": nonce,
                "echostr": echostr}, plain

    def text_callback(self, from_user: str, content: str, msg_id: int) -> tuple[dict[str, str], bytes]:
        now = int(time.time())
        inner = (f"<xml><ToUserName><![CDATA[{self.corp_id}]]></ToUserName><FromUserName><![CDATA[{from_user}]]>"
                 f"</FromUserName><CreateTime>{now}</CreateTime><MsgType><![CDATA[text]]></MsgType>"
                 f"<Content><![CDATA[{content}]]></Content><MsgId>{msg_id}</MsgId>"
                 f"<AgentID>{self.agent_id}</AgentID></xml>")
        enc = wecom_encrypt(self.aes_key, inner, self.corp_id)
        ts, nonce = str(now), str(secrets.randbelow(10**9))
        body = (f"<xml><ToUserName><![CDATA[{self.corp_id}]]></ToUserName><Encrypt><![CDATA[{enc}]]></Encrypt>"
                f"<AgentID><![CDATA[{self.agent_id}]]></AgentID></xml>").encode()
        return {"msg_signature": wecom_sign(self.token, ts, nonce, enc), "timestamp": ts, "nonce": nonce}, body

    # ---- API ------------------------------------------------------------------------------------
    def routes(self) -> list[Route]:
        return [
            Route("/cgi-bin/gettoken", self.gettoken, methods=["GET"]),
            Route("/cgi-bin/message/send", self.message_send, methods=["POST"]),
            Route("/cgi-bin/media/upload", self.media_upload, methods=["POST"]),
            Route("/cgi-bin/auth/getuserinfo", self.auth_getuserinfo, methods=["GET"]),
        ]

    def _err(self, code: int, msg: str, **extra: Any) -> JSONResponse:
        self.errors.append(code)
        return JSONResponse({"errcode": code, "errmsg": msg, **extra})

    def _check_token(self, request: Request) -> JSONResponse | None:
        tok = request.query_params.get("access_token")
        if not tok:
            return self._err(41001, "access_token missing")
        if tok not in self.tokens:
            return self._err(40014, "invalid access_token")
        if time.monotonic() >= self.tokens[tok]:
            return self._err(42001, "access_token expired")
        return None

    async def gettoken(self, request: Request) -> JSONResponse:
        self.gettoken_calls += 1
        if request.query_params.get("corpid") != self.corp_id:
            return self._err(40013, "invalid corpid")
        if request.query_params.get("corpsecret") != self.secret:
            return self._err(40001, "invalid credential")
        tok = secrets.token_urlsafe(48)
        self.tokens[tok] = time.monotonic() + 7200
        self.issued.append(tok)
        return JSONResponse({"errcode": 0, "errmsg": "ok", "access_token": tok, "expires_in": 7200})

    async def auth_getuserinfo(self, request: Request) -> JSONResponse:
        """The shapes of WeCom's `auth/getuserinfo` (developer docs, 获取访问用户身份): a member ->
        `userid` (+ `user_ticket` for the snsapi_privateinfo scope), a non-member -> `openid` and
        `external_userid`; a used or unknown code -> 40029."""
        bad = self._check_token(request)
        if bad is not None:
            return bad
        code = request.query_params.get("code", "")
        if code not in self.scan_codes:
            return self._err(40029, "invalid code")
        userid = self.scan_codes.pop(code)
        if userid is None:
            return JSONResponse({"errcode": 0, "errmsg": "ok", "openid": "o" + secrets.token_hex(8),
                                 "external_userid": "wm" + secrets.token_hex(8)})
        return JSONResponse({"errcode": 0, "errmsg": "ok", "userid": userid})

    async def message_send(self, request: Request) -> JSONResponse:
        bad = self._check_token(request)
        if bad is not None:
            return bad
        try:
            body = json.loads(await request.body())
        except ValueError:
            self.violations.append("message/send: body is not JSON")
            return self._err(47001, "data format error")
        if body.get("agentid") != self.agent_id:
            self.violations.append(f"message/send: agentid {body.get('agentid')!r}")
            return self._err(40056, "invalid agentid")
        users = [u for u in str(body.get("touser") or "").split("|") if u]
        invalid = [u for u in users if u not in self.members]
        if users and len(invalid) == len(users):
            return self._err(81013, "user & party & tag all invalid", invaliduser="|".join(invalid))
        msgtype = body.get("msgtype")
        if msgtype == "text":
            content = (body.get("text") or {}).get("content")
            if not isinstance(content, str) or not content:
                self.violations.append("message/send: empty text")
                return self._err(44004, "empty content")
            if len(content.encode()) > 2048:
                self.violations.append(f"message/send: text of {len(content.encode())} bytes")
                return self._err(45002, "content size out of limit")
            for u in users:
                self.sent.append(SentWeCom(u, "text", content=content))
        elif msgtype == "file":
            media_id = (body.get("file") or {}).get("media_id")
            if media_id not in self.media:
                self.violations.append("message/send: unknown media_id")
                return self._err(40007, "invalid media_id")
            name, data = self.media[media_id]
            for u in users:
                self.sent.append(SentWeCom(u, "file", media_id=media_id, filename=name, data=data))
        else:
            self.violations.append(f"message/send: msgtype {msgtype!r}")
            return self._err(40008, "invalid message type")
        self.sent_event.set()
        return JSONResponse({"errcode": 0, "errmsg": "ok", "invaliduser": "|".join(invalid), "invalidparty": "",
                             "invalidtag": "", "msgid": secrets.token_hex(16)})

    async def media_upload(self, request: Request) -> JSONResponse:
        bad = self._check_token(request)
        if bad is not None:
            return bad
        kind = request.query_params.get("type")
        if kind not in ("file", "image", "voice", "video"):
            return self._err(40004, "invalid media type")
        ctype = request.headers.get("content-type", "")
        m = re.search(r"boundary=([^;]+)", ctype)
        if not ctype.startswith("multipart/form-data") or not m:
            self.violations.append("media/upload: not multipart")
            return self._err(40005, "invalid file type")
        raw = await request.body()
        boundary = m.group(1).strip('"').encode()
        parts = [p for p in raw.split(b"--" + boundary) if p not in (b"", b"--\r\n", b"--")]
        media = None
        for part in parts:
            head, _, data = part.partition(b"\r\n\r\n")
            if b'name="media"' in head:
                media = (head.decode("utf-8", "replace"), data[:-2] if data.endswith(b"\r\n") else data)
        if media is None:
            self.violations.append("media/upload: no part named media")
            return self._err(40005, "invalid file type")
        head, data = media
        fname = re.search(r'filename="([^"]*)"', head)
        flen = re.search(r"filelength=(\d+)", head)
        if not fname or not fname.group(1):
            self.violations.append("media/upload: no filename")
        if flen and int(flen.group(1)) != len(data):
            self.violations.append("media/upload: filelength does not match")
        limit = {"file": 20, "image": 10, "voice": 2, "video": 10}[kind] * 1024 * 1024
        if len(data) <= 5 or len(data) > limit:
            return self._err(40006, "invalid file size")
        media_id = "3" + secrets.token_urlsafe(40)
        self.media[media_id] = (fname.group(1) if fname else "", data)
        return JSONResponse({"errcode": 0, "errmsg": "", "type": kind, "media_id": media_id,
                             "created_at": str(int(time.time()))})


# ============================================================================================
# iLink
# ============================================================================================


def ecb_decrypt(data: bytes, key: bytes) -> bytes:
    dec = Cipher(algorithms.AES(key), modes.ECB()).decryptor()
    padded = dec.update(data) + dec.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    return unpadder.update(padded) + unpadder.finalize()


@dataclass
class Bot:
    token: str
    bot_id: str
    user_id: str  # the WeChat user who scanned (ilink_user_id)
    msgs: list[dict[str, Any]] = field(default_factory=list)
    seq: int = 0
    context_token: str | None = None
    context_expired: bool = False
    session_expired: bool = False
    recover_on_notifystart: bool = True
    active_polls: int = 0
    max_active_polls: int = 0
    polls: list[tuple[float, str]] = field(default_factory=list)  # (time, outcome)
    notifystarts: list[float] = field(default_factory=list)
    client_ids: set[str] = field(default_factory=set)
    generating: bool = False  # the last text piece had state 1: the reply is not finished yet
    sent: list[dict[str, Any]] = field(default_factory=list)
    files: list[tuple[str, bytes]] = field(default_factory=list)
    new_msg: asyncio.Event = field(default_factory=asyncio.Event)


class FakeILink(_Server):
    """`/ilink/bot/*` API and `/c2c/upload` CDN on one server."""

    def __init__(self, *, hold: float = 1.0) -> None:
        super().__init__()
        self.hold = hold  # getupdates long-poll hold (the real server holds ~35 s)
        self.bots: dict[str, Bot] = {}
        self.qrcodes: dict[str, dict[str, Any]] = {}
        self.last_qrcode: str | None = None
        self.uploads: dict[str, dict[str, Any]] = {}  # upload_param -> pending upload
        self.downloads: dict[str, dict[str, Any]] = {}  # x-encrypted-param -> stored file
        self.fail_uploads = 0
        self.violations: list[str] = []
        self.sent_event = asyncio.Event()

    @property
    def cdn_base_url(self) -> str:
        return f"{self.base_url}/c2c"

    # ---- control ------------------------------------------------------------------------------
    def add_bot(self, user_id: str) -> Bot:
        bot = Bot(token=secrets.token_urlsafe(40), bot_id=f"bot_{secrets.token_hex(6)}@im.bot", user_id=user_id)
        self.bots[bot.token] = bot
        return bot

    def bot_of_user(self, user_id: str) -> Bot:
        return next(b for b in self.bots.values() if b.user_id == user_id)

    def scan(self, qrcode: str) -> None:
        self.qrcodes[qrcode]["status"] = "scaned"

    def confirm(self, qrcode: str, user_id: str) -> Bot:
        bot = self.add_bot(user_id)
        self.qrcodes[qrcode].update(status="confirmed", bot=bot)
        return bot

    def user_sends(self, bot: Bot, text: str | None = None, *, message_id: int | None = None,
                   items: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The user writes to the bot; a fresh context_token comes with every inbound message."""
        bot.seq += 1
        bot.context_token = "ctx_" + secrets.token_urlsafe(32)
        bot.context_expired = False
        msg = {
            "seq": bot.seq, "message_id": message_id or 7_000_000 + bot.seq, "from_user_id": bot.user_id,
            "to_user_id": bot.bot_id, "client_id": "", "create_time_ms": int(time.time() * 1000),
            "session_id": f"s_{bot.user_id}", "message_type": 1, "message_state": 2,
            "item_list": items or [{"type": 1, "text_item": {"text": text or ""}}],
            "context_token": bot.context_token,
        }
        bot.msgs.append(msg)
        bot.new_msg.set()
        return msg

    def redeliver(self, bot: Bot, msg: dict[str, Any]) -> None:
        """At-least-once delivery: the same message (same message_id) comes again with a new seq."""
        bot.seq += 1
        bot.msgs.append({**msg, "seq": bot.seq})
        bot.new_msg.set()

    def texts_to(self, bot: Bot) -> list[str]:
        return [m["item_list"][0]["text_item"]["text"] for m in bot.sent if m["item_list"][0]["type"] == 1]

    async def wait_sent(self, predicate: Any, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError("timed out waiting for iLink sends; "
                                     f"{[(b.user_id, b.sent) for b in self.bots.values()]!r}")
            self.sent_event.clear()
            try:
                await asyncio.wait_for(self.sent_event.wait(), min(remaining, 0.5))
            except asyncio.TimeoutError:
                pass

    # ---- protocol checks --------------------------------------------------------------------------
    def _common_headers_ok(self, request: Request, where: str) -> None:
        if not request.headers.get("iLink-App-Id"):
            self.violations.append(f"{where}: no iLink-App-Id")
        if not (request.headers.get("iLink-App-ClientVersion") or "").isdigit():
            self.violations.append(f"{where}: bad iLink-App-ClientVersion")

    def _auth(self, request: Request, where: str) -> Bot | None:
        self._common_headers_ok(request, where)
        h = request.headers
        if h.get("AuthorizationType") != "ilink_bot_token":
            self.violations.append(f"{where}: AuthorizationType")
        if not (h.get("content-type") or "").startswith("application/json"):
            self.violations.append(f"{where}: Content-Type")
        try:
            if not base64.b64decode(h.get("X-WECHAT-UIN") or "", validate=True).decode().isdigit():
                raise ValueError
        except (ValueError, binascii.Error, UnicodeDecodeError):
            self.violations.append(f"{where}: X-WECHAT-UIN")
        auth = h.get("Authorization") or ""
        if not auth.startswith("Bearer "):
            self.violations.append(f"{where}: no bearer token")
            return None
        return self.bots.get(auth[len("Bearer "):])

    async def _body(self, request: Request, where: str) -> dict[str, Any]:
        try:
            body = json.loads(await request.body())
        except ValueError:
            self.violations.append(f"{where}: body is not JSON")
            return {}
        info = body.get("base_info")
        if not isinstance(info, dict) or not info.get("channel_version"):
            self.violations.append(f"{where}: base_info missing")
        return body

    @staticmethod
    def _expired() -> JSONResponse:
        return JSONResponse({"ret": -14, "errcode": -14, "errmsg": "session timeout"})

    # ---- routes ---------------------------------------------------------------------------------
    def routes(self) -> list[Route]:
        return [
            Route("/ilink/bot/get_bot_qrcode", self.get_bot_qrcode, methods=["GET", "POST"]),
            Route("/ilink/bot/get_qrcode_status", self.get_qrcode_status, methods=["GET"]),
            Route("/ilink/bot/getupdates", self.getupdates, methods=["POST"]),
            Route("/ilink/bot/sendmessage", self.sendmessage, methods=["POST"]),
            Route("/ilink/bot/getuploadurl", self.getuploadurl, methods=["POST"]),
            Route("/ilink/bot/msg/notifystart", self.notifystart, methods=["POST"]),
            Route("/ilink/bot/msg/notifystop", self.notifystop, methods=["POST"]),
            Route("/c2c/upload", self.cdn_upload, methods=["POST"]),
        ]

    async def get_bot_qrcode(self, request: Request) -> JSONResponse:
        self._common_headers_ok(request, "get_bot_qrcode")
        if request.query_params.get("bot_type") != "3":
            self.violations.append("get_bot_qrcode: bot_type")
        qrcode = secrets.token_hex(16)
        self.qrcodes[qrcode] = {"status": "wait", "bot": None}
        self.last_qrcode = qrcode
        return JSONResponse({"qrcode": qrcode, "qrcode_img_content": f"https://liteapp.weixin.qq.com/q/{qrcode}"})

    async def get_qrcode_status(self, request: Request) -> JSONResponse:
        self._common_headers_ok(request, "get_qrcode_status")
        state = self.qrcodes.get(request.query_params.get("qrcode", ""))
        if state is None:
            return JSONResponse({"status": "expired"})
        if state["status"] == "wait":
            await asyncio.sleep(min(self.hold, 0.5))
        if state["status"] == "confirmed":
            bot: Bot = state["bot"]
            return JSONResponse({"status": "confirmed", "bot_token": bot.token, "ilink_bot_id": bot.bot_id,
                                 "baseurl": self.base_url, "ilink_user_id": bot.user_id})
        return JSONResponse({"status": state["status"]})

    async def getupdates(self, request: Request) -> JSONResponse:
        bot = self._auth(request, "getupdates")
        body = await self._body(request, "getupdates")
        if bot is None:
            return self._expired()
        bot.active_polls += 1
        bot.max_active_polls = max(bot.max_active_polls, bot.active_polls)
        try:
            if bot.session_expired:
                bot.polls.append((time.monotonic(), "expired"))
                return self._expired()
            buf = body.get("get_updates_buf") or ""
            try:
                after = json.loads(base64.b64decode(buf))["seq"] if buf else 0
            except (ValueError, KeyError, binascii.Error):
                self.violations.append("getupdates: unknown get_updates_buf")
                after = 0
            deadline = time.monotonic() + self.hold
            while True:
                fresh = [m for m in bot.msgs if m["seq"] > after]
                if fresh or time.monotonic() >= deadline:
                    break
                if await request.is_disconnected():  # the client gave up: this poll is over
                    bot.polls.append((time.monotonic(), "abandoned"))
                    return JSONResponse({"ret": 0, "msgs": [], "get_updates_buf": buf})
                bot.new_msg.clear()
                try:
                    await asyncio.wait_for(bot.new_msg.wait(), min(deadline - time.monotonic(), 0.05))
                except asyncio.TimeoutError:
                    pass
            last = max([m["seq"] for m in fresh], default=after)
            bot.polls.append((time.monotonic(), f"ok:{len(fresh)}"))
            cursor = base64.b64encode(json.dumps({"seq": last}).encode()).decode()
            return JSONResponse({"ret": 0, "msgs": fresh, "get_updates_buf": cursor,
                                 "longpolling_timeout_ms": 35000})
        finally:
            bot.active_polls -= 1

    async def sendmessage(self, request: Request) -> JSONResponse:
        bot = self._auth(request, "sendmessage")
        body = await self._body(request, "sendmessage")
        if bot is None:
            return self._expired()
        msg = body.get("msg") or {}
        client_id = msg.get("client_id")
        if not client_id or client_id in bot.client_ids:
            self.violations.append(f"sendmessage: missing/duplicate client_id {client_id!r} (silently dropped)")
            return JSONResponse({"ret": 0, "errmsg": ""})
        bot.client_ids.add(client_id)
        if msg.get("to_user_id") != bot.user_id:
            self.violations.append(f"sendmessage: to_user_id {msg.get('to_user_id')!r}")
            return JSONResponse({"ret": -2, "errmsg": "invalid to_user_id"})
        items = msg.get("item_list") or []
        state = msg.get("message_state")
        # A long text: pieces of state 1 (generating) ending with one of state 2; anything else is 2.
        text_piece = len(items) == 1 and items[0].get("type") == 1
        if msg.get("message_type") != 2 or state not in (1, 2) or (state == 1 and not text_piece):
            self.violations.append("sendmessage: message_type/message_state")
        if bot.generating and not text_piece:
            self.violations.append("sendmessage: a message inside an unfinished (state 1) text")
        bot.generating = state == 1
        if len(items) != 1:
            self.violations.append(f"sendmessage: {len(items)} items (one per message)")
            return JSONResponse({"ret": -2, "errmsg": "prepare failed"})
        if bot.context_expired or not bot.context_token or msg.get("context_token") != bot.context_token:
            self.violations.append("sendmessage: stale or missing context_token")
            return JSONResponse({"ret": -2, "errmsg": "prepare failed"})
        item = items[0]
        if item.get("type") == 1:
            if not (item.get("text_item") or {}).get("text"):
                self.violations.append("sendmessage: empty text")
        elif item.get("type") == 4:
            fi = item.get("file_item") or {}
            media = fi.get("media") or {}
            stored = self.downloads.get(media.get("encrypt_query_param", ""))
            if stored is None:
                self.violations.append("sendmessage: unknown encrypt_query_param")
                return JSONResponse({"ret": -2, "errmsg": "prepare failed"})
            expected_key = base64.b64encode(stored["aeskey_hex"].encode()).decode()
            if media.get("aes_key") != expected_key or media.get("encrypt_type") != 1:
                self.violations.append("sendmessage: file media aes_key/encrypt_type")
            if fi.get("len") != str(len(stored["data"])) or not fi.get("file_name"):
                self.violations.append("sendmessage: file_item len/file_name")
            bot.files.append((fi.get("file_name", ""), stored["data"]))
        else:
            self.violations.append(f"sendmessage: item type {item.get('type')!r}")
        bot.sent.append(msg)
        self.sent_event.set()
        return JSONResponse({"ret": 0, "errmsg": "", "message_id": secrets.randbelow(10**12)})

    async def getuploadurl(self, request: Request) -> JSONResponse:
        bot = self._auth(request, "getuploadurl")
        body = await self._body(request, "getuploadurl")
        if bot is None:
            return self._expired()
        problems = []
        if not re.fullmatch(r"[0-9a-f]{32}", str(body.get("filekey", ""))):
            problems.append("filekey")
        if body.get("media_type") not in (1, 2, 3, 4):
            problems.append("media_type")
        rawsize = body.get("rawsize")
        if not isinstance(rawsize, int) or rawsize < 0:
            problems.append("rawsize")
        elif body.get("filesize") != int(math.ceil((rawsize + 1) / 16) * 16):
            problems.append("filesize")
        if not re.fullmatch(r"[0-9a-f]{32}", str(body.get("rawfilemd5", ""))):
            problems.append("rawfilemd5")
        if not re.fullmatch(r"[0-9a-f]{32}", str(body.get("aeskey", ""))):
            problems.append("aeskey")
        if body.get("no_need_thumb") is not True:
            problems.append("no_need_thumb")
        if body.get("to_user_id") != bot.user_id:
            problems.append("to_user_id")
        if problems:
            self.violations.append(f"getuploadurl: {problems}")
            return JSONResponse({"ret": -1, "errmsg": "invalid param"})
        param = secrets.token_urlsafe(24)
        self.uploads[param] = {**body, "bot": bot}
        return JSONResponse({"ret": 0, "upload_param": param})

    async def cdn_upload(self, request: Request) -> Response:
        if self.fail_uploads > 0:
            self.fail_uploads -= 1
            return Response(status_code=502, headers={"x-error-message": "bad gateway"})
        pending = self.uploads.get(request.query_params.get("encrypted_query_param", ""))
        if pending is None or request.query_params.get("filekey") != pending["filekey"]:
            self.violations.append("cdn upload: unknown encrypted_query_param/filekey")
            return Response(status_code=400, headers={"x-error-message": "invalid param"})
        data = await request.body()
        if len(data) != pending["filesize"]:
            self.violations.append("cdn upload: ciphertext size != filesize")
            return Response(status_code=400, headers={"x-error-message": "size mismatch"})
        try:
            plain = ecb_decrypt(data, bytes.fromhex(pending["aeskey"]))
        except ValueError:
            self.violations.append("cdn upload: not AES-128-ECB/PKCS#7 under the announced key")
            return Response(status_code=400, headers={"x-error-message": "decrypt failed"})
        if len(plain) != pending["rawsize"] or hashlib.md5(plain).hexdigest() != pending["rawfilemd5"]:
            self.violations.append("cdn upload: plaintext size/md5 mismatch")
            return Response(status_code=400, headers={"x-error-message": "md5 mismatch"})
        download = secrets.token_urlsafe(32)
        self.downloads[download] = {"data": plain, "aeskey_hex": pending["aeskey"]}
        return Response(status_code=200, headers={"x-encrypted-param": download})

    async def notifystart(self, request: Request) -> JSONResponse:
        bot = self._auth(request, "notifystart")
        await self._body(request, "notifystart")
        if bot is None:
            return self._expired()
        bot.notifystarts.append(time.monotonic())
        if bot.recover_on_notifystart:
            bot.session_expired = False
        return JSONResponse({"ret": 0, "errmsg": ""})

    async def notifystop(self, request: Request) -> JSONResponse:
        bot = self._auth(request, "notifystop")
        await self._body(request, "notifystop")
        return JSONResponse({"ret": 0, "errmsg": ""}) if bot else self._expired()
