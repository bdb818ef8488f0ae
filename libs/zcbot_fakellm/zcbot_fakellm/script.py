"""Scripted turns: their shape (checked when scripted), which one a request gets, and the `Plan`
of what to send for it. See `server.FakeLLM` for the turn fields."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from zcbot_fakellm.wire import TOOL_CALL_SHAPES

Turn = dict[str, Any]
"""One scripted assistant reply; see :class:`FakeLLM` for the recognised fields."""

EXHAUSTED_TEXT = "[fake: script exhausted]"
"""Reply served when a conversation has more assistant turns than its script: a loud marker
rather than a repeat of the last turn, so a test that loops more than intended notices."""

DEFAULT_TEXT_CHUNKS = 4
"""How many pieces scripted text/reasoning is split into when ``chunks`` is not given."""

TOOL_ARG_CHUNKS = 3
"""How many pieces a tool call's argument JSON is split into, like real providers do."""

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


def select_turn(scripts: Mapping[str, list[Turn]], messages: Sequence[Mapping[str, Any]], *, default_chunks: int,
                default_chunk_delay: float) -> Turn:
    """Pick the turn for a request's ``messages``.

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
        matches = [k for k in scripts if k in text]
        if not matches:
            continue
        key = max(matches, key=len)
        turns = scripts[key]
        index = sum(
            1 for m in messages[pos + 1 :] if isinstance(m, Mapping) and m.get("role") == "assistant"
        )
        if index < len(turns):
            return turns[index]
        return {"text": EXHAUSTED_TEXT}
    text = f"ok: {(last_user_text or '')[:200]}"
    return {
        "chunks": split_text(text, default_chunks),
        "chunk_delay": default_chunk_delay,
    }


@dataclass
class Plan:
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


def plan_of(turn: Turn) -> Plan:
    """What to send for `turn`: its text split into deltas, tool calls with ids and JSON arguments."""
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
    return Plan(
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
