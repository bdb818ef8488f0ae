"""What the model sees of a task's history (seed 003 §8.2, §8.8).

The stored history is never rewritten; these functions shape a copy for one request.
"""

from __future__ import annotations

from typing import Any

SUMMARY_PREFIX = "[Summary of the earlier conversation, for context]\n"


def window(messages: list[tuple[int, str, dict[str, Any]]], base_idx: int, summary: str | None) -> list[dict[str, Any]]:
    """Messages from `context_base_idx` on, without push records, with the fold summary first."""
    body = [payload for idx, kind, payload in messages if idx >= base_idx and kind != "push"]
    if summary:
        body.insert(0, {"role": "user", "content": SUMMARY_PREFIX + summary})
    return body


def strip_old_reasoning(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Reasoning text of earlier turns is not sent back (providers reject or ignore it)."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    out = []
    for i, msg in enumerate(messages):
        if i < last_user and msg.get("role") == "assistant" and "reasoning_content" in msg:
            msg = {k: v for k, v in msg.items() if k != "reasoning_content"}
        out.append(msg)
    return out


def prepare_messages(messages: list[dict[str, Any]], profile: Any) -> list[dict[str, Any]]:
    return strip_old_reasoning(messages)
