"""What the fake LLM checks and sends beyond the tidy default.

- `strict_problem`: a request a real provider would reject, as (status, message) in the
  provider's words: an unknown parameter (OpenAI), tool calls and tool results that do not pair
  (OpenAI, DeepSeek), and DeepSeek's thinking-mode rule that every assistant message with tool calls
  carries its `reasoning_content` (api-docs.deepseek.com/guides/thinking_mode).
- `tool_call_deltas`: the tool-call part of a stream in the shapes real servers send
  (`tool_call_shape` of a turn), not only OpenAI's one-call-at-a-time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

KNOWN_PARAMS = frozenset({
    "model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature",
    "top_p", "n", "stop", "seed", "user", "tools", "tool_choice", "parallel_tool_calls", "response_format",
    "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs", "logit_bias", "reasoning_effort",
    "thinking",
})
"""OpenAI's chat-completions parameters plus DeepSeek's `thinking`."""

DEEPSEEK_REASONING_MESSAGE = "The `reasoning_content` in the thinking mode must be passed back to the API."

TOOL_CALL_SHAPES = ("openai", "one_chunk", "same_index", "several_in_one_chunk", "empty_continuation_ids",
                    "interleaved")


def thinking_on(body: Mapping[str, Any]) -> bool:
    """DeepSeek V4 thinks unless `thinking: {type: disabled}`; other models only when it is enabled."""
    thinking = body.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, Mapping) else None
    if kind in ("enabled", "disabled"):
        return kind == "enabled"
    return "deepseek" in str(body.get("model") or "").lower()


def _pairing_problem(messages: Sequence[Any]) -> str | None:
    pending: list[str] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            return f"messages[{i}] must be an object"
        role = msg.get("role")
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if call_id not in pending:
                return (f"Invalid parameter: messages[{i}] with role 'tool' must be a response to a preceding "
                        f"message with 'tool_calls' (tool_call_id {call_id!r}).")
            pending.remove(call_id)
            continue
        if pending:
            return ("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                    f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}")
        if role == "assistant":
            calls = msg.get("tool_calls") or []
            pending = [str(c.get("id")) for c in calls if isinstance(c, Mapping)]
            if any(not c.get("id") for c in calls if isinstance(c, Mapping)):
                return f"messages[{i}].tool_calls: every tool call needs an id"
    if pending:
        return ("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}")
    return None


def strict_problem(body: Mapping[str, Any]) -> tuple[int, str] | None:
    """(status, provider message) when a strict provider would refuse `body`; None when it is valid."""
    unknown = sorted(set(body) - KNOWN_PARAMS)
    if unknown:
        return 400, f"Unrecognized request argument supplied: {', '.join(unknown)}"
    messages = body.get("messages") or []
    problem = _pairing_problem(messages)
    if problem:
        return 400, problem
    if thinking_on(body):
        for msg in messages:
            if isinstance(msg, Mapping) and msg.get("role") == "assistant" and msg.get("tool_calls"):
                reasoning = msg.get("reasoning_content")
                if not (isinstance(reasoning, str) and reasoning):
                    return 400, DEEPSEEK_REASONING_MESSAGE
    return None


def _pieces(text: str, n: int) -> list[str]:
    if not text:
        return [""]
    size = max(1, -(-len(text) // n))
    return [text[i:i + size] for i in range(0, len(text), size)]


def tool_call_deltas(calls: Sequence[Mapping[str, Any]], shape: str, pieces: int = 3) -> Iterator[dict[str, Any]]:
    """`delta` objects carrying `calls` ({id, name, arguments: str}) in one of `TOOL_CALL_SHAPES`."""

    def opening(index: int, call: Mapping[str, Any], arguments: str = "") -> dict[str, Any]:
        return {"index": index, "id": call["id"], "type": "function",
                "function": {"name": call["name"], "arguments": arguments}}

    if shape == "openai":  # name first, then the arguments in pieces, one call after the other
        for index, call in enumerate(calls):
            yield {"content": None, "tool_calls": [opening(index, call)]}
            for piece in _pieces(call["arguments"], pieces):
                yield {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
    elif shape == "one_chunk":  # complete arguments in the opening chunk (Gemini's and many proxies')
        for index, call in enumerate(calls):
            yield {"content": None, "tool_calls": [opening(index, call, call["arguments"])]}
    elif shape == "same_index":  # Ollama: every call complete, every one at index 0 (ollama#15457)
        for call in calls:
            yield {"content": None, "tool_calls": [opening(0, call, call["arguments"])]}
    elif shape == "several_in_one_chunk":
        yield {"content": None, "tool_calls": [opening(i, c, c["arguments"]) for i, c in enumerate(calls)]}
    elif shape == "empty_continuation_ids":  # Qwen / DashScope: id "" and name "" after the first chunk
        for index, call in enumerate(calls):
            yield {"content": None, "tool_calls": [opening(index, call)]}
            for piece in _pieces(call["arguments"], pieces):
                yield {"tool_calls": [{"index": index, "id": "", "type": "function",
                                       "function": {"name": "", "arguments": piece}}]}
    elif shape == "interleaved":  # all openings, then argument pieces alternating between the calls
        for index, call in enumerate(calls):
            yield {"content": None, "tool_calls": [opening(index, call)]}
        split = [_pieces(c["arguments"], pieces) for c in calls]
        for n in range(max((len(p) for p in split), default=0)):
            for index, parts in enumerate(split):
                if n < len(parts):
                    yield {"tool_calls": [{"index": index, "function": {"arguments": parts[n]}}]}
    else:
        raise ValueError(f"unknown tool_call_shape {shape!r} (known: {', '.join(TOOL_CALL_SHAPES)})")
