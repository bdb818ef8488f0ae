"""`llm.client.stream_chat` through the real LiteLLM path against the fake LLM: the message folded
from the stream equals what LiteLLM's own `stream_chunk_builder` makes of the same chunks."""

from __future__ import annotations

from typing import Any

import litellm
import pytest

from tests.e2e.conftest import FAKE_KEY_ENV
from zcbot_core.llm import client as llm_client
from zcbot_core.llm.assemble import StreamAssembler
from zcbot_core.llm.client import stream_chat
from zcbot_core.llm.profiles import Pricing, Profile
from zcbot_core.testing.fake_llm import FakeLLM

TOOLS = [{"type": "function", "function": {"name": name, "description": name,
                                           "parameters": {"type": "object", "properties": {}}}}
         for name in ("get_weather", "get_local_time")]

CASES: list[tuple[str, list[dict[str, Any]]]] = [
    ("text", [{"text": "Hello, wörld ✓\nsecond line"}]),
    ("reasoning", [{"reasoning": "think first, carefully", "text": "0.05"}]),
    ("one_tool", [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}]),
    ("parallel_tools", [{"text": "checking", "tool_calls": [
        {"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}},
        {"name": "get_local_time", "arguments": {"timezone": "Asia/Tokyo"}}]}]),
    ("empty", [{"text": ""}]),
]


def profile(fake: FakeLLM, pricing: Pricing | None = None, model: str = "openai/fake-model") -> Profile:
    return Profile(name="fake", model=model, api_base=fake.base_url, api_key_env=FAKE_KEY_ENV, pricing=pricing)


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> FakeLLM:
    monkeypatch.setenv(FAKE_KEY_ENV, "sk-fake")
    llm = FakeLLM()
    await llm.start()
    yield llm
    await llm.stop()


def reference(chunks: list[Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
    built = litellm.stream_chunk_builder(chunks, messages=messages).choices[0].message
    out: dict[str, Any] = {"role": "assistant", "content": built.content or ""}
    if getattr(built, "reasoning_content", None):
        out["reasoning_content"] = built.reasoning_content
    if built.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.function.name, "arguments": c.function.arguments}}
                             for c in built.tool_calls]
    return out


@pytest.mark.parametrize(("key", "turns"), CASES, ids=[c[0] for c in CASES])
async def test_folded_message_equals_litellms_builder(fake: FakeLLM, key: str, turns: list[dict[str, Any]]) -> None:
    fake.script(f"KEY-{key}", turns)
    messages = [{"role": "user", "content": f"go KEY-{key}"}]
    response = await litellm.acompletion(model="openai/fake-model", api_base=fake.base_url, api_key="sk-fake",
                                         messages=messages, tools=TOOLS, stream=True,
                                         stream_options={"include_usage": True})
    chunks = [chunk async for chunk in response]
    assembler = StreamAssembler()
    for chunk in chunks:
        assembler.add(chunk)
    assert assembler.message() == reference(chunks, messages)
    assert assembler.usage is not None and assembler.usage.prompt_tokens > 0


async def test_stream_chat_streams_deltas_and_prices_usage(fake: FakeLLM) -> None:
    fake.script("KEY-price", [{"reasoning": "hmm", "text": "the answer", "usage": {
        "prompt_tokens": 1000, "completion_tokens": 500, "cached_tokens": 400}}])
    texts: list[str] = []
    thoughts: list[str] = []

    async def on_text(delta: str) -> None:
        texts.append(delta)

    async def on_reasoning(delta: str) -> None:
        thoughts.append(delta)

    result = await stream_chat(profile(fake, Pricing(1.0, 2.0, 0.5)), [{"role": "user", "content": "KEY-price"}],
                               None, on_text, on_reasoning)
    assert "".join(texts) == "the answer" and "".join(thoughts) == "hmm" and len(texts) > 1
    assert result.message == {"role": "assistant", "content": "the answer", "reasoning_content": "hmm"}
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.cached_tokens) == (1000, 500, 400)
    assert result.cost_usd == pytest.approx((600 * 1.0 + 400 * 0.5 + 500 * 2.0) / 1e6)
    assert result.first_token_at is not None


async def test_a_stream_without_usage_is_estimated(fake: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """A provider that ignores stream_options sends no usage chunk: tokens are estimated, not zero."""
    original = llm_client.call_kwargs

    def without_usage(*args: Any) -> dict[str, Any]:
        kwargs = original(*args)
        kwargs.pop("stream_options")
        return kwargs

    monkeypatch.setattr(llm_client, "call_kwargs", without_usage)
    fake.script("KEY-nousage", [{"text": "a reply of several words"}])
    result = await stream_chat(profile(fake, Pricing(1.0, 2.0)), [{"role": "user", "content": "KEY-nousage please"}],
                               None, _ignore, _ignore)
    assert result.message["content"] == "a reply of several words"
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0
    assert result.cost_usd > 0


async def test_an_unknown_model_is_registered_once_with_the_profiles_facts(fake: FakeLLM) -> None:
    model = "openai/zcbot-test-unlisted-model"
    fake.script("KEY-reg", [{"text": "ok"}])
    result = await stream_chat(profile(fake, Pricing(3.0, 6.0), model=model), [{"role": "user", "content": "KEY-reg"}],
                               None, _ignore, _ignore)
    assert result.message["content"] == "ok"
    info = litellm.get_model_info(model)
    assert info["input_cost_per_token"] == pytest.approx(3e-6) and info["output_cost_per_token"] == pytest.approx(6e-6)
    assert model in llm_client._REGISTERED  # noqa: SLF001 - registered once, not per call


async def _ignore(_: str) -> None:
    return None
