"""The fake LLM's strict mode refuses what providers refuse, and its untidy stream shapes fold into
the same calls through the real LiteLLM path."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.helpers.stack import FAKE_KEY_ENV
from tests.helpers.stack import strict_fake_llm as fake  # noqa: F401  (fixture: a strict fake LLM)
from zcbot_core.llm.client import stream_chat
from zcbot_core.llm.profiles import Profile
from zcbot_fakellm import FakeLLM
from zcbot_fakellm.wire import DEEPSEEK_REASONING_MESSAGE, TOOL_CALL_SHAPES, strict_problem

CALL = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
USER = {"role": "user", "content": "hi"}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "ok"}

STRICT_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("valid", {"model": "gpt-4.1", "messages": [USER, {"role": "assistant", "tool_calls": [CALL]}, RESULT]}, None),
    ("unknown_param", {"model": "gpt-4.1", "messages": [USER], "max_contxt": 5}, "Unrecognized request argument"),
    ("missing_result", {"model": "gpt-4.1", "messages": [USER, {"role": "assistant", "tool_calls": [CALL]}, USER]},
     "did not have response messages: c1"),
    ("orphan_result", {"model": "gpt-4.1", "messages": [USER, RESULT]}, "must be a response to a preceding"),
    ("deepseek_default_thinking", {"model": "deepseek-v4-flash",
                                   "messages": [USER, {"role": "assistant", "tool_calls": [CALL]}, RESULT]},
     DEEPSEEK_REASONING_MESSAGE),
    ("deepseek_empty_reasoning", {"model": "deepseek-v4-flash", "messages": [
        USER, {"role": "assistant", "reasoning_content": "", "tool_calls": [CALL]}, RESULT]}, DEEPSEEK_REASONING_MESSAGE),
    ("deepseek_with_reasoning", {"model": "deepseek-v4-flash", "messages": [
        USER, {"role": "assistant", "reasoning_content": " ", "tool_calls": [CALL]}, RESULT]}, None),
    ("deepseek_thinking_disabled", {"model": "deepseek-v4-flash", "thinking": {"type": "disabled"},
                                    "messages": [USER, {"role": "assistant", "tool_calls": [CALL]}, RESULT]}, None),
    ("other_model_thinking_enabled", {"model": "m", "thinking": {"type": "enabled"},
                                      "messages": [USER, {"role": "assistant", "tool_calls": [CALL]}, RESULT]},
     DEEPSEEK_REASONING_MESSAGE),
]


@pytest.mark.parametrize(("body", "expected"), [(c[1], c[2]) for c in STRICT_CASES], ids=[c[0] for c in STRICT_CASES])
def test_strict_problem(body: dict[str, Any], expected: str | None) -> None:
    problem = strict_problem(body)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and problem[0] == 400 and expected in problem[1]


async def test_strict_mode_answers_with_the_providers_400(fake: FakeLLM) -> None:
    body = STRICT_CASES[4][1]
    async with httpx.AsyncClient() as client:
        r = await client.post(f"{fake.base_url}/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["message"] == DEEPSEEK_REASONING_MESSAGE
    assert fake.rejected == [DEEPSEEK_REASONING_MESSAGE]


async def _nothing(_: str) -> None:
    return None


@pytest.mark.parametrize("lean_stream", [True, False], ids=["lean", "wrapper"])
@pytest.mark.parametrize("shape", TOOL_CALL_SHAPES)
async def test_every_tool_call_shape_folds_to_the_same_calls(fake: FakeLLM, shape: str, lean_stream: bool) -> None:
    calls = [{"id": "call_a", "name": "write", "arguments": {"path": "a.txt", "content": "é \"q\" \\"}},
             {"id": "call_b", "name": "read", "arguments": {"path": "b.txt"}}]
    fake.script(f"SHAPE-{shape}", [{"tool_calls": calls, "tool_call_shape": shape}])
    prof = Profile(name="f", model="openai/fake-model", api_base=fake.base_url, api_key_env=FAKE_KEY_ENV,
                   lean_stream=lean_stream)
    result = await stream_chat(prof, [{"role": "user", "content": f"SHAPE-{shape}"}], None, _nothing, _nothing)
    got = [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in result.message["tool_calls"]]
    assert got == [(c["id"], c["name"], c["arguments"]) for c in calls]
    assert result.finish_reason == "tool_calls"


@pytest.mark.parametrize("finish", ["stop", "length", "content_filter", "tool_calls", "function_call"])
async def test_finish_reasons_arrive_as_sent(fake: FakeLLM, finish: str) -> None:
    fake.script(f"FIN-{finish}", [{"text": "abc", "finish_reason": finish}])
    prof = Profile(name="f", model="openai/fake-model", api_base=fake.base_url, api_key_env=FAKE_KEY_ENV)
    result = await stream_chat(prof, [{"role": "user", "content": f"FIN-{finish}"}], None, _nothing, _nothing)
    assert result.finish_reason == finish


async def test_fail_first_errors_then_serves_the_turn(fake: FakeLLM) -> None:
    fake.script("FAIL", [{"error": {"status": 503, "message": "busy", "headers": {"Retry-After": "1"}},
                          "fail_first": 2, "text": "fine"}])
    async with httpx.AsyncClient() as client:
        statuses = []
        for _ in range(3):
            r = await client.post(f"{fake.base_url}/chat/completions",
                                  json={"model": "m", "messages": [{"role": "user", "content": "FAIL"}]})
            statuses.append((r.status_code, r.headers.get("retry-after")))
    assert statuses == [(503, "1"), (503, "1"), (200, None)]
