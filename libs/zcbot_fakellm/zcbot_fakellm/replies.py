"""What a chat completion sends: the whole `chat.completion` object, the SSE stream (deltas in the
order real providers send them, then finish reason, usage and `[DONE]`), or a recorded body as is."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

from zcbot_fakellm.http1 import Conn, dumps
from zcbot_fakellm.script import TOOL_ARG_CHUNKS, Plan
from zcbot_fakellm.wire import tool_call_deltas


def usage(body: dict[str, Any], plan: Plan) -> dict[str, Any]:
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
    counts: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "prompt_cache_hit_tokens": cached,
        "prompt_cache_miss_tokens": max(0, prompt - cached),
    }
    if plan.reasoning:
        counts["completion_tokens_details"] = {
            "reasoning_tokens": max(1, sum(map(len, plan.reasoning)) // 4)
        }
    return counts


def finish_reason(plan: Plan) -> str:
    if plan.finish_reason:
        return str(plan.finish_reason)
    return "tool_calls" if plan.tool_calls else "stop"


async def complete(body: dict[str, Any], plan: Plan, conn: Conn, *, reply_id: str, keep_alive: bool) -> None:
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
        "id": reply_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake-model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason(plan),
            }
        ],
        "usage": usage(body, plan),
    }
    await conn.send_json(200, payload, keep_alive=keep_alive)


def deltas(plan: Plan) -> Iterator[dict[str, Any]]:
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


async def raw(plan: Plan, conn: Conn, *, keep_alive: bool) -> None:
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


async def stream(
    body: dict[str, Any],
    plan: Plan,
    conn: Conn,
    *,
    reply_id: str,
    include_usage: bool,
    keep_alive: bool,
) -> None:
    """SSE reply: headers now, chunks after ``first_delay`` spaced by ``chunk_delay``."""
    await conn.start_chunked("text/event-stream; charset=utf-8", keep_alive=keep_alive)
    base = {
        "id": reply_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model", "fake-model"),
    }

    def event(obj: dict[str, Any]) -> bytes:
        return b"data: " + dumps({**base, **obj}) + b"\n\n"

    events = [
        event({"choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}]})
        for d in deltas(plan)
    ]
    if plan.malformed:
        events.insert(max(1, len(events) // 2), b'data: {"id": "broken", "choices": [\n\n')
    tail: list[bytes] = []
    if plan.stream_error is not None:
        tail.append(b"data: " + dumps({"error": plan.stream_error}) + b"\n\n")
    elif not plan.hang and not plan.cut_off:
        finish = finish_reason(plan)
        tail.append(
            event({"choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}]})
        )
        if include_usage:
            tail.append(event({"choices": [], "usage": usage(body, plan)}))
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
