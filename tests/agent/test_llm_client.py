"""`llm.client.stream_chat` through the real LiteLLM path against the fake LLM: the message folded
from the stream equals what LiteLLM's own `stream_chunk_builder` makes of the same chunks."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import litellm
import pytest
from litellm.integrations.custom_logger import CustomLogger
from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper

from tests.helpers.stack import FAKE_KEY_ENV
from zcbot_core.llm import client as llm_client
from zcbot_core.llm import lean as llm_lean
from zcbot_core.llm.assemble import StreamAssembler, chunk_field
from zcbot_core.llm.client import LlmCallError, stream_chat
from zcbot_core.llm.profiles import Pricing, Profile
from zcbot_fakellm import FakeLLM

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


CHUNK_FIELDS = ["usage", "choices", "id", "model", "system_fingerprint", "provider_specific_fields", "no_such_field"]
DELTA_FIELDS = ["content", "reasoning_content", "tool_calls", "role", "function_call", "audio",
                "provider_specific_fields", "thinking_blocks", "no_such_field"]


@pytest.mark.parametrize(("key", "turns"), CASES, ids=[c[0] for c in CASES])
async def test_chunk_field_reads_what_getattr_reads(fake: FakeLLM, key: str, turns: list[dict[str, Any]]) -> None:
    """The assembler's fast field access agrees with `getattr` on every chunk LiteLLM gives, through its
    stream wrapper and straight from its parser."""
    fake.script(f"KEY-{key}", turns + turns)
    messages = [{"role": "user", "content": f"go KEY-{key}"}]
    chunks: list[Any] = []
    for lean in (False, True):
        response = await litellm.acompletion(model="openai/fake-model", api_base=fake.base_url, api_key="sk-fake",
                                             messages=messages, tools=TOOLS, stream=True,
                                             stream_options={"include_usage": True})
        parsed = llm_client.lean.parsed_stream(response) if lean else None
        assert (parsed is not None) == lean
        chunks += [chunk async for chunk in (llm_client.lean.lean_chunks(parsed) if lean else response)]
        if lean:
            await llm_client.lean.close(response)
    assert chunks
    for chunk in chunks:
        for name in CHUNK_FIELDS:
            assert chunk_field(chunk, name) == getattr(chunk, name, None), name
        for choice in chunk.choices:
            assert chunk_field(choice, "delta") is getattr(choice, "delta", None)
            for name in DELTA_FIELDS:
                assert chunk_field(choice.delta, name) == getattr(choice.delta, name, None), name


async def test_stream_chat_streams_deltas_and_prices_usage(fake: FakeLLM) -> None:
    fake.script("KEY-price", [{"reasoning": "hmm", "text": "the answer", "usage": {
        "prompt_tokens": 1000, "completion_tokens": 500, "cached_tokens": 400}}])
    result, texts, thoughts = await _collect(fake, "KEY-price", lean_stream=True)
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


# -- the lean path (llm/lean.py): LiteLLM's parsed stream read without its stream wrapper -------------------

LEAN_CASES = [*CASES, ("usage", [{"reasoning": "hmm", "text": "priced", "usage": {
    "prompt_tokens": 1000, "completion_tokens": 500, "cached_tokens": 400}}])]


async def _collect(fake: FakeLLM, key: str, *, lean_stream: bool, model: str = "openai/fake-model",
                   timeout: float = 600.0) -> tuple[Any, list[str], list[str]]:
    texts: list[str] = []
    thoughts: list[str] = []

    async def on_text(delta: str) -> None:
        texts.append(delta)

    async def on_reasoning(delta: str) -> None:
        thoughts.append(delta)

    chosen = dataclasses.replace(profile(fake, Pricing(1.0, 2.0, 0.5), model=model), lean_stream=lean_stream)
    result = await stream_chat(chosen, [{"role": "user", "content": f"go {key}"}], TOOLS, on_text, on_reasoning,
                               timeout=timeout)
    return result, texts, thoughts


@pytest.mark.parametrize(("key", "turns"), LEAN_CASES, ids=[c[0] for c in LEAN_CASES])
async def test_lean_and_wrapper_paths_give_the_same_result(fake: FakeLLM, key: str,
                                                           turns: list[dict[str, Any]]) -> None:
    turns = [{**turn, "tool_calls": [{**call, "id": f"call_{n}"} for n, call in enumerate(turn["tool_calls"])]}
             if "tool_calls" in turn else turn for turn in turns]  # the same ids on both paths
    fake.script(f"LEAN-{key}", turns)
    fake.script(f"WRAP-{key}", turns)
    lean_result, lean_texts, lean_thoughts = await _collect(fake, f"LEAN-{key}", lean_stream=True)
    wrap_result, wrap_texts, wrap_thoughts = await _collect(fake, f"WRAP-{key}", lean_stream=False)
    assert lean_result.message == wrap_result.message
    assert lean_result.usage == wrap_result.usage and lean_result.usage.prompt_tokens > 0
    assert lean_result.cost_usd == pytest.approx(wrap_result.cost_usd) and lean_result.cost_usd > 0
    assert (lean_texts, lean_thoughts) == (wrap_texts, wrap_thoughts)
    assert (lean_result.first_token_at is None) == (wrap_result.first_token_at is None)


@pytest.mark.parametrize("model", ["openai/fake-model", "deepseek/deepseek-chat"])
async def test_the_lean_path_never_enters_the_wrapper(fake: FakeLLM, model: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(self: Any) -> Any:
        raise AssertionError("the stream wrapper was iterated")

    monkeypatch.setattr(CustomStreamWrapper, "__anext__", refuse)
    fake.script("LEAN-only", [{"text": "straight from the parser", "tool_calls": [
        {"name": "get_weather", "arguments": {"city": "Oslo"}}]}])
    result, texts, _ = await _collect(fake, "LEAN-only", lean_stream=True, model=model)
    assert result.message["content"] == "straight from the parser" == "".join(texts)
    assert result.message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    await _no_open_responses(fake)


async def test_a_registered_litellm_callback_keeps_the_wrapper(fake: FakeLLM,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Whoever registers a LiteLLM callback (cost tracking, tracing) still sees every call."""
    seen: list[Any] = []

    class Recorder(CustomLogger):
        async def async_log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any,
                                          end_time: Any) -> None:
            seen.append(response_obj)

    # LiteLLM copies `callbacks` into its other callback lists on the first call: each list is this
    # test's own, so nothing stays registered for the tests after it (a leak that turned the lean
    # path off for the rest of the run).
    for name in llm_lean._CALLBACK_LISTS:
        monkeypatch.setattr(litellm, name, list(getattr(litellm, name, None) or []))
    monkeypatch.setattr(litellm, "callbacks", [Recorder()])
    fake.script("LEAN-cb", [{"text": "logged"}])
    result, _, _ = await _collect(fake, "LEAN-cb", lean_stream=True)
    assert result.message["content"] == "logged"
    for _ in range(200):
        if seen:
            break
        await asyncio.sleep(0.01)
    assert seen and seen[0].choices[0].message.content == "logged"


STREAM_FAILURES = [
    ("stream_error", {"text": "partial answer", "stream_error": {"message": "engine overloaded", "code": 503}},
     "engine overloaded"),
    ("hang", {"text": "partial", "hang": True}, "timed out"),
    ("cut_off", {"text": "half an ans", "cut_off": True}, "finish"),
]


@pytest.mark.parametrize("lean_stream", [True, False], ids=["lean", "wrapper"])
@pytest.mark.parametrize(("case", "turn", "says"), STREAM_FAILURES, ids=[c[0] for c in STREAM_FAILURES])
async def test_a_failing_stream_is_a_clear_error(fake: FakeLLM, lean_stream: bool, case: str,
                                                 turn: dict[str, Any], says: str) -> None:
    fake.script(f"FAIL-{case}-{lean_stream}", [turn])
    with pytest.raises(LlmCallError) as info:
        await _collect(fake, f"FAIL-{case}-{lean_stream}", lean_stream=lean_stream, timeout=0.5)
    assert says in str(info.value).lower()
    await _no_open_responses(fake)


async def test_a_malformed_line_is_skipped_on_the_lean_path(fake: FakeLLM) -> None:
    fake.script("LEAN-malformed", [{"chunks": ["a", "b", "c", "d"], "malformed": True}])
    result, texts, _ = await _collect(fake, "LEAN-malformed", lean_stream=True)
    assert result.message["content"] == "abcd" == "".join(texts)


async def test_cancelling_a_lean_stream_closes_it(fake: FakeLLM) -> None:
    fake.script("LEAN-slow", [{"chunks": ["x"] * 50, "chunk_delay": 0.05}])
    call = asyncio.create_task(_collect(fake, "LEAN-slow", lean_stream=True))
    for _ in range(200):
        if fake.active_responses:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await _no_open_responses(fake)


async def _no_open_responses(fake: FakeLLM) -> None:
    for _ in range(200):
        if fake.active_responses == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{fake.active_responses} responses still open on the fake LLM")
