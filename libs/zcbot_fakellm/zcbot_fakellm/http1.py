"""The HTTP/1.1 plumbing of the fake: one request read from a stream (Content-Length or chunked
body), responses written as JSON or chunked (SSE) bodies, OpenAI's error envelope."""

from __future__ import annotations

import asyncio
import http
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_HEADER_BYTES = 64 * 1024
STREAM_LIMIT = 16 * 1024 * 1024  # StreamReader buffer limit; prompts can be large
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_exceeded",
}


@dataclass
class Request:
    method: str
    path: str
    version: str
    headers: dict[str, str]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        conn = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return conn == "keep-alive"
        return conn != "close"


class BadRequest(Exception):
    """The peer sent something that is not HTTP/1.x we understand; drop the connection."""


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """Read one request; ``None`` on a clean EOF between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise BadRequest("truncated request head") from exc
    except asyncio.LimitOverrunError as exc:
        raise BadRequest("request head too large") from exc
    if len(head) > MAX_HEADER_BYTES:
        raise BadRequest("request head too large")
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError as exc:
        raise BadRequest(f"bad request line {lines[0]!r}") from exc
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest(f"bad header line {line!r}")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await read_chunked_body(reader)
    else:
        try:
            length = int(headers.get("content-length", "0") or 0)
        except ValueError as exc:
            raise BadRequest("bad content-length") from exc
        body = await reader.readexactly(length) if length > 0 else b""
    path = target.split("?", 1)[0]
    return Request(method.upper(), path, version.strip(), headers, body)


async def read_requests(
    reader: asyncio.StreamReader, requests: asyncio.Queue[Request | None], client_left: asyncio.Event
) -> None:
    """Read a connection's requests into ``requests`` until it ends, then put ``None``.

    The one reader of the connection: it runs while a response is being written, so it is also the
    client-left watch (``client_left`` is set on EOF or a broken connection).  No byte is read by
    anyone else, so a request sent the moment a response ends is read whole.  A request the fake
    cannot parse ends the connection after the response under way (which is not cancelled).
    """
    while True:
        try:
            req = await read_request(reader)
        except (BadRequest, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError) as exc:
            req = None
            if not isinstance(exc, (BadRequest, asyncio.LimitOverrunError)):
                client_left.set()  # a truncated request or a broken connection
        if req is None:
            if reader.at_eof():
                client_left.set()
            await requests.put(None)
            return
        await requests.put(req)


async def read_chunked_body(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError as exc:
            raise BadRequest("bad chunk size") from exc
        if size == 0:
            # Skip trailers up to the blank line.
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


def status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Status"
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


def head(status: int, headers: Mapping[str, str]) -> bytes:
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return status_line(status) + lines.encode("latin-1") + b"\r\n"


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def error_body(status: int, message: str, *, type_: str | None = None, code: Any = None) -> dict[str, Any]:
    """OpenAI's error envelope, which the openai SDK (and so LiteLLM) parses for the message."""
    etype = type_ or ERROR_TYPES.get(status) or ("server_error" if status >= 500 else "api_error")
    return {"error": {"message": message, "type": etype, "param": None, "code": code}}


class Conn:
    """Response writer for one HTTP connection; tracks whether the peer went away."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def send_json(
        self,
        status: int,
        obj: Any,
        *,
        keep_alive: bool,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        body = dumps(obj)
        headers = {
            "Content-Type": "application/json",
            "Content-Length": str(len(body)),
            "Connection": "keep-alive" if keep_alive else "close",
        }
        if extra_headers:
            headers.update({str(k): str(v) for k, v in extra_headers.items()})
        await self.send(head(status, headers) + body)

    async def start_chunked(self, content_type: str, *, keep_alive: bool) -> None:
        headers = {
            "Content-Type": content_type,
            "Cache-Control": "no-cache",
            "Transfer-Encoding": "chunked",
            "Connection": "keep-alive" if keep_alive else "close",
        }
        await self.send(head(200, headers))

    async def send_chunk(self, data: bytes) -> None:
        if data:
            await self.send(b"%x\r\n%s\r\n" % (len(data), data))

    async def end_chunked(self) -> None:
        await self.send(b"0\r\n\r\n")
