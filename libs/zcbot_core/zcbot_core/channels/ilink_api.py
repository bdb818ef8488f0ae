"""Personal-WeChat ClawBot (iLink) client, after Tencent/openclaw-weixin (docs/protocol.md, src/api).

- Headers on every request: `AuthorizationType: ilink_bot_token`, `X-WECHAT-UIN` (base64 of the
  decimal string of a random uint32), `iLink-App-Id`, `iLink-App-ClientVersion` (0x00MMNNPP as a
  decimal string); `Authorization: Bearer <bot_token>` on bot calls; authenticated POSTs carry
  `base_info {channel_version, bot_agent}`.
- QR login: `GET get_bot_qrcode?bot_type=3`, long-poll `GET get_qrcode_status?qrcode=...`.
- `getupdates {get_updates_buf}` long poll; a client-side timeout means "no messages".
- `sendmessage`: one item per message, a unique `client_id` each (a missing or repeated one is
  silently dropped by the server), `message_type` 2 (bot), the latest inbound `context_token`.
  A long text goes as pieces of `message_state` 1 (generating) ending with one piece of state 2
  (finished), as the seed (§8.7) and the protocol notes send it; a short text or a file is one
  message of state 2.
- Files: random AES-128 key + filekey, `getuploadurl`, POST the AES-128-ECB/PKCS#7 ciphertext
  to the CDN (`upload_full_url`, else `{cdn}/upload?encrypted_query_param=..&filekey=..`),
  read `x-encrypted-param` (5xx retried up to 3 times), send a `file_item` whose `aes_key` is
  base64 of the *hex* key string.
- errcode/ret -14: the bot session expired (`SessionExpired`).
The bot token is passed per call and never logged.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import math
import os
import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from zcbot_core import __version__
from zcbot_core.channels.redact import install_httpx_redaction, safe_error
from zcbot_core.channels.settings import ChannelSettings
from zcbot_core.channels.text import split_chars
from zcbot_core.errors import RETRY_AFTER, ZcbotError
from zcbot_core.safe_fs import UserFile  # user files (safe_fs) or host paths: both read the same way

log = logging.getLogger(__name__)

SESSION_EXPIRED = -14
TEXT_MAX_CHARS = 2000
FILE_MAX_BYTES = 100 * 1024 * 1024
MEDIA_IMAGE, MEDIA_VIDEO, MEDIA_FILE, MEDIA_VOICE = 1, 2, 3, 4
ITEM_TEXT, ITEM_IMAGE, ITEM_VOICE, ITEM_FILE, ITEM_VIDEO = 1, 2, 3, 4, 5
MSG_USER, MSG_BOT = 1, 2
STATE_GENERATING = 1
STATE_FINISH = 2
UPLOAD_RETRIES = 3


class ILinkError(ZcbotError):
    """An iLink call failed (transport or non-zero ret/errcode). The message is safe to show."""

    code = "ilink_error"
    http_status = 503
    headers = RETRY_AFTER

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class SessionExpired(ILinkError):
    """errcode -14: the bot's session expired; pause the long poll and try `notifystart`."""

    code = "ilink_session_expired"


def client_version(version: str = __version__) -> str:
    parts = [int(p) if p.isdigit() else 0 for p in (version.split(".") + ["0", "0", "0"])[:3]]
    return str(((parts[0] & 0xFF) << 16) | ((parts[1] & 0xFF) << 8) | (parts[2] & 0xFF))


def random_uin() -> str:
    return base64.b64encode(str(int.from_bytes(os.urandom(4), "big")).encode()).decode("ascii")


def new_client_id() -> str:
    return f"zcbot-{uuid.uuid4().hex}"


def aes_ecb_padded_size(rawsize: int) -> int:
    return int(math.ceil((rawsize + 1) / 16) * 16)


def aes_ecb_encrypt(data: bytes, key: bytes) -> bytes:
    padder = padding.PKCS7(128).padder()
    padded = padder.update(data) + padder.finalize()
    enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()  # noqa: S305 - the protocol mandates ECB
    return enc.update(padded) + enc.finalize()


def aes_ecb_decrypt(data: bytes, key: bytes) -> bytes:
    dec = Cipher(algorithms.AES(key), modes.ECB()).decryptor()  # noqa: S305
    padded = dec.update(data) + dec.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    return unpadder.update(padded) + unpadder.finalize()


def message_text(msg: dict[str, Any]) -> str:
    """The text of an inbound message: text items and voice transcripts, joined."""
    parts = []
    for item in msg.get("item_list") or []:
        kind = item.get("type")
        if kind == ITEM_TEXT:
            parts.append(str((item.get("text_item") or {}).get("text") or ""))
        elif kind == ITEM_VOICE:
            transcript = (item.get("voice_item") or {}).get("text")
            if transcript:
                parts.append(str(transcript))
    return "\n".join(p for p in parts if p)


def has_media(msg: dict[str, Any]) -> bool:
    return any(item.get("type") in (ITEM_IMAGE, ITEM_FILE, ITEM_VIDEO) for item in msg.get("item_list") or [])


@dataclass
class UploadedFile:
    filekey: str
    download_param: str
    aeskey_hex: str
    rawsize: int
    filesize: int


class ILinkClient:
    def __init__(self, cs: ChannelSettings, http: httpx.AsyncClient | None = None) -> None:
        install_httpx_redaction()
        self.cs = cs
        self._own_http = http is None
        self.http = http or httpx.AsyncClient(timeout=httpx.Timeout(15.0, connect=10.0))

    async def aclose(self) -> None:
        if self._own_http:
            await self.http.aclose()

    # ---- plumbing ----------------------------------------------------------------------------
    def _common_headers(self) -> dict[str, str]:
        return {"iLink-App-Id": self.cs.ilink_app_id, "iLink-App-ClientVersion": client_version()}

    def _headers(self, token: str | None) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "AuthorizationType": "ilink_bot_token",
                   "X-WECHAT-UIN": random_uin(), **self._common_headers()}
        if token:
            headers["Authorization"] = f"Bearer {token.strip()}"
        return headers

    @staticmethod
    def base_info() -> dict[str, str]:
        return {"channel_version": __version__, "bot_agent": f"zcbot/{__version__}"}

    def _url(self, base_url: str | None, endpoint: str) -> str:
        return f"{(base_url or self.cs.ilink_base_url).rstrip('/')}/{endpoint}"

    async def _post(self, endpoint: str, body: dict[str, Any], *, token: str, base_url: str | None = None,
                    timeout: float | None = None) -> dict[str, Any]:
        payload = {**body, "base_info": self.base_info()}
        try:
            r = await self.http.post(self._url(base_url, endpoint), json=payload, headers=self._headers(token),
                                     timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT)
        except httpx.TimeoutException:
            raise
        except httpx.HTTPError as exc:
            raise ILinkError(f"iLink {endpoint} failed: {safe_error(exc)}") from None
        if r.status_code >= 400:
            raise ILinkError(f"iLink {endpoint} HTTP {r.status_code}", r.status_code)
        try:
            data = r.json()
        except ValueError:
            raise ILinkError(f"iLink {endpoint} answered non-JSON") from None
        if not isinstance(data, dict):
            raise ILinkError(f"iLink {endpoint} answered a non-object")
        return data

    @staticmethod
    def _check(endpoint: str, data: dict[str, Any]) -> dict[str, Any]:
        ret = data.get("ret")
        code = data.get("errcode")
        if ret == SESSION_EXPIRED or code == SESSION_EXPIRED:
            raise SessionExpired(f"iLink {endpoint}: session expired (errcode -14)", SESSION_EXPIRED)
        if (ret not in (None, 0)) or (code not in (None, 0)):
            raise ILinkError(f"iLink {endpoint} ret={ret} errcode={code}: {str(data.get('errmsg') or '')[:160]}",
                             int(code if code not in (None, 0) else ret))
        return data

    # ---- QR login ----------------------------------------------------------------------------
    async def get_bot_qrcode(self, bot_type: str = "3") -> dict[str, Any]:
        try:
            r = await self.http.get(self._url(None, f"ilink/bot/get_bot_qrcode?bot_type={quote(bot_type)}"),
                                    headers=self._common_headers())
            r.raise_for_status()
            data = r.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ILinkError(f"iLink get_bot_qrcode failed: {safe_error(exc)}") from None
        if not data.get("qrcode"):
            raise ILinkError("iLink get_bot_qrcode returned no qrcode")
        return data

    async def get_qrcode_status(self, qrcode: str, timeout: float = 35.0, base_url: str | None = None,
                                verify_code: str | None = None) -> dict[str, Any]:
        """One long-poll of the QR status; a client timeout or gateway error reads as `wait`."""
        endpoint = f"ilink/bot/get_qrcode_status?qrcode={quote(qrcode, safe='')}"
        if verify_code:
            endpoint += f"&verify_code={quote(verify_code, safe='')}"
        try:
            r = await self.http.get(self._url(base_url, endpoint), headers=self._common_headers(), timeout=timeout)
            if r.status_code >= 500:
                return {"status": "wait"}
            r.raise_for_status()
            return r.json()
        except httpx.TimeoutException:
            return {"status": "wait"}
        except (httpx.HTTPError, ValueError) as exc:
            raise ILinkError(f"iLink get_qrcode_status failed: {safe_error(exc)}") from None

    # ---- bot API -----------------------------------------------------------------------------
    async def getupdates(self, buf: str, *, token: str, base_url: str | None = None,
                         timeout: float | None = None) -> dict[str, Any]:
        """One long poll. Raises SessionExpired on -14; a client timeout returns no messages."""
        wait = timeout or self.cs.ilink_poll_timeout
        try:
            data = await self._post("ilink/bot/getupdates", {"get_updates_buf": buf or ""}, token=token,
                                    base_url=base_url, timeout=wait)
        except httpx.TimeoutException:
            return {"ret": 0, "msgs": [], "get_updates_buf": buf}
        return self._check("getupdates", data)

    async def sendmessage(self, to_user_id: str, item: dict[str, Any], *, token: str, context_token: str | None,
                          base_url: str | None = None, state: int = STATE_FINISH) -> str:
        client_id = new_client_id()
        msg = {"from_user_id": "", "to_user_id": to_user_id, "client_id": client_id, "message_type": MSG_BOT,
               "message_state": state, "item_list": [item]}
        if context_token:
            msg["context_token"] = context_token
        try:
            data = await self._post("ilink/bot/sendmessage", {"msg": msg}, token=token, base_url=base_url)
        except httpx.TimeoutException:
            raise ILinkError("iLink sendmessage timed out") from None
        self._check("sendmessage", data)
        return client_id

    async def send_text(self, to_user_id: str, text: str, *, token: str, context_token: str | None,
                        base_url: str | None = None) -> list[str]:
        ids = []
        chunks = split_chars(text, TEXT_MAX_CHARS) or ["(empty reply)"]
        for n, chunk in enumerate(chunks, 1):
            ids.append(await self.sendmessage(to_user_id, {"type": ITEM_TEXT, "text_item": {"text": chunk}},
                                              token=token, context_token=context_token, base_url=base_url,
                                              state=STATE_FINISH if n == len(chunks) else STATE_GENERATING))
        return ids

    async def upload_file(self, to_user_id: str, path: "Path | UserFile", *, token: str, media_type: int = MEDIA_FILE,
                          base_url: str | None = None) -> UploadedFile:
        plaintext = await asyncio.to_thread(path.read_bytes)
        if len(plaintext) > FILE_MAX_BYTES:
            raise ILinkError(f"{path.name} is larger than {FILE_MAX_BYTES // (1024 * 1024)} MB")
        key = secrets.token_bytes(16)
        filekey = secrets.token_hex(16)
        rawsize = len(plaintext)
        filesize = aes_ecb_padded_size(rawsize)
        try:
            data = await self._post("ilink/bot/getuploadurl", {
                "filekey": filekey, "media_type": media_type, "to_user_id": to_user_id, "rawsize": rawsize,
                "rawfilemd5": hashlib.md5(plaintext).hexdigest(), "filesize": filesize,  # noqa: S324 - protocol field
                "no_need_thumb": True, "aeskey": key.hex(),
            }, token=token, base_url=base_url)
        except httpx.TimeoutException:
            raise ILinkError("iLink getuploadurl timed out") from None
        self._check("getuploadurl", data)
        full = str(data.get("upload_full_url") or "").strip()
        param = data.get("upload_param")
        if full:
            url = full
        elif param:
            url = (f"{self.cs.ilink_cdn_base_url}/upload?encrypted_query_param={quote(str(param), safe='')}"
                   f"&filekey={quote(filekey, safe='')}")
        else:
            raise ILinkError("iLink getuploadurl returned no upload URL")
        ciphertext = aes_ecb_encrypt(plaintext, key)
        download_param = await self._cdn_post(url, ciphertext)
        return UploadedFile(filekey=filekey, download_param=download_param, aeskey_hex=key.hex(), rawsize=rawsize,
                            filesize=filesize)

    async def _cdn_post(self, url: str, body: bytes) -> str:
        last = "no attempt"
        for attempt in range(1, UPLOAD_RETRIES + 1):
            try:
                r = await self.http.post(url, content=body, headers={"Content-Type": "application/octet-stream"},
                                         timeout=60.0)
            except httpx.HTTPError as exc:
                last = safe_error(exc)
                await asyncio.sleep(0.2 * attempt)
                continue
            if 400 <= r.status_code < 500:
                raise ILinkError(f"iLink CDN upload rejected (HTTP {r.status_code}: "
                                 f"{r.headers.get('x-error-message', '')[:120]})", r.status_code)
            if r.status_code != 200:
                last = f"HTTP {r.status_code}"
                log.warning("ilink cdn upload failed; retrying", extra={"attempt": attempt, "status": r.status_code})
                await asyncio.sleep(0.2 * attempt)
                continue
            param = r.headers.get("x-encrypted-param")
            if not param:
                last = "response without x-encrypted-param"
                continue
            return param
        raise ILinkError(f"iLink CDN upload failed after {UPLOAD_RETRIES} attempts ({last})")

    async def send_file(self, to_user_id: str, path: "Path | UserFile", *, token: str, context_token: str | None,
                        base_url: str | None = None, file_name: str | None = None) -> str:
        up = await self.upload_file(to_user_id, path, token=token, base_url=base_url)
        item = {"type": ITEM_FILE, "file_item": {
            "media": {"encrypt_query_param": up.download_param,
                      "aes_key": base64.b64encode(up.aeskey_hex.encode("ascii")).decode("ascii"),
                      "encrypt_type": 1},
            "file_name": file_name or path.name,
            "len": str(up.rawsize),
        }}
        return await self.sendmessage(to_user_id, item, token=token, context_token=context_token, base_url=base_url)

    async def notifystart(self, *, token: str, base_url: str | None = None) -> dict[str, Any]:
        try:
            return self._check("msg/notifystart", await self._post("ilink/bot/msg/notifystart", {}, token=token,
                                                                   base_url=base_url, timeout=10.0))
        except httpx.TimeoutException:
            raise ILinkError("iLink notifystart timed out") from None

    async def notifystop(self, *, token: str, base_url: str | None = None) -> dict[str, Any]:
        try:
            return self._check("msg/notifystop", await self._post("ilink/bot/msg/notifystop", {}, token=token,
                                                                  base_url=base_url, timeout=10.0))
        except httpx.TimeoutException:
            raise ILinkError("iLink notifystop timed out") from None
