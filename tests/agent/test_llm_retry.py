"""`llm.retry`: which failures are retried, after how long; and `stream_chat` retrying through LiteLLM."""

from __future__ import annotations

import email.utils
import random

import httpx
import openai
import pytest

from tests.agent.test_llm_client import fake  # noqa: F401  (fixture: a fake LLM)
from tests.helpers.stack import FAKE_KEY_ENV
from zcbot_core.llm.client import LlmCallError, stream_chat
from zcbot_core.llm.profiles import Profile
from zcbot_core.llm.retry import RetryPolicy, retry_after_seconds, retryable
from zcbot_fakellm import FakeLLM


@pytest.mark.parametrize(("headers", "seconds"), [
    ({"Retry-After": "3"}, 3.0), ({"retry-after": "0.5"}, 0.5), ({"retry-after-ms": "250"}, 0.25),
    ({"Retry-After": email.utils.formatdate(1_000_030, usegmt=True)}, 30.0), ({"Retry-After": "soon"}, None),
    ({}, None), (None, None),
])
def test_retry_after(headers: dict[str, str] | None, seconds: float | None) -> None:
    assert retry_after_seconds(headers, now=1_000_000) == seconds


def test_backoff_doubles_with_jitter_and_is_bounded() -> None:
    policy = RetryPolicy(retries=5, base_seconds=1.0, max_seconds=6.0)
    rng = random.Random(7)
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 6.0), (5, 6.0)]:
        waits = [policy.delay(attempt, None, rng) for _ in range(50)]
        assert all(w is not None and ceiling / 2 <= w <= ceiling for w in waits), (attempt, waits[:3])
    assert policy.delay(6, None, rng) is None
    assert policy.delay(1, 5.0) == 5.0  # the provider's Retry-After, exactly
    assert policy.delay(1, 600.0) is None  # longer than the bound: give up with the error
    assert RetryPolicy(retries=0).delay(1, None) is None


def _status_error(status: int) -> openai.APIStatusError:
    response = httpx.Response(status, request=httpx.Request("POST", "http://x"), headers={"Retry-After": "2"})
    return openai.APIStatusError("boom", response=response, body=None)


@pytest.mark.parametrize(("exc", "why"), [
    (_status_error(429), "HTTP 429"), (_status_error(503), "HTTP 503"), (_status_error(500), "HTTP 500"),
    (_status_error(400), None), (_status_error(401), None), (_status_error(404), None),
    (httpx.ConnectError("refused"), "ConnectError"), (TimeoutError(), "TimeoutError"), (ValueError("x"), None),
])
def test_retryable(exc: BaseException, why: str | None) -> None:
    got = retryable(exc)
    assert (got[0].split(" (")[0] if got else None) == why
    if got and why and why.startswith("HTTP"):
        assert got[1] == 2.0


async def _nothing(_: str) -> None:
    return None


@pytest.mark.parametrize("lean_stream", [True, False], ids=["lean", "wrapper"])
async def test_stream_chat_retries_before_output_only(fake: FakeLLM, lean_stream: bool) -> None:
    prof = Profile(name="f", model="openai/fake-model", api_base=fake.base_url, api_key_env=FAKE_KEY_ENV,
                   lean_stream=lean_stream)
    seen: list[tuple[str, float, int]] = []

    async def on_retry(why: str, wait: float, attempt: int) -> None:
        seen.append((why, wait, attempt))

    fake.script("R-ok", [{"error": {"status": 429, "message": "slow", "headers": {"Retry-After": "0.05"}},
                          "fail_first": 2, "text": "done"}])
    result = await stream_chat(prof, [{"role": "user", "content": f"R-ok {lean_stream}"}], None, _nothing, _nothing,
                               retry=RetryPolicy(retries=3), on_retry=on_retry)
    assert result.message["content"] == "done"
    assert [(w, a) for _, w, a in seen] == [(0.05, 1), (0.05, 2)] and all("HTTP 429" in s[0] for s in seen)

    fake.script("R-out", [{"error": {"status": 503, "message": "busy", "headers": {"Retry-After": "0"}},
                           "fail_first": 9, "text": "never"}])
    seen.clear()
    with pytest.raises(LlmCallError, match="busy"):
        await stream_chat(prof, [{"role": "user", "content": f"R-out {lean_stream}"}], None, _nothing, _nothing,
                          retry=RetryPolicy(retries=2), on_retry=on_retry)
    assert len(seen) == 2

    fake.script("R-400", [{"error": {"status": 400, "message": "bad request"}, "fail_first": 1, "text": "x"}])
    seen.clear()
    with pytest.raises(LlmCallError, match="bad request"):
        await stream_chat(prof, [{"role": "user", "content": f"R-400 {lean_stream}"}], None, _nothing, _nothing,
                          retry=RetryPolicy(retries=2), on_retry=on_retry)
    assert seen == []
