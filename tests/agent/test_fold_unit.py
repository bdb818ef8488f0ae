"""Soft reset decisions, cut points and the fold request, without a database (seed 003 §8.8)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from zcbot_core.agent.context import check_protocol, message_tokens, window
from zcbot_core.agent.fold import (
    FOLD_MARKER,
    SUMMARY_HEADINGS,
    MessageMeta,
    choose_cut,
    fold_request,
    normalize_summary,
    plan_reset,
    soft_reset_base,
)

T0 = datetime(2026, 7, 1, 9, 0, tzinfo=timezone.utc)


def meta(idx: int, role: str, minutes: float, content: str | None = None, kind: str = "chat") -> MessageMeta:
    return MessageMeta(idx, role, T0 + timedelta(minutes=minutes), content, kind)


def chat(n_turns: int, start_minutes: float = 0) -> list[MessageMeta]:
    out, idx = [], 0
    for t in range(n_turns):
        out += [meta(idx, "user", start_minutes + t * 10, "q"), meta(idx + 1, "assistant", start_minutes + t * 10 + 1),
                meta(idx + 2, "tool", start_minutes + t * 10 + 2), meta(idx + 3, "assistant", start_minutes + t * 10 + 3)]
        idx += 4
    return out


def test_no_gap_no_reset() -> None:
    msgs = chat(3) + [meta(12, "user", 60, "next")]
    assert soft_reset_base(msgs, T0 + timedelta(minutes=61)) is None


def test_gap_anchors_the_window_at_the_previous_user_turn() -> None:
    msgs = chat(3) + [meta(12, "user", 60 * 7, "good morning")]
    decision = plan_reset(msgs, T0 + timedelta(hours=7))
    assert decision is not None and decision.reason == "gap" and not decision.clear_summary
    assert decision.base_idx == 8  # the last turn before the gap stays as the anchor
    assert soft_reset_base(msgs, T0 + timedelta(hours=7)) == 8
    # idempotent: with the base already there, nothing moves (a redelivered run)
    assert soft_reset_base([m for m in msgs if m.idx >= 8], T0 + timedelta(hours=7), base_idx=8) is None
    # the threshold is configurable
    assert soft_reset_base(msgs, T0 + timedelta(hours=7), gap_hours=8) is None


def test_gap_measured_to_now_when_no_user_message_is_pending() -> None:
    msgs = chat(3)
    assert soft_reset_base(msgs, T0 + timedelta(hours=1)) is None
    assert soft_reset_base(msgs, T0 + timedelta(hours=9)) == 8


def test_new_topic_command_resets_to_the_command_and_clears_the_summary() -> None:
    for command in ("/new", " 新话题 "):
        msgs = chat(3) + [meta(12, "user", 40, command)]
        decision = plan_reset(msgs, T0 + timedelta(minutes=41))
        assert decision is not None and decision.base_idx == 12 and decision.clear_summary and decision.reason == "new_topic"
    # a later message after the command: the command stays the start
    msgs = chat(3) + [meta(12, "user", 40, "/new"), meta(13, "assistant", 41), meta(14, "user", 45, "hello")]
    assert soft_reset_base(msgs, T0 + timedelta(minutes=46)) == 12
    # already applied -> no change; "/new topic please" is not the command
    assert soft_reset_base(msgs[12:], T0, base_idx=12) is None
    assert soft_reset_base(chat(2) + [meta(8, "user", 30, "/new topic please")], T0 + timedelta(minutes=31)) is None


def test_push_records_are_not_conversation_activity() -> None:
    # a daily brief pushed into an idle chat must not keep its window open forever
    msgs = chat(2) + [meta(8, "assistant", 60 * 6.5, kind="push"), meta(9, "user", 60 * 7, "about the brief")]
    assert soft_reset_base(msgs, T0 + timedelta(hours=7)) == 4
    msgs = chat(2) + [meta(8, "user", 30, "/new", kind="push")]
    assert soft_reset_base(msgs, T0 + timedelta(minutes=31)) is None  # a push is never a command
    msgs = chat(2) + [meta(8, "user", 60 * 7, "hi")]
    assert soft_reset_base([tuple(m) for m in msgs], T0 + timedelta(hours=7)) == 4  # plain tuples work


# ---- cut point -------------------------------------------------------------------------------

def turn(n: int, size: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"q{n}"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": f"c{n}", "type": "function",
                                                             "function": {"name": "read", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": f"c{n}", "name": "read", "content": "z" * size},
        {"role": "assistant", "content": f"a{n}"},
    ]


def history(sizes: list[int], summary: str | None = None) -> list[dict[str, Any]]:
    msgs = [m for n, size in enumerate(sizes) for m in turn(n, size)]
    return window([(i, "chat", m) for i, m in enumerate(msgs)], 0, summary)


def test_cut_keeps_the_most_tail_that_fits_and_lands_on_a_user_message() -> None:
    hist = history([3500] * 10)  # ~1000 tokens a turn
    per_turn = sum(message_tokens(m) for m in hist[:4])
    cut = choose_cut(hist, 3.5 * per_turn)
    assert cut is not None and hist[cut]["role"] == "user" and hist[cut]["content"] == "q7"
    assert check_protocol(hist[cut:]) == [] and check_protocol(hist[:cut]) == []
    # nothing fits: the last user message
    assert hist[choose_cut(hist, 1) or 0]["content"] == "q9"
    # a single turn cannot be folded; the injected summary is no cut point
    assert choose_cut(history([3500]), 1) is None
    assert choose_cut(history([3500], summary="S"), 1) is None
    with_summary = history([3500] * 3, summary="S")
    assert with_summary[choose_cut(with_summary, 10**6) or 0]["content"] == "q1"


def test_fold_request_is_the_chat_prefix_plus_the_instruction() -> None:
    @dataclass
    class P:
        reliable_context: int = 10**6
        thinking: bool = False

    hist = history([100] * 4, summary="old summary")
    cut = choose_cut(hist, 10**6)
    assert cut is not None
    request = fold_request("SYSTEM", hist, P(), cut, words=300)
    assert request[0] == {"role": "system", "content": "SYSTEM"}
    assert request[1]["content"].endswith("old summary")
    assert request[1: -1] == [dict(m) for m in hist[:cut]]
    assert request[-1]["role"] == "user" and request[-1]["content"].startswith(FOLD_MARKER)
    for heading in SUMMARY_HEADINGS:
        assert f"## {heading}" in request[-1]["content"]


def test_summary_is_normalised_to_the_fixed_template() -> None:
    text = "```markdown\n## Goal\nship v2\n## Progress\nwrote /srv/app/v2.py\n```"
    out = normalize_summary(text)
    assert out.startswith("## Goal\nship v2") and "```" not in out
    for heading in SUMMARY_HEADINGS:
        assert f"## {heading}" in out
    assert out.count("(none recorded)") == 3
