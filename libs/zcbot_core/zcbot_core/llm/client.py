"""One streaming LLM call through LiteLLM, with the profile's features switched on.

The call streams text and reasoning deltas to callbacks as they arrive and rebuilds the full
assistant message with `litellm.stream_chunk_builder`. Cancelling the awaiting task closes the HTTP
stream at once (the caller races it against the run's cancel token).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import litellm
import openai

from zcbot_core.llm.profiles import Profile

litellm.suppress_debug_info = True
litellm.drop_params = True
litellm.telemetry = False

DeltaCallback = Callable[[str], Awaitable[None]]


class LlmCallError(Exception):
    """The provider failed (HTTP error, timeout, malformed stream): the run ends with a clear error."""


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


@dataclass
class LlmResult:
    message: dict[str, Any]
    usage: Usage
    cost_usd: float
    first_token_at: float | None
    duration: float


def _cached_tokens(usage: Any) -> int:
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    if not cached:
        cached = getattr(usage, "prompt_cache_hit_tokens", None) or getattr(usage, "cache_read_input_tokens", None)
    return int(cached or 0)


def call_kwargs(profile: Profile, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": profile.model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": profile.max_output,
        "api_key": profile.api_key(),
    }
    if profile.api_base:
        kwargs["api_base"] = profile.api_base
    if profile.temperature is not None:
        kwargs["temperature"] = profile.temperature
    if tools:
        kwargs["tools"] = tools
        if profile.parallel_tools:
            kwargs["parallel_tool_calls"] = True
    if profile.reasoning_effort:
        kwargs["reasoning_effort"] = profile.reasoning_effort
    if profile.prompt_caching:
        # Anthropic caches up to the marked blocks: the system prompt and the newest message.
        kwargs["cache_control_injection_points"] = [{"location": "message", "role": "system"},
                                                    {"location": "message", "index": -1}]
    return kwargs


def _message_dict(built: Any) -> dict[str, Any]:
    choice = built.choices[0].message
    message: dict[str, Any] = {"role": "assistant", "content": choice.content or ""}
    reasoning = getattr(choice, "reasoning_content", None)
    if reasoning:
        message["reasoning_content"] = reasoning
    if choice.tool_calls:
        message["tool_calls"] = [
            {
                "id": tc.id,
                "type": "function",
                "function": {"name": tc.function.name, "arguments": tc.function.arguments or "{}"},
            }
            for tc in choice.tool_calls
        ]
    return message


def compute_cost(profile: Profile, usage: Usage, built: Any | None) -> float:
    if profile.pricing is not None:
        return profile.pricing.cost(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens)
    try:
        return float(litellm.completion_cost(completion_response=built)) if built is not None else 0.0
    except Exception:  # a model unknown to LiteLLM's local cost map costs what we cannot know
        return 0.0


async def stream_chat(
    profile: Profile,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    on_text: DeltaCallback,
    on_reasoning: DeltaCallback,
    timeout: float = 600.0,
) -> LlmResult:
    kwargs = call_kwargs(profile, messages, tools)
    started = time.monotonic()
    first: float | None = None
    chunks: list[Any] = []
    try:
        response = await litellm.acompletion(timeout=timeout, **kwargs)
        async for chunk in response:
            chunks.append(chunk)
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            reasoning = getattr(delta, "reasoning_content", None)
            if reasoning:
                first = first or time.monotonic()
                await on_reasoning(reasoning)
            if delta.content:
                first = first or time.monotonic()
                await on_text(delta.content)
            if first is None and getattr(delta, "tool_calls", None):
                first = time.monotonic()
    except openai.APIStatusError as exc:
        raise LlmCallError(f"the model provider returned an error: {exc.__class__.__name__}: {_short(exc)}") from exc
    except (openai.OpenAIError, httpx.HTTPError, TimeoutError) as exc:
        raise LlmCallError(f"the model call failed: {exc.__class__.__name__}: {_short(exc)}") from exc
    if not chunks:
        raise LlmCallError("the model returned an empty stream")
    built = litellm.stream_chunk_builder(chunks, messages=messages)
    if built is None or not built.choices:
        raise LlmCallError("the model stream could not be assembled")
    raw_usage = getattr(built, "usage", None)
    usage = Usage(
        prompt_tokens=int(getattr(raw_usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(raw_usage, "completion_tokens", 0) or 0),
        cached_tokens=_cached_tokens(raw_usage) if raw_usage is not None else 0,
    )
    return LlmResult(
        message=_message_dict(built),
        usage=usage,
        cost_usd=compute_cost(profile, usage, built),
        first_token_at=first,
        duration=time.monotonic() - started,
    )


def _short(exc: Exception, limit: int = 300) -> str:
    text = str(exc).replace("\n", " ")
    return text[:limit]
