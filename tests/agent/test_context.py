"""Context compression and reasoning handling before each LLM call (seed 003 §8.2)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zcbot_core.agent.context import (
    COMPRESSED_TAG,
    KEEP_TURNS,
    SUMMARY_PREFIX,
    IndexedMessage,
    MessagePreparer,
    check_protocol,
    estimate_tokens,
    message_idx,
    prepare_messages,
    protected_from,
    strip_old_reasoning,
    window,
)


@dataclass
class P:
    reliable_context: int = 100_000
    thinking: bool = False
    name: str = "p"


BIG = "".join(f"row {i}: value {i * 7}\n" for i in range(400))  # ~6.5K chars


def turn(n: int, *, big: bool = True, tool: str = "read", reasoning: str | None = None) -> list[dict[str, Any]]:
    call = {"id": f"call_{n}", "type": "function",
            "function": {"name": tool, "arguments": json.dumps({"path": f"file{n}.txt"} if tool != "load_skill" else {"name": "ppt"})}}
    assistant: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": [call]}
    if reasoning:
        assistant["reasoning_content"] = reasoning
    return [
        {"role": "user", "content": f"question {n}"},
        assistant,
        {"role": "tool", "tool_call_id": f"call_{n}", "name": tool, "content": (BIG if big else "small") + f"#{n}"},
        {"role": "assistant", "content": f"answer {n}", **({"reasoning_content": f"final thoughts {n}"} if reasoning else {})},
    ]


def stored(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """As the runner loads them: payloads with their message idx."""
    return window([(i, "chat", m) for i, m in enumerate(messages)], 0, None)


def conversation(turns: int, **kw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in range(turns):
        out += turn(n, **kw)
    return [{"role": "system", "content": "sys"}, *stored(out)]


def dumps(body: list[dict[str, Any]]) -> str:
    return json.dumps(body, ensure_ascii=False, sort_keys=False)


def test_below_threshold_nothing_but_old_reasoning_changes_and_bytes_repeat() -> None:
    body = conversation(4, reasoning="thinking")
    profile = P(reliable_context=10**7)
    first, second = prepare_messages(body, profile), prepare_messages(copy.deepcopy(body), profile)
    assert dumps(first) == dumps(second)
    assert COMPRESSED_TAG not in dumps(first)
    assert [m.get("content") for m in first] == [m.get("content") for m in body]
    assert all(type(m) is dict for m in first)  # plain dicts go to LiteLLM
    # the input was not mutated
    assert body[2]["reasoning_content"] == "thinking"


def test_above_threshold_old_tool_results_shrink_newest_turns_and_users_untouched() -> None:
    body = conversation(6)
    profile = P(reliable_context=estimate_tokens(body))  # ~100% pressure
    out = prepare_messages(body, profile)
    assert len(out) == len(body)
    start = protected_from(body, KEEP_TURNS)
    assert body[start]["role"] == "user" and body[start]["content"] == "question 4"
    for i, (before, after) in enumerate(zip(body, out)):
        assert before.get("role") == after.get("role")
        if before["role"] == "user" or i >= start:
            assert after == before, i
        if before["role"] == "assistant":
            assert after == before  # tool-call arguments never rewritten
        if before["role"] == "tool":
            assert after["tool_call_id"] == before["tool_call_id"] and after["name"] == before["name"]
            if i < start:
                assert COMPRESSED_TAG in after["content"] and len(after["content"]) < 800
                assert after["content"].startswith(before["content"][:300])
                assert f"message idx {i - 1}" in after["content"]  # body[0] is the system prompt
    assert check_protocol(out) == []
    assert sum(COMPRESSED_TAG in (m.get("content") or "") for m in out) == 4


def test_compression_is_stable_as_the_run_grows() -> None:
    body = conversation(6)
    profile = P(reliable_context=estimate_tokens(body))
    first = prepare_messages(body, profile)
    grown = body + [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "x", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "x", "name": "shell", "content": BIG},
    ]
    second = prepare_messages(grown, profile)
    assert dumps(second[: len(first)]) == dumps(first)  # the prefix keeps its bytes
    assert second[-1]["content"] == BIG  # the running turn is intact


def test_load_skill_bodies_get_a_reload_pointer() -> None:
    body = [{"role": "system", "content": "sys"}, *stored(turn(0, tool="load_skill") + turn(1) + turn(2))]
    out = prepare_messages(body, P(reliable_context=100))
    skill = out[3]
    assert skill["name"] == "load_skill" and COMPRESSED_TAG in skill["content"]
    assert "load_skill `ppt` again" in skill["content"]


def test_small_results_and_unindexed_history_are_handled() -> None:
    raw = [{"role": "system", "content": "s"}] + turn(0, big=False) + turn(1) + turn(2) + turn(3)
    out = prepare_messages(raw, P(reliable_context=100))
    assert out[3]["content"] == "small#0"  # short results stay
    assert "tool_call_id call_1" in out[7]["content"]  # no idx known: the pointer names the call


def test_reasoning_kept_on_tool_turns_for_thinking_profiles() -> None:
    body = conversation(3, reasoning="why")
    plain = prepare_messages(body, P(reliable_context=10**7, thinking=False))
    thinking = prepare_messages(body, P(reliable_context=10**7, thinking=True))
    last_user = max(i for i, m in enumerate(body) if m["role"] == "user")
    for i, msg in enumerate(body):
        if msg["role"] != "assistant":
            continue
        if i > last_user:
            assert "reasoning_content" in plain[i] and "reasoning_content" in thinking[i]
        else:  # every turn of `turn()` calls a tool: DeepSeek wants all its reasoning back
            assert "reasoning_content" not in plain[i]
            assert thinking[i]["reasoning_content"] == msg["reasoning_content"]


def test_strip_old_reasoning_drops_no_tool_turns() -> None:
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "reasoning_content": "r"},
            {"role": "user", "content": "c"}, {"role": "assistant", "content": "d", "reasoning_content": "r2"}]
    out = strip_old_reasoning(msgs, keep_tool_turns=True)
    assert "reasoning_content" not in out[1] and out[3]["reasoning_content"] == "r2"


def test_window_keeps_push_records_and_injects_the_summary() -> None:
    # Seed §8.7: a delivered push is in the task so the agent can answer "expand point 2 of the brief".
    rows = [(0, "chat", {"role": "user", "content": "a"}), (1, "push", {"role": "assistant", "content": "brief"}),
            (2, "chat", {"role": "user", "content": "b"})]
    body = window(rows, 0, "S")
    assert [m["content"] for m in body] == [SUMMARY_PREFIX + "S", "a", "brief", "b"]
    assert isinstance(body[1], IndexedMessage) and body[1].idx == 0 and body[3].idx == 2
    assert copy.deepcopy(body[1]).idx == 0
    assert window(rows, 2, None) == [{"role": "user", "content": "b"}]


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "read", "arguments": "{}"}}


@pytest.mark.parametrize(("rows", "expected"), [
    # a push delivered between a tool call and its results waits until the step's results are in
    ([(0, "chat", {"role": "user", "content": "go"}),
      (1, "chat", {"role": "assistant", "content": "", "tool_calls": [_call("c1"), _call("c2")]}),
      (2, "chat", {"role": "tool", "tool_call_id": "c1", "content": "r1"}),
      (3, "push", {"role": "assistant", "content": "brief"}),
      (4, "chat", {"role": "tool", "tool_call_id": "c2", "content": "r2"}),
      (5, "chat", {"role": "assistant", "content": "done"})],
     [0, 1, 2, 4, 3, 5]),
    # the step is still open (the run is going on): the push stays out for now
    ([(0, "chat", {"role": "user", "content": "go"}),
      (1, "chat", {"role": "assistant", "content": "", "tool_calls": [_call("c1")]}),
      (2, "push", {"role": "assistant", "content": "brief"})],
     [0, 1]),
    # an interrupted step followed by a user turn: the push stops waiting, the user's turn stays last
    ([(0, "chat", {"role": "assistant", "content": "", "tool_calls": [_call("c1")]}),
      (1, "push", {"role": "assistant", "content": "brief"}),
      (2, "chat", {"role": "user", "content": "again"})],
     [0, 1, 2]),
    # a push delivered after the user's pending message goes before it: the run still answers it
    ([(0, "chat", {"role": "user", "content": "hi"}), (1, "chat", {"role": "assistant", "content": "hello"}),
      (2, "chat", {"role": "user", "content": "expand point 2"}), (3, "chat", {"role": "user", "content": "and 3"}),
      (4, "push", {"role": "assistant", "content": "brief"})],
     [0, 1, 4, 2, 3]),
])
def test_window_never_puts_a_push_inside_a_tool_step(rows: list, expected: list[int]) -> None:
    assert [message_idx(m) for m in window(rows, 0, None)] == expected


def test_cjk_text_counts_more_tokens_per_char() -> None:
    assert estimate_tokens([{"content": "上下文治理" * 100}]) > estimate_tokens([{"content": "abcde" * 100}]) * 2


# ---- property: any conversation stays valid and keeps what must not change ------------------------

@st.composite
def conversations(draw: Any) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    n = 0
    for t in range(draw(st.integers(1, 6))):
        msgs.append({"role": "user", "content": draw(st.sampled_from(["hi", "继续", "x" * 2000]))})
        for _ in range(draw(st.integers(0, 3))):
            calls = [{"id": f"c{n}_{k}", "type": "function",
                      "function": {"name": draw(st.sampled_from(["read", "shell", "load_skill"])), "arguments": '{"a": 1}'}}
                     for k in range(draw(st.integers(1, 3)))]
            n += 1
            msgs.append({"role": "assistant", "content": "", "tool_calls": calls})
            for c in calls:
                msgs.append({"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"],
                             "content": draw(st.sampled_from(["ok", "y" * 1500, "長" * 3000]))})
        msgs.append({"role": "assistant", "content": "done"})
    return [{"role": "system", "content": "s"}, *stored(msgs)]


@settings(max_examples=150, deadline=None)
@given(conversations(), st.integers(50, 20000), st.booleans())
def test_property_compression_keeps_protocol_users_and_newest_turns(body: list[dict[str, Any]], limit: int,
                                                                    thinking: bool) -> None:
    out = prepare_messages(body, P(reliable_context=limit, thinking=thinking))
    assert check_protocol(out) == []
    assert dumps(out) == dumps(prepare_messages(copy.deepcopy(body), P(reliable_context=limit, thinking=thinking)))
    start = protected_from(body, KEEP_TURNS)
    for i, (before, after) in enumerate(zip(body, out, strict=True)):
        assert {k: v for k, v in before.items() if k != "content"} == {k: v for k, v in after.items() if k != "content"} \
            or before["role"] == "assistant"
        if before["role"] in ("user", "system") or i >= start:
            assert after.get("content") == before.get("content")
        if before["role"] == "assistant":
            assert after.get("tool_calls") == before.get("tool_calls") and after.get("content") == before.get("content")


@pytest.mark.parametrize(("thinking", "pressure"), [(False, False), (True, False), (False, True), (True, True)])
def test_a_runs_preparer_sends_what_prepare_messages_sends_as_the_history_grows(thinking: bool, pressure: bool) -> None:
    """The per-run memo (`MessagePreparer`) is an optimisation only: call after call, with messages
    appended in between (as the loop does), its body is byte-identical to the pure function's."""
    body = conversation(3, reasoning="thinking")
    # Compression starts at half of reliable_context: here once the history has 5 turns.
    profile = P(reliable_context=2 * estimate_tokens(conversation(5, reasoning="thinking")) if pressure else 10**7,
                thinking=thinking)
    prepare = MessagePreparer()
    for n in range(3, 7):
        remembered, pure = prepare(body, profile), prepare_messages(copy.deepcopy(body), profile)
        assert dumps(remembered) == dumps(pure), n
        assert (COMPRESSED_TAG in dumps(pure)) is (pressure and n >= 5)
        body = [*body, *stored(turn(n, reasoning="thinking"))]


def test_a_runs_preparer_returns_fresh_dicts_each_call() -> None:
    """Whatever edits a request on its way to the provider must not change the next one."""
    body = conversation(3, reasoning="thinking")
    prepare = MessagePreparer()
    first = prepare(body, P())
    expected = dumps(first)
    first[1]["content"] = "edited"
    first[2]["tool_calls"][0]["function"]["arguments"] = "{}"
    first[2]["cache_control"] = {"type": "ephemeral"}
    assert dumps(prepare(body, P())) == expected


def test_compressed_long_output_points_at_its_saved_file() -> None:
    """A shell output kept in the task folder (issue 40): the compressed result names the file to read."""
    from zcbot_core.agent.context import compressed_text
    from zcbot_core.tools.results import truncate_for_model

    shown, cut = truncate_for_model("r" * 30_000, saved=".zcbot/outputs/20261207-101010-0a1b2c3d.txt", total=30_001)
    assert cut
    text = compressed_text(shown, tool="shell", idx=7)
    assert "`.zcbot/outputs/20261207-101010-0a1b2c3d.txt`" in text and "read" in text
    assert "re-run the tool" not in text and COMPRESSED_TAG in text
    plain = compressed_text("r" * 30_000, tool="shell", idx=7)
    assert "message idx 7" in plain and ".zcbot/outputs" not in plain
