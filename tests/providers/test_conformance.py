"""Provider conformance: recorded wire formats, served byte for byte through the real LiteLLM path.

Each recorded stream (`streams/NAME.sse`, its source in `streams/NAME.source.md`) is replayed by the
fake LLM as the response body, whole and in 5-byte TCP writes (which cut multi-byte UTF-8 characters
and JSON escapes across reads), and read by `llm.client.stream_chat` on both stream paths (lean:
LiteLLM's parser read directly; wrapper: LiteLLM's `CustomStreamWrapper`). The folded message,
usage and finish reason must be what the provider meant; a stream that failed must be an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.helpers.stack import FAKE_KEY_ENV
from tests.providers.conftest import recorded
from zcbot_core.llm.client import LlmCallError, stream_chat
from zcbot_core.llm.profiles import Profile
from zcbot_fakellm import FakeLLM

WRITE_BYTES = 5


@dataclass
class Case:
    name: str
    model: str
    message: dict[str, Any] | None = None  # expected assistant message (None: an error is expected)
    error: str = ""
    finish: str = "stop"
    usage: tuple[int, int, int] | None = None  # prompt, completion, cached
    anthropic: bool = False
    deltas: list[str] = field(default_factory=list)


def call(id_: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


OPENAI_ARGS = json.dumps({"path": "a.txt", "content": "say \"hi\"\n\\ok"})

CASES = [
    Case("deepseek_v4_tool_empty_reasoning", "deepseek/deepseek-v4-flash",
         {"role": "assistant", "content": "",
          "tool_calls": [call("call_00_Qm3rZ8kP1vXyT5wN2aLc", "read", '{"path":"notes/计划.md"}')]},
         finish="tool_calls", usage=(812, 31, 768)),
    Case("deepseek_v4_thinking_text", "deepseek/deepseek-v4-flash",
         {"role": "assistant", "content": "球的价格是 0.05美元（5 美分）。",
          "reasoning_content": "用户问的是一个简单的算术：0.05 美元。"}, usage=(57, 48, 0)),
    Case("deepseek_v4_nonthinking_tool", "deepseek/deepseek-v4-flash",
         {"role": "assistant", "content": "",
          "tool_calls": [call("call_00_Hk2pW9sQ4mZbV7xR1nYe", "get_weather", '{"city":"Paris"}')]},
         finish="tool_calls", usage=(120, 14, 64)),
    Case("deepseek_insufficient_system_resource", "deepseek/deepseek-v4-flash", error="insufficient system resources"),
    Case("openai_parallel_interleaved", "openai/gpt-4.1",
         {"role": "assistant", "content": "",
          "tool_calls": [call("call_Ab12Cd34Ef56Gh78Ij90Kl12", "write", OPENAI_ARGS),
                         call("call_Mn34Op56Qr78St90Uv12Wx34", "get_local_time", '{"timezone": "Asia/Tokyo"}')]},
         finish="tool_calls", usage=(310, 52, 256)),
    Case("qwen_dashscope_empty_ids", "openai/qwen-plus",
         {"role": "assistant", "content": "",
          "tool_calls": [call("call_ecc41296dccc47baa01567", "get_current_weather", '{"location": "Hangzhou"}')]},
         finish="tool_calls", usage=(238, 19, 0)),
    Case("vllm_reasoning_field", "openai/Qwen/Qwen3-8B",
         {"role": "assistant", "content": "Hello! 👋", "reasoning_content": "The user wants a short greeting."},
         usage=(14, 26, 0)),
    Case("ollama_same_index", "openai/qwen2.5-coder:7b",
         {"role": "assistant", "content": "",
          "tool_calls": [call("call_x3k9d2qa", "file_write", '{"content":"print(\\"hello\\")","filePath":"hello.py"}'),
                         call("call_7mzp0v4e", "file_write", '{"content":"print(\\"world\\")","filePath":"world.py"}')]},
         finish="tool_calls"),
    Case("openrouter_midstream_error", "openai/deepseek/deepseek-v4-flash", error="Provider disconnected unexpectedly"),
    Case("vllm_midstream_error", "openai/Qwen/Qwen3-8B", error="longer than the maximum model length"),
    Case("vllm_midstream_error_legacy", "openai/Qwen/Qwen3-8B", error="CUDA out of memory"),
    Case("anthropic_thinking_tool_use", "anthropic/claude-sonnet-4-5",
         {"role": "assistant", "content": "Okay, let's check the weather for San Francisco, CA:",
          "reasoning_content": "I need the weather in San Francisco, so I call get_weather.",
          "thinking_blocks": [{"type": "thinking", "thinking": "I need the weather in San Francisco, so I call get_weather.",
                               "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}],
          "tool_calls": [call("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather", '{"location": "San Francisco, CA"}')]},
         finish="tool_calls", usage=(2520, 89, 2048), anthropic=True),
]


def profile_for(fake: FakeLLM, case: Case, lean_stream: bool) -> Profile:
    return Profile(name=f"replay-{case.name}", model=case.model,
                   api_base=fake.root_url if case.anthropic else fake.base_url,
                   api_key_env=FAKE_KEY_ENV, lean_stream=lean_stream, thinking="thinking" in case.name)


def test_split_writes_cut_utf8_characters() -> None:
    """The 5-byte writes really do split multi-byte characters of the CJK and emoji streams."""
    for name in ("deepseek_v4_thinking_text", "vllm_reasoning_field"):
        data = recorded(name)
        cuts = [k for k in range(WRITE_BYTES, len(data), WRITE_BYTES) if data[k] & 0xC0 == 0x80]
        assert cuts, name


@pytest.mark.parametrize("write_bytes", [0, WRITE_BYTES], ids=["whole", "split"])
@pytest.mark.parametrize("lean_stream", [True, False], ids=["lean", "wrapper"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_recorded_stream(replay: FakeLLM, case: Case, lean_stream: bool, write_bytes: int) -> None:
    key = f"REPLAY-{case.name}-{lean_stream}-{write_bytes}"
    replay.script(key, [{"raw": recorded(case.name), "raw_write_bytes": write_bytes,
                         "chunk_delay": 0.0005 if write_bytes else 0.0}])
    texts: list[str] = []
    reasoning: list[str] = []

    async def on_text(delta: str) -> None:
        texts.append(delta)

    async def on_reasoning(delta: str) -> None:
        reasoning.append(delta)

    messages = [{"role": "user", "content": f"{key} go"}]
    prof = profile_for(replay, case, lean_stream)
    if case.message is None:
        with pytest.raises(LlmCallError) as caught:
            await stream_chat(prof, messages, None, on_text, on_reasoning, timeout=30)
        assert case.error in str(caught.value)
        return
    result = await stream_chat(prof, messages, None, on_text, on_reasoning, timeout=30)
    assert result.message == case.message
    assert result.finish_reason == case.finish
    assert "".join(texts) == case.message["content"]
    assert "".join(reasoning) == case.message.get("reasoning_content", "")
    if case.usage is not None:
        assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.cached_tokens) == case.usage
    assert replay.rejected == []
