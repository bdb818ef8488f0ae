"""WeCom (企业微信) self-built app client: access token, message/send, media/upload.

- `gettoken` result is cached per client until shortly before `expires_in`; a call rejected with
  40014 (invalid) or 42001 (expired) refetches the token and is retried once.
- Text is split above 2048 bytes on UTF-8 character boundaries (`text.split_utf8`).
- Files: `media/upload?type=file` (multipart part `media` with filename and filelength; WeCom
  accepts 5 B < size <= 20 MB), then a `file` message with the returned media_id.
The corp secret and access tokens are never logged (URLs are redacted, see `redact`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from zcbot_core.channels.redact import install_httpx_redaction, safe_error
from zcbot_core.channels.settings import ChannelSettings
from zcbot_core.channels.text import split_utf8
from zcbot_core.errors import ZcbotError
from zcbot_core.safe_fs import UserFile  # user files (safe_fs) or host paths: both read the same way

log = logging.getLogger(__name__)

TEXT_MAX_BYTES = 2048
FILE_MIN_BYTES = 6  # WeCom: every media must be larger than 5 bytes
FILE_MAX_BYTES = 20 * 1024 * 1024
TOKEN_INVALID = 40014
TOKEN_EXPIRED = 42001
BAD_SECRET = 40001
ALL_RECIPIENTS_INVALID = 81013
TOKEN_MARGIN_SECONDS = 300.0


class WeComError(ZcbotError):
    """WeCom answered with a non-zero errcode (or could not be reached). Message is safe to show."""

    code = "wecom_error"
    http_status = 502

    def __init__(self, message: str, errcode: int | None = None) -> None:
        super().__init__(message)
        self.errcode = errcode


class WeComUnavailable(WeComError):
    """WeCom's server could not be reached (or answered garbage): try again later, like the iLink
    login's 503 — not a bad gateway of ours."""

    code = "wecom_unavailable"
    http_status = 503


class WeComNotConfigured(WeComError):
    code = "wecom_not_configured"
    http_status = 503
    pass


class WeComClient:
    def __init__(self, cs: ChannelSettings, http: httpx.AsyncClient | None = None, timeout: float = 15.0) -> None:
        install_httpx_redaction()
        self.cs = cs
        self._own_http = http is None
        self.http = http or httpx.AsyncClient(timeout=timeout)
        self._token: str | None = None
        self._token_expires = 0.0
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"WeComClient(corp_id={self.cs.wecom_corp_id!r}, agent_id={self.cs.wecom_agent_id!r})"

    async def aclose(self) -> None:
        if self._own_http:
            await self.http.aclose()

    def _require(self) -> None:
        if not self.cs.wecom_send_enabled:
            raise WeComNotConfigured("WeCom is not configured (set ZCBOT_WECOM_CORP_ID, ZCBOT_WECOM_AGENT_ID, ZCBOT_WECOM_SECRET)")

    # ---- token -------------------------------------------------------------------------------
    async def access_token(self, force: bool = False, stale: str | None = None) -> str:
        self._require()
        async with self._lock:
            if stale is not None and self._token != stale:
                force = False  # another caller already refreshed it
            if not force and self._token and time.monotonic() < self._token_expires:
                return self._token
            try:
                r = await self.http.get(f"{self.cs.wecom_base_url}/cgi-bin/gettoken",
                                        params={"corpid": self.cs.wecom_corp_id, "corpsecret": self.cs.wecom_secret})
                body = r.json()
            except (httpx.HTTPError, ValueError) as exc:
                raise WeComUnavailable(f"WeCom gettoken failed: {safe_error(exc)}") from None
            code = int(body.get("errcode") or 0)
            if code != 0 or not body.get("access_token"):
                hint = " (check ZCBOT_WECOM_SECRET)" if code == BAD_SECRET else ""
                raise WeComError(f"WeCom gettoken errcode {code}: {str(body.get('errmsg', ''))[:120]}{hint}", code)
            self._token = str(body["access_token"])
            expires_in = float(body.get("expires_in") or 7200)
            self._token_expires = time.monotonic() + max(expires_in - TOKEN_MARGIN_SECONDS, expires_in / 2)
            log.info("wecom access token fetched", extra={"expires_in": expires_in})
            return self._token

    async def _call(self, path: str, *, params: dict[str, str] | None = None, json_body: Any = None,
                    content: bytes | None = None, headers: dict[str, str] | None = None,
                    get: bool = False) -> dict[str, Any]:
        token = await self.access_token()
        for attempt in (1, 2):
            query = {**(params or {}), "access_token": token}
            try:
                if get:
                    r = await self.http.get(f"{self.cs.wecom_base_url}{path}", params=query)
                elif json_body is not None:
                    data = json.dumps(json_body, ensure_ascii=False).encode("utf-8")
                    r = await self.http.post(f"{self.cs.wecom_base_url}{path}", params=query, content=data,
                                             headers={"Content-Type": "application/json; charset=utf-8"})
                else:
                    r = await self.http.post(f"{self.cs.wecom_base_url}{path}", params=query, content=content,
                                             headers=headers)
                body = r.json()
            except (httpx.HTTPError, ValueError) as exc:
                raise WeComUnavailable(f"WeCom {path} failed: {safe_error(exc)}") from None
            code = int(body.get("errcode") or 0)
            if code in (TOKEN_INVALID, TOKEN_EXPIRED) and attempt == 1:
                log.info("wecom access token rejected; refreshing", extra={"errcode": code})
                token = await self.access_token(force=True, stale=token)
                continue
            if code != 0:
                raise WeComError(f"WeCom {path} errcode {code}: {str(body.get('errmsg', ''))[:160]}", code)
            return body
        raise WeComError(f"WeCom {path}: access token rejected twice")  # pragma: no cover

    # ---- OAuth (the wwlogin QR scan) --------------------------------------------------------
    async def user_of_code(self, code: str) -> str | None:
        """The member (UserID) who scanned: `auth/getuserinfo` of the code WeCom redirected with;
        None for someone outside the enterprise (WeCom answers an `openid` then). A used or
        expired code is WeComError 40029."""
        body = await self._call("/cgi-bin/auth/getuserinfo", params={"code": code}, get=True)
        userid = body.get("userid") or body.get("UserId")  # the older user/getuserinfo spelled it UserId
        return str(userid) if userid else None

    # ---- messages ----------------------------------------------------------------------------
    async def _send(self, payload: dict[str, Any]) -> dict[str, Any]:
        body = {"agentid": self.cs.wecom_agent_id, "safe": 0, **payload}
        result = await self._call("/cgi-bin/message/send", json_body=body)
        if result.get("invaliduser"):
            raise WeComError(f"WeCom rejected recipient {result.get('invaliduser')!r}", ALL_RECIPIENTS_INVALID)
        return result

    async def send_text(self, touser: str, text: str) -> list[str]:
        """Send `text` (split above 2048 bytes); returns the msgids."""
        self._require()
        ids = []
        for chunk in split_utf8(text, TEXT_MAX_BYTES) or ["(empty reply)"]:
            result = await self._send({"touser": touser, "msgtype": "text", "text": {"content": chunk}})
            ids.append(str(result.get("msgid", "")))
        return ids

    async def upload_media(self, path: "Path | UserFile", media_type: str = "file", filename: str | None = None) -> str:
        self._require()
        size = path.stat().st_size
        if size < FILE_MIN_BYTES:
            raise WeComError(f"{path.name} is too small for WeCom (files must be larger than 5 bytes)")
        if size > FILE_MAX_BYTES:
            raise WeComError(f"{path.name} is larger than WeCom's 20 MB file limit")
        data = await asyncio.to_thread(path.read_bytes)
        name = (filename or path.name).replace('"', "'").replace("\r", " ").replace("\n", " ")
        boundary = f"----zcbot{uuid.uuid4().hex}"
        head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"media\"; filename=\"{name}\"; "
                f"filelength={len(data)}\r\nContent-Type: application/octet-stream\r\n\r\n").encode("utf-8")
        body = head + data + f"\r\n--{boundary}--\r\n".encode()
        result = await self._call("/cgi-bin/media/upload", params={"type": media_type}, content=body,
                                  headers={"Content-Type": f"multipart/form-data; boundary={boundary}",
                                           "Content-Length": str(len(body))})
        media_id = result.get("media_id")
        if not media_id:
            raise WeComError("WeCom media/upload returned no media_id")
        return str(media_id)

    async def send_file(self, touser: str, path: "Path | UserFile") -> str:
        media_id = await self.upload_media(path, "file")
        result = await self._send({"touser": touser, "msgtype": "file", "file": {"media_id": media_id}})
        return str(result.get("msgid", ""))
