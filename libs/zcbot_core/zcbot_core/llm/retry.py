"""When a failed model call is tried again, and after how long.

DeepSeek's error-code docs (api-docs.deepseek.com/quick_start/error_codes) say to retry a 429 (rate
limit reached) and a 503 (server overloaded) after a wait; OpenAI's and OpenRouter's say the same and
send `Retry-After`. A call is retried only while nothing of it has reached the user: once a delta was
streamed, a second attempt would show the answer twice, so the error ends the run as before.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx
import openai

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 4
    """Attempts after the first; 0 = never retry."""
    base_seconds: float = 1.0
    """The first wait; each next one doubles (full jitter: a random wait up to the doubled value)."""
    max_seconds: float = 60.0
    """No single wait is longer, `Retry-After` included (a longer ask ends the run with the error)."""

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random | None = None) -> float | None:
        """Seconds to wait before retry number `attempt` (1-based), or None: do not retry."""
        if attempt > self.retries:
            return None
        if retry_after is not None:
            return retry_after if retry_after <= self.max_seconds else None
        ceiling = min(self.max_seconds, self.base_seconds * (2 ** (attempt - 1)))
        return (rng or random).uniform(ceiling / 2, ceiling)


def retry_after_seconds(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """`Retry-After` (seconds or an HTTP date) or `retry-after-ms`, in seconds; None when absent."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    if "retry-after-ms" in lowered:
        try:
            return max(float(lowered["retry-after-ms"]) / 1000, 0.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(when - (now if now is not None else time.time()), 0.0)


def _headers(exc: BaseException) -> Mapping[str, str] | None:
    # LiteLLM's own HTTP handler keeps the provider's headers here; the SDK path on `response`
    headers = getattr(exc, "litellm_response_headers", None)
    if headers:
        return headers  # type: ignore[no-any-return]
    response = getattr(exc, "response", None)
    return getattr(response, "headers", None) if isinstance(response, httpx.Response) else None


def retryable(exc: BaseException) -> tuple[str, float | None] | None:
    """(why, Retry-After seconds) when the failure is worth another attempt, else None."""
    status = getattr(exc, "status_code", None)
    if isinstance(exc, openai.APIStatusError) or isinstance(status, int):
        if status in RETRY_STATUSES:
            return f"HTTP {status} ({exc.__class__.__name__})", retry_after_seconds(_headers(exc))
        return None
    if isinstance(exc, (openai.APIConnectionError, httpx.TransportError, TimeoutError)):
        return f"{exc.__class__.__name__}", None
    return None
