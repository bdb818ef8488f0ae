"""Provider behaviours that only show in a tool loop, driven through real runs (gateway -> runner ->
executor -> fake LLM in strict mode, which refuses what the real provider refuses). One stack per
module (`shared_stack`: each test its own users and tasks, a wiped fake model)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.stack import Stack
from tests.providers.conftest import add_profile, of, recorded, run_events


@pytest.fixture
def stack(shared_stack: Stack) -> Stack:
    return shared_stack


DEEPSEEK = {"model": "deepseek/deepseek-v4-flash", "thinking": True}


async def new_task(stack: Stack, user: str, profile: str | None = None) -> tuple[str, str]:
    token = await stack.login(user)
    extra: dict[str, Any] = {"model_profile": profile} if profile else {}
    task = await stack.create_task(token, f"{user} task", **extra)
    return token, task["task_id"]


def deepseek_requests(stack: Stack) -> list[dict[str, Any]]:
    return [r for r in stack.fake.requests if r.get("model") == "deepseek-v4-flash"]


async def test_deepseek_tool_call_with_empty_reasoning_goes_on(stack: Stack) -> None:
    """Issue 20.1: the recorded V4 flash reply (empty reasoning, then a tool call) is followed by a
    request that passes DeepSeek's reasoning rule; before, the run ended on DeepSeek's 400."""
    add_profile(stack, "ds", **DEEPSEEK)
    stack.fake.script("KEY-ds-empty", [{"raw": recorded("deepseek_v4_tool_empty_reasoning")},
                                       {"reasoning": "the file is missing", "text": "没有这个文件。"}])
    token, task_id = await new_task(stack, "dora", "ds")
    events = await run_events(stack, token, task_id, "KEY-ds-empty 读一下计划")
    assert [t["name"] for t in of(events, "tool_result")] == ["read"]
    assert "没有这个文件。" in "".join(d["delta"] for d in of(events, "text"))
    assert stack.fake.rejected == []
    sent = deepseek_requests(stack)
    assert len(sent) == 2 and all(r["thinking"] == {"type": "enabled"} for r in sent)
    tool_turn = [m for m in sent[1]["messages"] if m.get("tool_calls")]
    assert tool_turn and all(m.get("reasoning_content") for m in tool_turn)


async def test_deepseek_thinking_off_is_sent_and_the_next_turn_passes(stack: Stack) -> None:
    """Issue 20.2: `thinking: false` says so (DeepSeek thinks otherwise), so a later user turn after a
    tool turn whose reasoning was stripped is accepted."""
    add_profile(stack, "ds-off", model="deepseek/deepseek-v4-flash", thinking=False)
    stack.fake.script("KEY-ds-off-1", [{"reasoning": "r", "tool_calls": [{"name": "list_dir", "arguments": {}}]},
                                       {"text": "listed"}])
    stack.fake.script("KEY-ds-off-2", [{"text": "second turn ok"}])
    token, task_id = await new_task(stack, "otto", "ds-off")
    await run_events(stack, token, task_id, "KEY-ds-off-1 list")
    events = await run_events(stack, token, task_id, "KEY-ds-off-2 again")
    assert "second turn ok" in "".join(d["delta"] for d in of(events, "text"))
    assert stack.fake.rejected == []
    assert all(r["thinking"] == {"type": "disabled"} for r in deepseek_requests(stack))


async def test_switching_a_task_to_deepseek_fills_old_tool_turns(stack: Stack) -> None:
    """Issue 20.2: tool-call messages written under another provider have no reasoning; a DeepSeek
    thinking profile passes them back with the placeholder instead of getting the 400."""
    add_profile(stack, "ds", **DEEPSEEK)
    stack.fake.script("KEY-switch-1", [{"tool_calls": [{"name": "list_dir", "arguments": {}}]}, {"text": "done"}])
    stack.fake.script("KEY-switch-2", [{"reasoning": "ok", "text": "deepseek here"}])
    token, task_id = await new_task(stack, "sam")
    await run_events(stack, token, task_id, "KEY-switch-1 list")
    async with stack.client(token) as c:
        assert (await c.patch(f"/v1/tasks/{task_id}", json={"model_profile": "ds"})).status_code == 200
    await run_events(stack, token, task_id, "KEY-switch-2 go on")
    assert stack.fake.rejected == []
    assert deepseek_requests(stack)


async def test_ollama_parallel_calls_at_one_index_all_run(stack: Stack) -> None:
    """Issue 20.5: Ollama's two calls at index 0 (recorded shape) are two calls, and both run."""
    stack.fake.script("KEY-ollama", [{"raw": recorded("ollama_same_index")},
                                     {"tool_calls": [{"name": "read", "arguments": {"path": "world.py"}}]},
                                     {"text": "both written"}])
    token, task_id = await new_task(stack, "olga")
    events = await run_events(stack, token, task_id, "KEY-ollama write two files")
    results = of(events, "tool_result")
    assert [r["name"] for r in results] == ["file_write", "file_write", "read"]
    # file_write is not one of our tools: each call gets its own "unknown tool" error (before, one
    # merged call with concatenated arguments); the sandbox never saw a file.
    assert not results[0]["ok"] and not results[1]["ok"] and not results[2]["ok"]
    calls = of(events, "tool_call")
    assert [c["args"].get("filePath") for c in calls[:2]] == ["hello.py", "world.py"]


async def test_truncated_tool_arguments_are_never_run(stack: Stack) -> None:
    """Issue 20.3: a reply cut off at the output limit inside tool-call arguments is not executed,
    even when what arrived parses as JSON; the model is told to split it, and the run goes on."""
    stack.fake.script("KEY-cut-args", [
        {"tool_calls": [{"name": "write", "arguments": '{"path": "x.txt", "content": "half"}'}], "finish_reason": "length"},
        {"tool_calls": [{"name": "read", "arguments": {"path": "x.txt"}}]},
        {"text": "ok, smaller next time"},
    ])
    token, task_id = await new_task(stack, "cora")
    events = await run_events(stack, token, task_id, "KEY-cut-args write it")
    results = of(events, "tool_result")
    assert [r["name"] for r in results] == ["write", "read"]
    assert not results[0]["ok"] and "output limit" in results[0]["preview"] and "Split" in results[0]["preview"]
    assert not results[1]["ok"]  # x.txt was never written
    assert any("cut off" in w["msg"] for w in of(events, "warn"))
    assert stack.fake.rejected == []


async def test_unfinished_text_answers_warn(stack: Stack) -> None:
    """Issue 20.3: `length` and `content_filter` on a text answer end the run with a warning, and
    DeepSeek's insufficient_system_resource is an error, never a silent success."""
    stack.fake.script("KEY-len", [{"text": "the first half of", "finish_reason": "length"}])
    stack.fake.script("KEY-filter", [{"text": "I can", "finish_reason": "content_filter"}])
    stack.fake.script("KEY-isr", [{"chunks": ["x"], "finish_reason": "insufficient_system_resource"}])
    token, task_id = await new_task(stack, "lena")
    events = await run_events(stack, token, task_id, "KEY-len go")
    assert any("output limit" in w["msg"] for w in of(events, "warn"))
    events = await run_events(stack, token, task_id, "KEY-filter go")
    assert any("content filter" in w["msg"] for w in of(events, "warn"))
    # A Chinese user reads the same warnings in Chinese (issue 26.3: the agent's text follows the user).
    stack.fake.script("KEY-zhlen", [{"text": "前半部分", "finish_reason": "length"}])
    events = await run_events(stack, token, task_id, "KEY-zhlen 写一段话")
    assert any("输出上限" in w["msg"] and "继续" in w["msg"] for w in of(events, "warn")), of(events, "warn")
    events = await run_events(stack, token, task_id, "KEY-isr go", status="error")
    assert any("insufficient system resources" in e["msg"] for e in of(events, "error"))


async def test_rate_limit_and_overload_are_retried_with_a_warning(stack: Stack) -> None:
    """Issue 20.4: a 429 with Retry-After and a 503 are retried (after the provider's wait), each retry
    a `warn` naming the reason; the run then succeeds."""
    stack.fake.script("KEY-retry", [{"error": {"status": 429, "message": "Rate limit reached for requests",
                                               "headers": {"Retry-After": "0.2"}}, "fail_first": 1,
                                     "tool_calls": [{"name": "list_dir", "arguments": {}}]},
                                    {"error": {"status": 503, "message": "Service is too busy",
                                               "headers": {"Retry-After": "0.1"}}, "fail_first": 2,
                                     "text": "after the retries"}])
    token, task_id = await new_task(stack, "rita")
    events = await run_events(stack, token, task_id, "KEY-retry go")
    warns = [w["msg"] for w in of(events, "warn")]
    assert len([w for w in warns if "HTTP 429" in w and "retrying in 0.2 s" in w]) == 1, warns
    assert len([w for w in warns if "HTTP 503" in w]) == 2, warns
    assert "after the retries" in "".join(d["delta"] for d in of(events, "text"))
    assert len([r for r in stack.fake.requests if "KEY-retry" in str(r["messages"])]) == 5


async def test_a_failure_after_output_is_not_retried(stack: Stack) -> None:
    """A stream that broke after text reached the user is not tried again (it would show twice)."""
    stack.fake.script("KEY-broken", [{"text": "partial answer", "stream_error": {"message": "engine died", "code": 503}}])
    token, task_id = await new_task(stack, "bea")
    events = await run_events(stack, token, task_id, "KEY-broken go", status="error")
    assert not [w for w in of(events, "warn") if "retrying" in w["msg"]]
    assert len([r for r in stack.fake.requests if "KEY-broken" in str(r["messages"])]) == 1


async def test_anthropic_thinking_blocks_go_back_signed(stack: Stack) -> None:
    """Anthropic through LiteLLM in a tool loop: the reply's thinking block (text and signature) is
    sent back on the assistant tool-use message of the next request, as Anthropic requires; cache
    reads are counted."""
    add_profile(stack, "claude-t", model="anthropic/claude-sonnet-4-5", api_base=stack.fake.root_url, thinking=True)
    stack.fake.script("KEY-claude", [{"raw": recorded("anthropic_thinking_tool_use")},
                                     {"raw": recorded("anthropic_text_end_turn")}])
    token, task_id = await new_task(stack, "clara", "claude-t")
    events = await run_events(stack, token, task_id, "KEY-claude weather in SF?")
    assert "foggy in San Francisco" in "".join(d["delta"] for d in of(events, "text"))
    assert [e["cached_tokens"] for e in of(events, "llm_end")] == [2048, 2048]
    second = [r for r in stack.fake.requests if "KEY-claude" in str(r["messages"])][1]
    assistant = next(m for m in second["messages"] if m["role"] == "assistant")
    blocks = assistant["content"]
    thinking = next(b for b in blocks if b["type"] == "thinking")
    assert thinking["signature"] == "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
    assert thinking["thinking"] == "I need the weather in San Francisco, so I call get_weather."
    assert [b["type"] for b in blocks].index("thinking") < [b["type"] for b in blocks].index("tool_use")
