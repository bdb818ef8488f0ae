"""The fake LLM server, driven through the real LiteLLM client (no mocks).
Over 400 lines on purpose: one contract (the fake model's, through the real LiteLLM), behaviour by behaviour.

These tests pin both the fake's contract (others script it) and what LiteLLM actually does
with each behaviour, so a LiteLLM upgrade that changes e.g. error mapping shows up here.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import litellm
import litellm.exceptions
import pytest

import zcbot_fakellm
from zcbot_fakellm import (
    EXHAUSTED_TEXT,
    FakeLLM,
    get_requests,
    push_script,
    split_text,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a command",
            "parameters": {
                "type": "object",
                "properties": {"cmd": {"type": "string"}, "timeout": {"type": "integer"}},
                "required": ["cmd"],
            },
        },
    },
]


@pytest.fixture
async def fake() -> AsyncIterator[FakeLLM]:
    server = FakeLLM()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def stream(
    fake_or_url: FakeLLM | str, messages: list[dict[str, Any]], **kwargs: Any
) -> list[Any]:
    """One streamed completion through LiteLLM; returns the raw chunks."""
    base_url = fake_or_url if isinstance(fake_or_url, str) else fake_or_url.base_url
    kwargs.setdefault("tools", TOOLS)
    resp = await litellm.acompletion(
        model="openai/fake-model",
        api_base=base_url,
        api_key="sk-fake",
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},
        **kwargs,
    )
    return [chunk async for chunk in resp]


async def reply(fake: FakeLLM | str, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    """Streamed completion assembled into a ModelResponse the way callers do it."""
    chunks = await stream(fake, messages, **kwargs)
    return litellm.stream_chunk_builder(chunks, messages=messages)


# ---------------------------------------------------------------------------------------


def test_split_text_is_lossless() -> None:
    for text in ["", "a", "Hello world!", "  \n ", "héllo wörld ✓" * 7]:
        for n in (1, 3, 4, 50):
            pieces = split_text(text, n)
            assert "".join(pieces) == text
            assert len(pieces) == min(n, len(text))
            assert all(pieces)


async def test_text_and_reasoning_round_trip(fake: FakeLLM) -> None:
    text = "Hello, world!\nSecond line with ünïcode ✓ and  double  spaces."
    reasoning = "First think about it carefully."
    fake.script("KEY-text", [{"reasoning": reasoning, "text": text}])
    messages = [
        {"role": "system", "content": "You are a bot."},
        {"role": "user", "content": "please KEY-text now"},
    ]
    chunks = await stream(fake, messages)

    # LiteLLM exposes DeepSeek-style reasoning as ``delta.reasoning_content`` per chunk.
    reasoning_deltas = [
        c.choices[0].delta.reasoning_content
        for c in chunks
        if c.choices and getattr(c.choices[0].delta, "reasoning_content", None)
    ]
    assert len(reasoning_deltas) > 1
    assert "".join(reasoning_deltas) == reasoning
    content_deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(content_deltas) == text

    built = litellm.stream_chunk_builder(chunks, messages=messages)
    msg = built.choices[0].message
    assert msg.content == text
    assert msg.reasoning_content == reasoning
    assert built.choices[0].finish_reason == "stop"
    assert built.model == "fake-model"

    # What LiteLLM sent reached the server unchanged.
    (sent,) = fake.requests
    assert sent["messages"] == messages
    assert sent["tools"] == TOOLS
    assert sent["stream"] is True


async def test_explicit_chunks_are_sent_as_is(fake: FakeLLM) -> None:
    fake.script("KEY-chunks", [{"chunks": ["a", "bc", " ", "def"]}])
    chunks = await stream(fake, [{"role": "user", "content": "KEY-chunks"}])
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert deltas == ["a", "bc", " ", "def"]


async def test_two_streamed_tool_calls_round_trip(fake: FakeLLM) -> None:
    fake.script(
        "KEY-tools",
        [
            {
                "text": "Let me look.",
                "tool_calls": [
                    {"name": "read_file", "arguments": {"path": "/tmp/a b.txt"}, "id": "call_fixed"},
                    {"name": "run", "arguments": json.dumps({"cmd": "ls -la", "timeout": 30})},
                ],
            }
        ],
    )
    messages = [{"role": "user", "content": "KEY-tools go"}]
    chunks = await stream(fake, messages)
    tool_chunks = [c for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert len(tool_chunks) > 2  # arguments really arrive in pieces

    built = litellm.stream_chunk_builder(chunks, messages=messages)
    choice = built.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me look."
    calls = choice.message.tool_calls
    assert [c.function.name for c in calls] == ["read_file", "run"]
    assert json.loads(calls[0].function.arguments) == {"path": "/tmp/a b.txt"}
    assert json.loads(calls[1].function.arguments) == {"cmd": "ls -la", "timeout": 30}
    assert calls[0].id == "call_fixed"
    assert calls[1].id.startswith("call_") and calls[1].id != calls[0].id


async def test_turn_selection_follows_history(fake: FakeLLM) -> None:
    fake.script(
        "KEY-turns",
        [
            {"tool_calls": [{"name": "run", "arguments": {"cmd": "echo 1"}, "id": "c1"}]},
            {"text": "second"},
            {"text": "third"},
        ],
    )
    # Content given as a list of parts still matches the key.
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "task KEY-turns"}]}
    ]
    first = await reply(fake, messages)
    assert first.choices[0].message.tool_calls[0].id == "c1"

    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "run", "arguments": '{"cmd": "echo 1"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
    ]
    assert (await reply(fake, messages)).choices[0].message.content == "second"

    # A later user message without the key does not reset the count.
    messages += [{"role": "assistant", "content": "second"}, {"role": "user", "content": "and?"}]
    assert (await reply(fake, messages)).choices[0].message.content == "third"

    messages += [{"role": "assistant", "content": "third"}]
    assert (await reply(fake, messages)).choices[0].message.content == EXHAUSTED_TEXT

    # A new user message carrying the key starts the script over.
    messages += [{"role": "user", "content": "again KEY-turns"}]
    again = await reply(fake, messages)
    assert again.choices[0].message.tool_calls[0].function.name == "run"

    # Unscripted conversations get the echo reply.
    unscripted = await reply(fake, [{"role": "user", "content": "just chatting " + "x" * 300}])
    assert unscripted.choices[0].message.content == "ok: " + ("just chatting " + "x" * 300)[:200]


async def test_error_turns_raise_matching_litellm_exceptions(fake: FakeLLM) -> None:
    fake.script("KEY-500", [{"error": {"status": 500, "message": "boom"}}])
    fake.script("KEY-429", [{"error": {"status": 429, "message": "slow down"}}])
    # max_retries=0: the openai SDK would otherwise retry 5xx/429 twice with backoff.
    with pytest.raises(litellm.InternalServerError, match="boom"):
        await stream(fake, [{"role": "user", "content": "KEY-500"}], max_retries=0)
    with pytest.raises(litellm.RateLimitError, match="slow down"):
        await stream(fake, [{"role": "user", "content": "KEY-429"}], max_retries=0)
    with pytest.raises(litellm.RateLimitError):
        await litellm.acompletion(
            model="openai/fake-model",
            api_base=fake.base_url,
            api_key="sk-fake",
            messages=[{"role": "user", "content": "KEY-429"}],
            max_retries=0,
        )
    assert len(fake.requests) == 3


@pytest.mark.parametrize("litellm_handler", ["false", "true"])
async def test_malformed_chunk_mid_stream(fake: FakeLLM, litellm_handler: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Through the OpenAI SDK, LiteLLM does not skip a non-JSON data line: the JSON error surfaces
    # mid-stream, wrapped as MidStreamFallbackError (a ServiceUnavailableError), after the chunks before
    # it ("ab", "cd": the bad line goes in the middle of the 4 content chunks). LiteLLM's own HTTP
    # handler (the runner's default, `llm/client.py`) skips the line and the stream goes on.
    monkeypatch.setenv("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", litellm_handler)
    fake.script("KEY-bad", [{"text": "abcdefgh", "malformed": True}])
    received: list[Any] = []

    async def read() -> None:
        resp = await litellm.acompletion(
            model="openai/fake-model",
            api_base=fake.base_url,
            api_key="sk-fake",
            messages=[{"role": "user", "content": "KEY-bad"}],
            stream=True,
            max_retries=0,
        )
        async for chunk in resp:
            received.append(chunk)

    text = lambda: "".join(c.choices[0].delta.content or "" for c in received if c.choices)  # noqa: E731
    if litellm_handler == "false":
        with pytest.raises(litellm.exceptions.MidStreamFallbackError) as info:
            await read()
        assert isinstance(info.value, litellm.ServiceUnavailableError)
        assert "Expecting" in str(info.value)  # the json.JSONDecodeError message
        assert text() == "abcd"
    else:
        await read()
        assert text() == "abcdefgh"

    # The server and the connection pool are fine afterwards.
    assert (await reply(fake, [{"role": "user", "content": "next"}])).choices[0].message.content == "ok: next"


async def test_usage_with_cached_tokens(fake: FakeLLM) -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 7, "cached_tokens": 600}
    fake.script("KEY-usage", [{"text": "hi", "usage": usage}])
    messages = [{"role": "user", "content": "KEY-usage"}]
    built = await reply(fake, messages)
    assert built.usage.prompt_tokens == 1000
    assert built.usage.completion_tokens == 7
    assert built.usage.total_tokens == 1007
    assert built.usage.prompt_tokens_details.cached_tokens == 600

    # Non-streamed responses carry it too, including DeepSeek's cache-hit field.
    plain = await litellm.acompletion(
        model="openai/fake-model", api_base=fake.base_url, api_key="sk-fake", messages=messages
    )
    assert plain.choices[0].message.content == "hi"
    assert plain.usage.prompt_tokens_details.cached_tokens == 600
    assert plain.usage.prompt_cache_hit_tokens == 600

    # Default usage is a rough chars/4 estimate, never zero.
    default = await reply(fake, [{"role": "user", "content": "y" * 400}])
    assert default.usage.prompt_tokens >= 100
    assert default.usage.completion_tokens >= 50


async def test_first_delay_is_honoured_and_cancellable(fake: FakeLLM) -> None:
    fake.script("KEY-slow", [{"text": "slow", "first_delay": 0.3}])
    start = time.monotonic()
    built = await reply(fake, [{"role": "user", "content": "KEY-slow"}])
    assert built.choices[0].message.content == "slow"
    assert time.monotonic() - start >= 0.3

    fake.script("KEY-stuck", [{"text": "never", "first_delay": 30}])
    task = asyncio.create_task(stream(fake, [{"role": "user", "content": "KEY-stuck"}]))
    await asyncio.sleep(0.1)
    assert fake.active_responses == 1
    start = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1.0)
    assert time.monotonic() - start < 0.5

    # The server notices the disconnect and drops the pending response...
    for _ in range(100):
        if fake.active_responses == 0:
            break
        await asyncio.sleep(0.01)
    assert fake.active_responses == 0
    # ...and keeps serving.
    nxt = await reply(fake, [{"role": "user", "content": "after cancel"}])
    assert nxt.choices[0].message.content == "ok: after cancel"


@pytest.mark.parametrize("litellm_handler", ["false", "true"])
async def test_hang_hits_client_timeout_without_leaking(fake: FakeLLM, litellm_handler: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # The OpenAI SDK path raises litellm.Timeout; LiteLLM's own handler (the runner's default) wraps
    # the same timeout, met mid-stream, in a MidStreamFallbackError that says so.
    monkeypatch.setenv("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", litellm_handler)
    fake.script("KEY-hang", [{"text": "partial", "hang": True}])
    start = time.monotonic()
    expected = litellm.Timeout if litellm_handler == "false" else litellm.exceptions.MidStreamFallbackError
    with pytest.raises(expected) as info:
        await stream(fake, [{"role": "user", "content": "KEY-hang"}], timeout=0.3, max_retries=0)
    assert "timed out" in str(info.value).lower()
    assert time.monotonic() - start < 3
    for _ in range(100):
        if fake.active_responses == 0:
            break
        await asyncio.sleep(0.01)
    assert fake.active_responses == 0


async def test_control_endpoints_and_concurrency(fake: FakeLLM) -> None:
    async with httpx.AsyncClient(base_url=fake.root_url) as client:
        models = (await client.get("/v1/models")).json()
        assert models["data"][0]["id"] == "fake-model"
        bad = await client.post("/_script", json={"key": "k", "turns": [{"txt": "typo"}]})
        assert bad.status_code == 400 and "txt" in bad.json()["error"]["message"]
        await push_script(fake.base_url, "KEY-http", [{"text": "from http"}])
        raw = await client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "KEY-http"}]},
        )
        assert raw.json()["choices"][0]["message"]["content"] == "from http"
        assert (await client.delete("/_script")).status_code == 200
        assert (await get_requests(fake.base_url))[-1]["model"] == "m"

    # Many concurrent streams through LiteLLM, each gets its own echo.
    fake.default_chunks, fake.default_chunk_delay = 5, 0.01
    results = await asyncio.gather(
        *(reply(fake, [{"role": "user", "content": f"conc {i}"}], tools=None) for i in range(50))
    )
    assert [r.choices[0].message.content for r in results] == [f"ok: conc {i}" for i in range(50)]


async def test_standalone_process_serves_requests() -> None:
    pkg_parent = str(Path(zcbot_fakellm.__file__).resolve().parent.parent)
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "zcbot_fakellm",
        "--port",
        "0",
        "--host",
        "127.0.0.1",
        "--default-chunks",
        "3",
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 15)).decode()
        assert line.startswith("READY ")
        base_url = f"http://127.0.0.1:{int(line.split()[1])}/v1"

        await push_script(base_url, "KEY-proc", [{"text": "from another process"}])
        built = await reply(base_url, [{"role": "user", "content": "KEY-proc"}])
        assert built.choices[0].message.content == "from another process"
        echo = await stream(base_url, [{"role": "user", "content": "abcdefghi"}])
        deltas = [c.choices[0].delta.content for c in echo if c.choices and c.choices[0].delta.content]
        assert "".join(deltas) == "ok: abcdefghi" and len(deltas) == 3
        assert len(await get_requests(base_url)) == 2
    finally:
        if proc.returncode is None:
            proc.terminate()
        rc = await asyncio.wait_for(proc.wait(), 10)
    assert rc == 0  # SIGTERM is a clean shutdown
