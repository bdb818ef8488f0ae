"""`FakeLLM`: the fake's routes (chat completions, models, the control endpoints), its scripts and
its connections (each response watched for the client leaving, so `hang` never leaks)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from zcbot_fakellm import images, replies
from zcbot_fakellm.http1 import STREAM_LIMIT, Conn, Request, error_body, read_requests
from zcbot_fakellm.script import DEFAULT_TEXT_CHUNKS, Turn, plan_of, select_turn, validate_turns
from zcbot_fakellm.wire import strict_problem

READ_AHEAD = 4
"""Requests read ahead of the one being answered (a pipelining client); past that, reading waits."""


class FakeLLM:
    """In-process (or standalone) fake of an OpenAI-compatible chat-completions API.

    Endpoints: ``POST /v1/chat/completions`` (streaming and not), ``POST /v1/images/generations``
    (Seedream on ARK: ``images.py``), ``GET /v1/models``, and
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
    - ``tool_call_shape``: how the calls are streamed (``wire.TOOL_CALL_SHAPES``): ``openai``
      (default), ``one_chunk``, ``same_index`` (Ollama), ``several_in_one_chunk``,
      ``empty_continuation_ids`` (Qwen), ``interleaved``.
    - ``fail_first``: with ``error``, only the first N requests that reach this turn get the error
      (then the turn is served normally): a 429/503 that a retry gets past.
    - ``raw``: the exact response body (a recorded SSE stream, str or bytes), sent as is with status
      200; ``raw_write_bytes``: send it in writes of that many bytes (each its own TCP write and HTTP
      chunk, so multi-byte UTF-8 characters are split across reads), ``chunk_delay`` apart.

    ``strict=True`` answers a request a real provider would refuse with that provider's 400
    (``wire.strict_problem``): unknown parameters, unpaired tool calls and results, DeepSeek's
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
        self.image_requests: list[dict[str, Any]] = []
        """Bodies of received image requests (``images.py``), oldest first."""
        self.image_error: dict[str, Any] | None = None
        """``{"status", "message", "code"?}``: answer image requests with this error instead."""
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
            limit=STREAM_LIMIT,
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
        self.image_requests.clear()

    def select_turn(self, messages: Sequence[Mapping[str, Any]]) -> Turn:
        """Pick the turn for a request's ``messages`` (public so tests can reason about it; see
        `script.select_turn`)."""
        return select_turn(self._scripts, messages, default_chunks=self.default_chunks,
                           default_chunk_delay=self.default_chunk_delay)

    # -- connection handling --------------------------------------------------------------

    async def _handle_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conn_tasks.add(task)
        conn = Conn(writer)
        requests: asyncio.Queue[Request | None] = asyncio.Queue(maxsize=READ_AHEAD)
        client_left = asyncio.Event()
        reading = asyncio.ensure_future(read_requests(reader, requests, client_left))
        try:
            while True:
                req = await requests.get()
                if req is None:
                    return
                if not await self._serve_one(req, conn, client_left) or self._server is None:
                    # stop() may have cancelled us while `_serve_one` was awaiting its own cancelled
                    # helpers (which swallows the cancellation): do not wait for another request.
                    return
        except asyncio.CancelledError:
            pass  # stop(): the connection is closed below; nothing to report
        finally:
            self._conn_tasks.discard(task)
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reading
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve_one(self, req: Request, conn: Conn, client_left: asyncio.Event) -> bool:
        """Produce one response while watching for the client hanging up.

        Returns whether the connection may be reused.  The watch is what makes
        ``hang``/``first_delay`` cheap and leak-free: an EOF from the client cancels the
        response at once instead of at the next failed write (which may never come).  It is
        `read_requests` reading the connection's next request meanwhile, so a request sent the
        moment this response ends is read whole, never missing a byte.
        """
        respond = asyncio.ensure_future(self._dispatch(req, conn))
        left = asyncio.ensure_future(client_left.wait())
        try:
            done, _ = await asyncio.wait({respond, left}, return_when=asyncio.FIRST_COMPLETED)
            if respond in done:
                try:
                    keep_alive = respond.result()
                except (ConnectionError, OSError):
                    return False
                return keep_alive and not client_left.is_set()
            # The client left (EOF) while we were still answering: nobody is reading any more.
            respond.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await respond
            return False
        finally:
            for t in (respond, left):
                if not t.done():
                    t.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await t

    async def _dispatch(self, req: Request, conn: Conn) -> bool:
        keep_alive = req.keep_alive
        path = req.path.rstrip("/") or "/"
        if path in ("/v1/chat/completions", "/chat/completions") and req.method == "POST":
            return await self._chat_completions(req, conn)
        if path in ("/v1/images/generations", "/images/generations") and req.method == "POST":
            return await self._images(req, conn)
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
                await conn.send_json(400, error_body(400, f"bad script: {exc}"), keep_alive=keep_alive)
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
                404, error_body(404, f"no route {req.method} {req.path}"), keep_alive=keep_alive
            )
        return keep_alive

    # -- images -----------------------------------------------------------------------------

    async def _images(self, req: Request, conn: Conn) -> bool:
        keep_alive = req.keep_alive
        try:
            body = json.loads(req.body)
        except ValueError as exc:
            await conn.send_json(400, error_body(400, f"invalid request: {exc}"), keep_alive=keep_alive)
            return keep_alive
        self.image_requests.append(body)
        if self.image_error is not None:
            status = int(self.image_error.get("status", 500))
            await conn.send_json(status, error_body(status, str(self.image_error.get("message", "fake image error")),
                                                    code=self.image_error.get("code")), keep_alive=keep_alive)
            return keep_alive
        try:
            reply = images.answer(body, self.base_url)
        except images.ImageRequestError as exc:
            await conn.send_json(400, error_body(400, str(exc), type_="BadRequest", code="InvalidParameter"),
                                 keep_alive=keep_alive)
            return keep_alive
        await conn.send_json(200, reply, keep_alive=keep_alive)
        return keep_alive

    # -- chat completions -----------------------------------------------------------------

    def _reply_id(self) -> str:
        return f"chatcmpl-fake-{next(self._ids)}"

    def _record(self, body: dict[str, Any]) -> None:
        self.requests.append(body)
        limit = self.max_recorded_requests
        if limit is not None and len(self.requests) > limit:
            del self.requests[: len(self.requests) - limit]

    async def _chat_completions(self, req: Request, conn: Conn, strict: bool | None = None) -> bool:
        keep_alive = req.keep_alive
        try:
            body = json.loads(req.body)
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                raise ValueError("body must be an object with a 'messages' list")
        except ValueError as exc:
            await conn.send_json(400, error_body(400, f"invalid request: {exc}"), keep_alive=keep_alive)
            return keep_alive
        self._record(body)
        if self.strict if strict is None else strict:
            problem = strict_problem(body)
            if problem is not None:
                self.rejected.append(problem[1])
                await conn.send_json(problem[0], error_body(problem[0], problem[1], type_="invalid_request_error",
                                                             code="invalid_request_error"), keep_alive=keep_alive)
                return keep_alive
        turn = self.select_turn(body["messages"])
        if turn.get("fail_first") is not None:
            hits = self._hits[id(turn)] = self._hits.get(id(turn), 0) + 1
            if hits > int(turn["fail_first"]):
                turn = {k: v for k, v in turn.items() if k != "error"}
        plan = plan_of(turn)
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
                    error_body(
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
                await replies.raw(plan, conn, keep_alive=keep_alive)
            elif stream:
                await replies.stream(body, plan, conn, reply_id=self._reply_id(), include_usage=include_usage,
                                     keep_alive=keep_alive)
            else:
                await replies.complete(body, plan, conn, reply_id=self._reply_id(), keep_alive=keep_alive)
            return keep_alive
        finally:
            self.active_responses -= 1
