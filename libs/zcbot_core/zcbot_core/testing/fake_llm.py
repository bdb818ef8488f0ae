"""A fake OpenAI-compatible chat-completions server for tests and benchmarks.

Why it exists: mocking ``litellm.acompletion`` skips the code that actually breaks in
production (SSE parsing, tool-call delta assembly, usage accounting, error mapping,
cancellation of in-flight HTTP requests).  Pointing the *real* LiteLLM at this server via
``api_base`` exercises all of it while staying deterministic and offline.

Why a hand-written HTTP/1.1 server instead of uvicorn: it has to run inside whatever event
loop a test already owns (``await fake.start()``), start in milliseconds, hold ~1000 idle
streaming connections cheaply for benchmarks, and notice client disconnects immediately
(so ``hang``/``first_delay`` responses never leak).  asyncio streams give all of that in a
few hundred lines with no extra dependencies.  Only what LLM clients use is implemented:
keep-alive, ``Content-Length`` or chunked request bodies, chunked/SSE responses.  Requests
pipelined behind an unfinished response are not supported (no HTTP client pipelines).

Scripting is stateless and keyed by content so that many concurrent conversations (and
several processes) can share one server: a script is chosen by a key string found in the
last user message that contains any key, and the turn within it by how many assistant
messages follow that user message in the request.  See :class:`FakeLLM` for the turn format.

Standalone::

    python -m zcbot_core.testing.fake_llm --port 0 [--host 127.0.0.1] \
        [--default-chunks 30 --default-chunk-delay 0.0333]

prints ``READY <port>`` once listening; scripts are then pushed with :func:`push_script`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http
import itertools
import json
import signal
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from zcbot_core.testing.fake_wire import TOOL_CALL_SHAPES, strict_problem, tool_call_deltas

__all__ = [
    "EXHAUSTED_TEXT",
    "FakeLLM",
    "Turn",
    "clear_scripts",
    "get_requests",
    "push_script",
    "split_text",
]

Turn = dict[str, Any]
"""One scripted assistant reply; see :class:`FakeLLM` for the recognised fields."""

EXHAUSTED_TEXT = "[fake: script exhausted]"
"""Reply served when a conversation has more assistant turns than its script: a loud marker
rather than a repeat of the last turn, so a test that loops more than intended notices."""

DEFAULT_TEXT_CHUNKS = 4
"""How many pieces scripted text/reasoning is split into when ``chunks`` is not given."""

TOOL_ARG_CHUNKS = 3
"""How many pieces a tool call's argument JSON is split into, like real providers do."""

_MAX_HEADER_BYTES = 64 * 1024
_STREAM_LIMIT = 16 * 1024 * 1024  # StreamReader buffer limit; prompts can be large
_KNOWN_TURN_KEYS = frozenset(
    {
        "text",
        "chunks",
        "reasoning",
        "tool_calls",
        "first_delay",
        "chunk_delay",
        "error",
        "malformed",
        "stream_error",
        "cut_off",
        "hang",
        "usage",
        "finish_reason",
        "tool_call_shape",
        "fail_first",
        "raw",
        "raw_write_bytes",
    }
)
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_exceeded",
}


# --------------------------------------------------------------------------------------
# Pure helpers (kept module-level so they are easy to unit test and reuse)
# --------------------------------------------------------------------------------------


def split_text(text: str, pieces: int) -> list[str]:
    """Split ``text`` into ``pieces`` contiguous parts of near-equal length.

    Character based (not word based) so the round trip is exact for any text, including
    whitespace-only or non-ASCII strings.  Empty text yields no pieces.
    """
    if not text:
        return []
    n = max(1, min(int(pieces), len(text)))
    size, extra = divmod(len(text), n)
    out: list[str] = []
    pos = 0
    for i in range(n):
        step = size + (1 if i < extra else 0)
        out.append(text[pos : pos + step])
        pos += step
    return out


def message_text(message: Mapping[str, Any]) -> str:
    """Text of an OpenAI message whose ``content`` is a string or a list of content parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return ""


def validate_turns(turns: Any) -> list[Turn]:
    """Check a script's shape early so a typo fails at ``script()`` time, not mid-test."""
    if not isinstance(turns, list):
        raise ValueError("turns must be a list of dicts")
    checked: list[Turn] = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise ValueError(f"turn {i} must be a dict, got {type(turn).__name__}")
        unknown = set(turn) - _KNOWN_TURN_KEYS
        if unknown:
            raise ValueError(f"turn {i} has unknown fields {sorted(unknown)}")
        for j, call in enumerate(turn.get("tool_calls") or []):
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise ValueError(f"turn {i} tool_calls[{j}] needs a string 'name'")
        error = turn.get("error")
        if error is not None and not (isinstance(error, dict) and "status" in error):
            raise ValueError(f"turn {i} error must be a dict with 'status'")
        if turn.get("tool_call_shape", "openai") not in TOOL_CALL_SHAPES:
            raise ValueError(f"turn {i} tool_call_shape must be one of {', '.join(TOOL_CALL_SHAPES)}")
        if turn.get("raw") is not None and not isinstance(turn["raw"], (str, bytes)):
            raise ValueError(f"turn {i} raw must be the response body (str or bytes)")
        checked.append(dict(turn))
    return checked


def _root_url(base_url: str) -> str:
    """``http://h:p/v1`` -> ``http://h:p``: control endpoints live outside ``/v1``."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


async def push_script(base_url: str, key: str, turns: Sequence[Turn]) -> None:
    """Register (or replace) the script for ``key`` on a fake server in another process."""
    import httpx

    async with httpx.AsyncClient(timeout=10.0) as client:
        resp = await client.post(
            f"{_root_url(base_url)}/_script", json={"key": key, "turns": list(turns)}
        )
        resp.raise_for_status()


async def clear_scripts(base_url: str) -> None:
    """Remove every script from a fake server in another process."""
    import httpx

    async with httpx.AsyncClient(timeout=10.0) as client:
        resp = await client.delete(f"{_root_url(base_url)}/_script")
        resp.raise_for_status()


async def get_requests(base_url: str) -> list[dict[str, Any]]:
    """Chat-completion request bodies received by a fake server in another process."""
    import httpx

    async with httpx.AsyncClient(timeout=10.0) as client:
        resp = await client.get(f"{_root_url(base_url)}/_requests")
        resp.raise_for_status()
        data: list[dict[str, Any]] = resp.json()
        return data


# --------------------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------------------


@dataclass
class _Request:
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


class _BadRequest(Exception):
    """The peer sent something that is not HTTP/1.x we understand; drop the connection."""


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    """Read one request; ``None`` on a clean EOF between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise _BadRequest("truncated request head") from exc
    except asyncio.LimitOverrunError as exc:
        raise _BadRequest("request head too large") from exc
    if len(head) > _MAX_HEADER_BYTES:
        raise _BadRequest("request head too large")
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError as exc:
        raise _BadRequest(f"bad request line {lines[0]!r}") from exc
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise _BadRequest(f"bad header line {line!r}")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked_body(reader)
    else:
        try:
            length = int(headers.get("content-length", "0") or 0)
        except ValueError as exc:
            raise _BadRequest("bad content-length") from exc
        body = await reader.readexactly(length) if length > 0 else b""
    path = target.split("?", 1)[0]
    return _Request(method.upper(), path, version.strip(), headers, body)


async def _read_chunked_body(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError as exc:
            raise _BadRequest("bad chunk size") from exc
        if size == 0:
            # Skip trailers up to the blank line.
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "Status"
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


def _head(status: int, headers: Mapping[str, str]) -> bytes:
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return _status_line(status) + lines.encode("latin-1") + b"\r\n"


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _error_body(status: int, message: str, *, type_: str | None = None, code: Any = None) -> dict[str, Any]:
    """OpenAI's error envelope, which the openai SDK (and so LiteLLM) parses for the message."""
    etype = type_ or _ERROR_TYPES.get(status) or ("server_error" if status >= 500 else "api_error")
    return {"error": {"message": message, "type": etype, "param": None, "code": code}}


class _Conn:
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
        body = _dumps(obj)
        headers = {
            "Content-Type": "application/json",
            "Content-Length": str(len(body)),
            "Connection": "keep-alive" if keep_alive else "close",
        }
        if extra_headers:
            headers.update({str(k): str(v) for k, v in extra_headers.items()})
        await self.send(_head(status, headers) + body)

    async def start_chunked(self, content_type: str, *, keep_alive: bool) -> None:
        headers = {
            "Content-Type": content_type,
            "Cache-Control": "no-cache",
            "Transfer-Encoding": "chunked",
            "Connection": "keep-alive" if keep_alive else "close",
        }
        await self.send(_head(200, headers))

    async def send_chunk(self, data: bytes) -> None:
        if data:
            await self.send(b"%x\r\n%s\r\n" % (len(data), data))

    async def end_chunked(self) -> None:
        await self.send(b"0\r\n\r\n")


# --------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------


@dataclass
class _Plan:
    """What to send for one chat completion, resolved from a turn (or the default reply)."""

    reasoning: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # id, name, arguments(str)
    first_delay: float = 0.0
    chunk_delay: float = 0.0
    error: dict[str, Any] | None = None
    malformed: bool = False
    stream_error: dict[str, Any] | None = None
    cut_off: bool = False
    hang: bool = False
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    tool_call_shape: str = "openai"
    raw: bytes | None = None
    raw_write_bytes: int = 0


class FakeLLM:
    """In-process (or standalone) fake of an OpenAI-compatible chat-completions API.

    Endpoints: ``POST /v1/chat/completions`` (streaming and not), ``GET /v1/models``, and
    for control ``POST /_script {"key", "turns"}``, ``DELETE /_script``,
    ``GET /_requests``, ``DELETE /_requests``, ``GET /_health``.

    Turn fields (all optional):

    - ``text``: reply content, streamed in ~4 pieces; ``chunks``: explicit content deltas.
    - ``reasoning``: streamed first as ``delta.reasoning_content`` (DeepSeek style).
    - ``tool_calls``: ``[{"name", "arguments": dict | str, "id"?}]``, streamed OpenAI style.
    - ``first_delay`` / ``chunk_delay``: seconds before the first chunk / between chunks.
      Streaming responses send headers at once, so the delay is time-to-first-token.
    - ``error``: ``{"status", "message", "type"?, "code"?, "headers"?}`` -> an HTTP error in
      OpenAI's format instead of a reply (after ``first_delay``).
    - ``malformed``: one non-JSON ``data:`` line mid-stream, then the stream continues.
    - ``stream_error``: ``{"message", "code"?}`` -> after the content, an error object inside the 200
      stream (``data: {"error": ...}``, as vLLM and sglang send), and the stream ends there.
    - ``cut_off``: the stream ends cleanly after the content, with no finish_reason, usage or ``[DONE]``
      (a provider or proxy that drops the connection mid-answer).
    - ``hang``: send headers (and any scripted chunks) then stall until the client leaves.
    - ``usage``: ``{"prompt_tokens", "completion_tokens", "cached_tokens"}`` overrides.
    - ``finish_reason``: defaults to ``"tool_calls"`` if there are tool calls, else ``"stop"``; any
      string is sent as given (``length``, ``content_filter``, ``insufficient_system_resource``, …).
    - ``tool_call_shape``: how the calls are streamed (``fake_wire.TOOL_CALL_SHAPES``): ``openai``
      (default), ``one_chunk``, ``same_index`` (Ollama), ``several_in_one_chunk``,
      ``empty_continuation_ids`` (Qwen), ``interleaved``.
    - ``fail_first``: with ``error``, only the first N requests that reach this turn get the error
      (then the turn is served normally): a 429/503 that a retry gets past.
    - ``raw``: the exact response body (a recorded SSE stream, str or bytes), sent as is with status
      200; ``raw_write_bytes``: send it in writes of that many bytes (each its own TCP write and HTTP
      chunk, so multi-byte UTF-8 characters are split across reads), ``chunk_delay`` apart.

    ``strict=True`` answers a request a real provider would refuse with that provider's 400
    (``fake_wire.strict_problem``): unknown parameters, unpaired tool calls and results, DeepSeek's
    thinking-mode ``reasoning_content`` rule.

    ``default_chunks``/``default_chunk_delay`` shape the unscripted ``ok: ...`` reply so
    benchmarks can emulate a model streaming at a fixed rate.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        default_chunks: int = DEFAULT_TEXT_CHUNKS,
        default_chunk_delay: float = 0.0,
        max_recorded_requests: int | None = 10_000,
        strict: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.default_chunks = max(1, int(default_chunks))
        self.default_chunk_delay = max(0.0, float(default_chunk_delay))
        self.max_recorded_requests = max_recorded_requests
        self.requests: list[dict[str, Any]] = []
        """Bodies of received chat-completion requests, oldest first (bounded for benches)."""
        self._scripts: dict[str, list[Turn]] = {}
        self._server: asyncio.Server | None = None
        self._conn_tasks: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self.strict = strict
        """Refuse requests a real provider would refuse (see the class docstring)."""
        self.rejected: list[str] = []
        """The strict-mode refusals sent, oldest first (a test can assert there were none)."""
        self._hits: dict[int, int] = {}  # id(turn) -> requests served from it (for `fail_first`)
        self.active_responses = 0
        """Chat completions currently being produced; returns to 0 once clients are gone,
        which lets tests assert that cancelled requests did not leak server-side work."""

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def root_url(self) -> str:
        """``http://host:port`` (control endpoints live here)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://host:port/v1``: what to pass to LiteLLM as ``api_base``."""
        return f"{self.root_url}/v1"

    async def start(self) -> FakeLLM:
        """Listen in the running event loop; resolves ``port`` when 0 was requested."""
        if self._server is not None:
            return self
        self._server = await asyncio.start_server(
            self._handle_connection,
            self.host,
            self.port,
            limit=_STREAM_LIMIT,
            backlog=4096,  # benchmarks open ~1000 connections at once
        )
        sock = self._server.sockets[0]
        self.port = int(sock.getsockname()[1])
        return self

    async def stop(self) -> None:
        """Stop listening and drop every open connection (including hanging streams)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        tasks = list(self._conn_tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)

    async def __aenter__(self) -> FakeLLM:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- scripting ------------------------------------------------------------------------

    def script(self, key: str, turns: Sequence[Turn]) -> None:
        """Register (or replace) the turns served to conversations mentioning ``key``."""
        if not isinstance(key, str) or not key:
            raise ValueError("script key must be a non-empty string")
        self._scripts[key] = validate_turns(list(turns))
        self._hits.clear()

    def clear_scripts(self) -> None:
        """Forget every script (``DELETE /_script``)."""
        self._scripts.clear()

    def clear_requests(self) -> None:
        """Forget recorded requests (``DELETE /_requests``)."""
        self.requests.clear()

    def select_turn(self, messages: Sequence[Mapping[str, Any]]) -> Turn:
        """Pick the turn for a request's ``messages`` (public so tests can reason about it).

        The last user message containing any key selects the script (longest key wins on a
        tie, so ``"task-1"`` vs ``"task-10"`` is unambiguous); the number of assistant
        messages after it is the turn index.  Unscripted requests get ``ok: <user text>``.
        """
        last_user_text: str | None = None
        for pos in range(len(messages) - 1, -1, -1):
            msg = messages[pos]
            if not isinstance(msg, Mapping) or msg.get("role") != "user":
                continue
            text = message_text(msg)
            if last_user_text is None:
                last_user_text = text
            matches = [k for k in self._scripts if k in text]
            if not matches:
                continue
            key = max(matches, key=len)
            turns = self._scripts[key]
            index = sum(
                1 for m in messages[pos + 1 :] if isinstance(m, Mapping) and m.get("role") == "assistant"
            )
            if index < len(turns):
                return turns[index]
            return {"text": EXHAUSTED_TEXT}
        text = f"ok: {(last_user_text or '')[:200]}"
        return {
            "chunks": split_text(text, self.default_chunks),
            "chunk_delay": self.default_chunk_delay,
        }

    def _plan(self, turn: Turn) -> _Plan:
        if turn.get("chunks") is not None:
            text_chunks = [str(c) for c in turn["chunks"]]
        else:
            text_chunks = split_text(str(turn.get("text") or ""), DEFAULT_TEXT_CHUNKS)
        calls: list[dict[str, Any]] = []
        for call in turn.get("tool_calls") or []:
            args = call.get("arguments", {})
            calls.append(
                {
                    "id": str(call.get("id") or f"call_{uuid.uuid4().hex[:24]}"),
                    "name": call["name"],
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                }
            )
        return _Plan(
            reasoning=split_text(str(turn.get("reasoning") or ""), DEFAULT_TEXT_CHUNKS),
            text=text_chunks,
            tool_calls=calls,
            first_delay=float(turn.get("first_delay") or 0.0),
            chunk_delay=float(turn.get("chunk_delay") or 0.0),
            error=turn.get("error"),
            malformed=bool(turn.get("malformed")),
            stream_error=turn.get("stream_error"),
            cut_off=bool(turn.get("cut_off")),
            hang=bool(turn.get("hang")),
            usage=turn.get("usage"),
            finish_reason=turn.get("finish_reason"),
            tool_call_shape=str(turn.get("tool_call_shape") or "openai"),
            raw=turn["raw"].encode("utf-8") if isinstance(turn.get("raw"), str) else turn.get("raw"),
            raw_write_bytes=int(turn.get("raw_write_bytes") or 0),
        )

    # -- connection handling --------------------------------------------------------------

    async def _handle_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conn_tasks.add(task)
        conn = _Conn(writer)
        try:
            while True:
                try:
                    req = await _read_request(reader)
                except (_BadRequest, asyncio.IncompleteReadError, ConnectionError, OSError):
                    return
                if req is None:
                    return
                if not await self._serve_one(req, reader, conn) or self._server is None:
                    # stop() may have cancelled us while `_serve_one` was awaiting its own cancelled
                    # helpers (which swallows the cancellation): do not wait for another request.
                    return
        except asyncio.CancelledError:
            pass  # stop(): the connection is closed below; nothing to report
        finally:
            self._conn_tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve_one(self, req: _Request, reader: asyncio.StreamReader, conn: _Conn) -> bool:
        """Produce one response while watching for the client hanging up.

        Returns whether the connection may be reused.  The watcher is what makes
        ``hang``/``first_delay`` cheap and leak-free: an EOF from the client cancels the
        response at once instead of at the next failed write (which may never come).
        """
        respond = asyncio.ensure_future(self._dispatch(req, conn))
        watch = asyncio.ensure_future(reader.read(1))
        try:
            done, _ = await asyncio.wait({respond, watch}, return_when=asyncio.FIRST_COMPLETED)
            if respond in done:
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await watch
                try:
                    keep_alive = respond.result()
                except (ConnectionError, OSError):
                    return False
                return keep_alive and not reader.at_eof()
            # The client spoke while we were still answering: EOF (it left) or pipelined
            # bytes, which we do not support.  Either way this connection is finished.
            respond.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await respond
            return False
        finally:
            for t in (respond, watch):
                if not t.done():
                    t.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await t

    async def _dispatch(self, req: _Request, conn: _Conn) -> bool:
        keep_alive = req.keep_alive
        path = req.path.rstrip("/") or "/"
        if path in ("/v1/chat/completions", "/chat/completions") and req.method == "POST":
            return await self._chat_completions(req, conn)
        if path == "/v1/messages" and req.method == "POST":
            # Anthropic's Messages API: served from `raw` turns only (recorded Anthropic streams); the
            # strict checks are OpenAI's and DeepSeek's, so they do not apply here.
            return await self._chat_completions(req, conn, strict=False)
        if path in ("/v1/models", "/models") and req.method == "GET":
            models = {
                "object": "list",
                "data": [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}],
            }
            await conn.send_json(200, models, keep_alive=keep_alive)
        elif path == "/_script" and req.method == "POST":
            try:
                payload = json.loads(req.body or b"{}")
                self.script(payload["key"], payload["turns"])
            except (ValueError, KeyError, TypeError) as exc:
                await conn.send_json(400, _error_body(400, f"bad script: {exc}"), keep_alive=keep_alive)
            else:
                await conn.send_json(200, {"ok": True, "scripts": len(self._scripts)}, keep_alive=keep_alive)
        elif path == "/_script" and req.method == "DELETE":
            self.clear_scripts()
            await conn.send_json(200, {"ok": True}, keep_alive=keep_alive)
        elif path == "/_requests" and req.method == "GET":
            await conn.send_json(200, self.requests, keep_alive=keep_alive)
        elif path == "/_requests" and req.method == "DELETE":
            self.clear_requests()
            await conn.send_json(200, {"ok": True}, keep_alive=keep_alive)
        elif path == "/_health" and req.method == "GET":
            await conn.send_json(200, {"ok": True}, keep_alive=keep_alive)
        else:
            await conn.send_json(
                404, _error_body(404, f"no route {req.method} {req.path}"), keep_alive=keep_alive
            )
        return keep_alive

    # -- chat completions -----------------------------------------------------------------

    def _record(self, body: dict[str, Any]) -> None:
        self.requests.append(body)
        limit = self.max_recorded_requests
        if limit is not None and len(self.requests) > limit:
            del self.requests[: len(self.requests) - limit]

    async def _chat_completions(self, req: _Request, conn: _Conn, strict: bool | None = None) -> bool:
        keep_alive = req.keep_alive
        try:
            body = json.loads(req.body)
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                raise ValueError("body must be an object with a 'messages' list")
        except ValueError as exc:
            await conn.send_json(400, _error_body(400, f"invalid request: {exc}"), keep_alive=keep_alive)
            return keep_alive
        self._record(body)
        if self.strict if strict is None else strict:
            problem = strict_problem(body)
            if problem is not None:
                self.rejected.append(problem[1])
                await conn.send_json(problem[0], _error_body(problem[0], problem[1], type_="invalid_request_error",
                                                             code="invalid_request_error"), keep_alive=keep_alive)
                return keep_alive
        turn = self.select_turn(body["messages"])
        if turn.get("fail_first") is not None:
            hits = self._hits[id(turn)] = self._hits.get(id(turn), 0) + 1
            if hits > int(turn["fail_first"]):
                turn = {k: v for k, v in turn.items() if k != "error"}
        plan = self._plan(turn)
        stream = bool(body.get("stream"))
        opts = body.get("stream_options")
        include_usage = bool(isinstance(opts, dict) and opts.get("include_usage"))
        self.active_responses += 1
        try:
            if plan.error is not None:
                await asyncio.sleep(plan.first_delay)
                err = plan.error
                status = int(err.get("status", 500))
                await conn.send_json(
                    status,
                    _error_body(
                        status,
                        str(err.get("message", f"fake error {status}")),
                        type_=err.get("type"),
                        code=err.get("code"),
                    ),
                    keep_alive=keep_alive,
                    extra_headers=err.get("headers"),
                )
                return keep_alive
            if plan.raw is not None:
                await self._raw(plan, conn, keep_alive=keep_alive)
            elif stream:
                await self._stream(body, plan, conn, include_usage=include_usage, keep_alive=keep_alive)
            else:
                await self._complete(body, plan, conn, keep_alive=keep_alive)
            return keep_alive
        finally:
            self.active_responses -= 1

    def _usage(self, body: dict[str, Any], plan: _Plan) -> dict[str, Any]:
        """Rough chars/4 token counts unless the turn pinned them; DeepSeek+OpenAI cache keys."""
        override = plan.usage or {}
        if "prompt_tokens" in override:
            prompt = int(override["prompt_tokens"])
        else:
            chars = len(json.dumps(body.get("messages", []), ensure_ascii=False))
            if body.get("tools"):
                chars += len(json.dumps(body["tools"], ensure_ascii=False))
            prompt = max(1, chars // 4)
        if "completion_tokens" in override:
            completion = int(override["completion_tokens"])
        else:
            out_chars = sum(map(len, plan.text)) + sum(map(len, plan.reasoning))
            out_chars += sum(len(c["name"]) + len(c["arguments"]) for c in plan.tool_calls)
            completion = max(1, out_chars // 4) if out_chars else 0
        cached = int(override.get("cached_tokens", 0))
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "prompt_cache_hit_tokens": cached,
            "prompt_cache_miss_tokens": max(0, prompt - cached),
        }
        if plan.reasoning:
            usage["completion_tokens_details"] = {
                "reasoning_tokens": max(1, sum(map(len, plan.reasoning)) // 4)
            }
        return usage

    def _finish_reason(self, plan: _Plan) -> str:
        if plan.finish_reason:
            return str(plan.finish_reason)
        return "tool_calls" if plan.tool_calls else "stop"

    async def _complete(self, body: dict[str, Any], plan: _Plan, conn: _Conn, *, keep_alive: bool) -> None:
        """Non-streaming reply: one ``chat.completion`` object after ``first_delay``."""
        if plan.hang:
            await conn.start_chunked("application/json", keep_alive=keep_alive)
            await asyncio.Future()  # until the client disconnects (or stop())
        await asyncio.sleep(plan.first_delay)
        message: dict[str, Any] = {"role": "assistant", "content": "".join(plan.text) or None}
        if plan.reasoning:
            message["reasoning_content"] = "".join(plan.reasoning)
        if plan.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in plan.tool_calls
            ]
        payload = {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake-model"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self._finish_reason(plan),
                }
            ],
            "usage": self._usage(body, plan),
        }
        await conn.send_json(200, payload, keep_alive=keep_alive)

    def _deltas(self, plan: _Plan) -> Iterator[dict[str, Any]]:
        """The ``delta`` objects of a stream, in the order real providers send them."""
        first = True

        def with_role(delta: dict[str, Any]) -> dict[str, Any]:
            nonlocal first
            if first:
                first = False
                return {"role": "assistant", **delta}
            return delta

        for piece in plan.reasoning:
            yield with_role({"content": None, "reasoning_content": piece})
        for piece in plan.text:
            yield with_role({"content": piece})
        for delta in tool_call_deltas(plan.tool_calls, plan.tool_call_shape, TOOL_ARG_CHUNKS):
            yield with_role(delta)
        if first:  # nothing at all to say: still announce the role, like OpenAI does
            yield with_role({"content": ""})

    async def _raw(self, plan: _Plan, conn: _Conn, *, keep_alive: bool) -> None:
        """A recorded stream, byte for byte (`raw`), in writes of `raw_write_bytes`."""
        assert plan.raw is not None
        await conn.start_chunked("text/event-stream; charset=utf-8", keep_alive=keep_alive)
        await asyncio.sleep(plan.first_delay)
        size = plan.raw_write_bytes or len(plan.raw) or 1
        for start in range(0, len(plan.raw), size):
            if start:
                await asyncio.sleep(plan.chunk_delay)
            await conn.send_chunk(plan.raw[start:start + size])
        await conn.end_chunked()

    async def _stream(
        self,
        body: dict[str, Any],
        plan: _Plan,
        conn: _Conn,
        *,
        include_usage: bool,
        keep_alive: bool,
    ) -> None:
        """SSE reply: headers now, chunks after ``first_delay`` spaced by ``chunk_delay``."""
        await conn.start_chunked("text/event-stream; charset=utf-8", keep_alive=keep_alive)
        base = {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "fake-model"),
        }

        def event(obj: dict[str, Any]) -> bytes:
            return b"data: " + _dumps({**base, **obj}) + b"\n\n"

        events = [
            event({"choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}]})
            for d in self._deltas(plan)
        ]
        if plan.malformed:
            events.insert(max(1, len(events) // 2), b'data: {"id": "broken", "choices": [\n\n')
        tail: list[bytes] = []
        if plan.stream_error is not None:
            tail.append(b"data: " + _dumps({"error": plan.stream_error}) + b"\n\n")
        elif not plan.hang and not plan.cut_off:
            finish = self._finish_reason(plan)
            tail.append(
                event({"choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}]})
            )
            if include_usage:
                tail.append(event({"choices": [], "usage": self._usage(body, plan)}))
            tail.append(b"data: [DONE]\n\n")

        if plan.first_delay > 0:
            await asyncio.sleep(plan.first_delay)
        if plan.chunk_delay <= 0:
            # No pacing requested: one write is much cheaper with 1000 concurrent streams.
            await conn.send_chunk(b"".join(events + tail))
        else:
            for i, data in enumerate(events + tail):
                if i and i <= len(events):  # pace content chunks, not the closing bookkeeping
                    await asyncio.sleep(plan.chunk_delay)
                await conn.send_chunk(data)
        if plan.hang:
            await asyncio.Future()  # stall until the client disconnects (or stop())
        await conn.end_chunked()


# --------------------------------------------------------------------------------------
# Standalone process
# --------------------------------------------------------------------------------------


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m zcbot_core.testing.fake_llm",
        description="Fake OpenAI-compatible LLM server; prints 'READY <port>' when listening.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--default-chunks",
        type=int,
        default=DEFAULT_TEXT_CHUNKS,
        help="pieces the unscripted 'ok: ...' reply is streamed in",
    )
    parser.add_argument(
        "--default-chunk-delay",
        type=float,
        default=0.0,
        help="seconds between chunks of the unscripted reply (e.g. 0.0333 for 30 chunks/s)",
    )
    parser.add_argument("--strict", action="store_true",
                        help="refuse requests a real provider would refuse (unknown parameters, unpaired tool "
                             "calls, DeepSeek's reasoning_content rule) with its 400")
    parser.add_argument(
        "--max-recorded-requests",
        type=int,
        default=10_000,
        help="keep only this many request bodies for GET /_requests (0 = keep none)",
    )
    return parser.parse_args(argv)


async def _serve_forever(args: argparse.Namespace) -> None:
    fake = FakeLLM(
        args.host,
        args.port,
        default_chunks=args.default_chunks,
        default_chunk_delay=args.default_chunk_delay,
        max_recorded_requests=args.max_recorded_requests,
        strict=args.strict,
    )
    await fake.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    print(f"READY {fake.port}", flush=True)
    try:
        await stop.wait()
    finally:
        await fake.stop()


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``python -m zcbot_core.testing.fake_llm``."""
    args = _parse_args(argv)
    try:
        import uvloop  # fewer syscalls per chunk matters with ~1000 streams

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(_serve_forever(args))


if __name__ == "__main__":
    main()
