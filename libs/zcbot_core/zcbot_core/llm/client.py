"""One streaming LLM call through LiteLLM, with the profile's features switched on.

The call streams text and reasoning deltas to callbacks as they arrive and folds them into the full
assistant message as they come (`llm.assemble`). Cancelling the awaiting task closes the HTTP
stream at once (the caller races it against the run's cancel token).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

# OpenAI-compatible providers (DeepSeek, OpenAI, local servers) through LiteLLM's own HTTP handler and
# chunk parser instead of the OpenAI SDK's: the SDK builds a pydantic chunk per streamed chunk that
# LiteLLM then wraps again (434 -> 310 µs of CPU per chunk here; docs/performance.md). LiteLLM reads
# the switch from the environment on each call; set it to false to go back to the SDK path.
os.environ.setdefault("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", "true")
# No LiteLLM logging callback is registered here, yet after every call LiteLLM copies the whole request
# history to truncate base64 images in its logging payload (~1.3 ms of CPU per call at 600 messages).
# 0 switches that copy off (read once, when litellm is imported: this module is its only importer).
os.environ.setdefault("MAX_BASE64_LENGTH_FOR_LOGGING", "0")

import httpx  # noqa: E402
import litellm  # noqa: E402
import openai  # noqa: E402

from zcbot_core.agent.tokens import estimate_tokens, text_tokens
from zcbot_core.errors import ZcbotError
from zcbot_core.llm import lean, tokenizers
from zcbot_core.llm.assemble import StreamAssembler
from zcbot_core.llm.profiles import Profile
from zcbot_core.llm.retry import RetryPolicy, retryable

litellm.suppress_debug_info = True
litellm.drop_params = True
litellm.telemetry = False
tokenizers.quiet_tokenizers()  # ~100 MiB LiteLLM would load for counts we never use (llm/tokenizers.py)

DeltaCallback = Callable[[str], Awaitable[None]]
RetryCallback = Callable[[str, float, int], Awaitable[None]]
"""(why the call failed, seconds until the next attempt, attempt number) before each retry."""

# Finish reasons that LiteLLM maps to "stop" but mean the answer is not complete (lean.StreamWatch).
FAILED_FINISH = {
    "insufficient_system_resource": "the provider stopped the answer: insufficient system resources "
                                    "(DeepSeek's finish_reason insufficient_system_resource)",
    "error": "the provider reported an error in the middle of the answer (finish_reason: error)",
}


class LlmCallError(ZcbotError):
    """The provider failed (HTTP error, timeout, malformed stream): the run ends with a clear error.

    `retry`: (why, Retry-After seconds) when another attempt may succeed (`llm.retry.retryable`)."""

    code = "llm_call"
    http_status = 502

    def __init__(self, message: str, retry: tuple[str, float | None] | None = None) -> None:
        super().__init__(message)
        self.retry = retry


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
    finish_reason: str = "stop"
    """As the provider sent it (not LiteLLM's mapping): stop | tool_calls | length | content_filter | …"""


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
    if profile.model.startswith("deepseek/"):
        # DeepSeek V4 thinks unless told not to: say which, so `thinking: false` really is off (and the
        # reasoning rule of agent/context.py holds either way). LiteLLM passes it on as DeepSeek's own.
        kwargs["thinking"] = {"type": "enabled" if profile.thinking else "disabled"}
    if profile.prompt_caching:
        # Anthropic caches up to the marked blocks: the system prompt and the newest message.
        kwargs["cache_control_injection_points"] = [{"location": "message", "role": "system"},
                                                    {"location": "message", "index": -1}]
    return kwargs


def compute_cost(profile: Profile, usage: Usage) -> float:
    if profile.pricing is not None:
        return profile.pricing.cost(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens)
    try:
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=profile.model, prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
            cache_read_input_tokens=usage.cached_tokens)
        return float(prompt_cost + completion_cost)
    except Exception:  # a model unknown to LiteLLM's local cost map costs what we cannot know
        return 0.0


_REGISTERED: set[str] = set()


def register_model_info(profile: Profile) -> None:
    """Tell LiteLLM what the profile knows about a model missing from its local map, once per model.

    LiteLLM looks a model's info up several times per call (cost, logging); for a model it does
    not know, each lookup walks its fallback generalizations, ~4 ms per call (docs/performance.md).
    Models in the map keep LiteLLM's own data.
    """
    if profile.model in _REGISTERED:
        return
    _REGISTERED.add(profile.model)
    try:
        litellm.get_model_info(profile.model)
        return
    except Exception:
        pass
    try:
        _, provider, _, _ = litellm.get_llm_provider(profile.model)
    except Exception:
        return
    pricing = profile.pricing
    input_cost = (pricing.input_per_mtok / 1e6) if pricing else 0.0
    cached = pricing.cached_input_per_mtok if pricing and pricing.cached_input_per_mtok is not None else None
    info: dict[str, Any] = {
        "litellm_provider": provider, "mode": "chat",
        "max_input_tokens": profile.max_context, "max_output_tokens": profile.max_output,
        "max_tokens": profile.max_output,
        "input_cost_per_token": input_cost,
        "output_cost_per_token": (pricing.output_per_mtok / 1e6) if pricing else 0.0,
        # as `Pricing.cost` prices them (and stated, so LiteLLM does not warn that it assumes 0)
        "cache_read_input_token_cost": (cached / 1e6) if cached is not None else input_cost,
        "cache_creation_input_token_cost": input_cost,
    }
    try:
        litellm.register_model({profile.model: info})
    except Exception:  # registration is an optimisation only
        pass


def _usage(raw_usage: Any, messages: list[dict[str, Any]], message: dict[str, Any]) -> Usage:
    if raw_usage is not None:
        return Usage(
            prompt_tokens=int(getattr(raw_usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(raw_usage, "completion_tokens", 0) or 0),
            cached_tokens=_cached_tokens(raw_usage),
        )
    # The provider sent no usage (it ignored stream_options): estimate it without a tokenizer
    # (`agent.tokens`; LiteLLM's token counter is off, llm/tokenizers.py), so the call is not free.
    completion = (message.get("content") or "") + (message.get("reasoning_content") or "") + "".join(
        c["function"]["arguments"] for c in message.get("tool_calls", []))
    return Usage(prompt_tokens=estimate_tokens(messages), completion_tokens=int(text_tokens(completion)))


async def stream_chat(
    profile: Profile,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    on_text: DeltaCallback,
    on_reasoning: DeltaCallback,
    timeout: float = 600.0,
    retry: RetryPolicy | None = None,
    on_retry: RetryCallback | None = None,
) -> LlmResult:
    """One model call; a failure `llm.retry` deems transient is tried again (after a backoff, or the
    provider's `Retry-After`) up to `retry.retries` times, but only while nothing of the call has
    reached `on_text`/`on_reasoning`."""
    policy = retry or RetryPolicy(retries=0)
    attempt = 0
    while True:
        shown = [False]

        async def text(delta: str) -> None:
            shown[0] = True
            await on_text(delta)

        async def reasoning(delta: str) -> None:
            shown[0] = True
            await on_reasoning(delta)

        try:
            return await _stream_once(profile, messages, tools, text, reasoning, timeout)
        except LlmCallError as exc:
            if exc.retry is None or shown[0]:
                raise
            attempt += 1
            wait = policy.delay(attempt, exc.retry[1])
            if wait is None:
                raise
            if on_retry is not None:
                await on_retry(exc.retry[0], wait, attempt)
            await asyncio.sleep(wait)


async def _stream_once(
    profile: Profile,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    on_text: DeltaCallback,
    on_reasoning: DeltaCallback,
    timeout: float,
) -> LlmResult:
    kwargs = call_kwargs(profile, messages, tools)
    register_model_info(profile)
    started = time.monotonic()
    first: float | None = None
    assembler = StreamAssembler()
    parsed: Any = None
    watch = lean.StreamWatch()
    try:
        response = await litellm.acompletion(timeout=timeout, **kwargs)
        watch = lean.StreamWatch.watch(response)
        parsed = lean.parsed_stream(response) if profile.lean_stream else None
        async for chunk in (lean.lean_chunks(parsed) if parsed is not None else response):
            delta = assembler.add(chunk)
            if delta is None:
                continue
            if delta.reasoning:
                first = first or time.monotonic()
                await on_reasoning(delta.reasoning)
            if delta.content:
                first = first or time.monotonic()
                await on_text(delta.content)
            if first is None and delta.has_tool_calls:
                first = time.monotonic()
    except openai.APIStatusError as exc:
        raise LlmCallError(f"the model provider returned an error: {exc.__class__.__name__}: {_short(exc)}",
                           retryable(exc)) from exc
    except (openai.OpenAIError, httpx.HTTPError, TimeoutError) as exc:
        raise LlmCallError(f"the model call failed: {exc.__class__.__name__}: {_short(exc)}", retryable(exc)) from exc
    except lean.ProviderStreamError as exc:
        cause = exc.__cause__
        raise LlmCallError(f"the model call failed: {_short(exc)}",
                           retryable(cause) if cause is not None else ("the stream broke off", None)) from exc
    finally:
        if parsed is not None:
            await lean.close(response)
    if not assembler.chunks:
        raise LlmCallError("the model returned an empty stream", ("an empty stream", None))
    finish = watch.finish_reason or assembler.finish_reason or "stop"
    if finish in FAILED_FINISH:
        raise LlmCallError(FAILED_FINISH[finish], (f"finish_reason {finish}", None))
    message = assembler.message()
    usage = _usage(assembler.usage, messages, message)
    return LlmResult(
        message=message,
        usage=usage,
        cost_usd=compute_cost(profile, usage),
        first_token_at=first,
        duration=time.monotonic() - started,
        finish_reason=finish,
    )


def _short(exc: Exception, limit: int = 300) -> str:
    text = str(exc).replace("\n", " ")
    return text[:limit]
