"""Progress guards: repeat soft/hard limits and the stall stop (seed 003 §3.1)."""

from __future__ import annotations

import pytest

from zcbot_core.agent.guards import REPEAT_HARD, STALL_STEPS, RepeatGuard, StallGuard
from zcbot_core.agent.lang import user_language
from zcbot_core.agent.loop import RESTARTED_RESULT, repair_interrupted


@pytest.mark.parametrize("lang,word,note", [("zh", "继续", "2 次"), ("en", '"continue"', "2 times")])
def test_identical_call_with_same_result_warns_at_two_and_stops_at_four(lang: str, word: str, note: str) -> None:
    guard = RepeatGuard(lang=lang)  # type: ignore[arg-type]
    args = {"path": "a.txt"}
    outcomes = []
    for _ in range(REPEAT_HARD - 1):
        assert guard.before("read", args) is None
        outcomes.append(guard.after("read", args, "same", True))
    assert outcomes[0] == (True, None)
    assert outcomes[1][1] and note in outcomes[1][1]
    stop = guard.before("read", args)
    assert stop and word in stop


def test_changing_results_reset_the_repeat_count() -> None:
    guard = RepeatGuard()
    for i in range(10):
        assert guard.before("shell", {"command": "date"}) is None
        assert guard.after("shell", {"command": "date"}, f"t{i}", True) == (True, None)


def test_stall_after_eight_idle_steps_and_reset_by_progress() -> None:
    stall = StallGuard()  # Chinese by default: the product's users
    for _ in range(STALL_STEPS - 1):
        assert stall.step(False) is None
    assert stall.step(True) is None
    for _ in range(STALL_STEPS - 1):
        assert stall.step(False) is None
    assert "继续" in (stall.step(False) or "")


@pytest.mark.parametrize("messages,lang", [
    ([], "zh"),
    ([{"role": "user", "content": "帮我整理一下报告"}], "zh"),
    ([{"role": "user", "content": "please tidy the report"}], "en"),
    ([{"role": "user", "content": "把 report.docx 改一下"}], "zh"),  # mixed: CJK wins
    ([{"role": "user", "content": "summarise this"}, {"role": "assistant", "content": "ok"},
      {"role": "user", "content": "继续"}], "zh"),  # the latest user message decides
    ([{"role": "user", "content": "继续"}, {"role": "user", "content": [{"type": "text", "text": "go on"}]}], "en"),
    ([{"role": "user", "content": "12345"}], "zh"),
])
def test_the_user_language_is_that_of_the_latest_user_message(messages: list, lang: str) -> None:
    assert user_language(messages) == lang


def test_interrupted_tool_calls_get_an_honest_result() -> None:
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "shell", "content": "ok"},
    ]
    repaired = repair_interrupted(history)
    assert repaired == [{"role": "tool", "tool_call_id": "c2", "name": "read", "content": RESTARTED_RESULT}]
    assert repair_interrupted(history + repaired) == []
    assert repair_interrupted([{"role": "user", "content": "x"}]) == []
