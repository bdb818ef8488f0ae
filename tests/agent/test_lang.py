"""The agent's own text catalogue (agent/lang.py): every message exists in Chinese and English with the
same placeholders, and the language follows the user's latest message (Chinese by default)."""

from __future__ import annotations

import string

import pytest

from zcbot_core.agent import lang


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


@pytest.mark.parametrize("key", sorted(lang._TEXTS))
def test_every_message_has_both_languages_with_the_same_placeholders(key: str) -> None:
    texts = lang._TEXTS[key]
    assert set(texts) == {"zh", "en"}
    assert _fields(texts["zh"]) == _fields(texts["en"]), key
    assert lang._CJK.search(texts["zh"]), f"{key}: the Chinese text has no Chinese in it"
    assert not lang._CJK.search(texts["en"]), f"{key}: the English text has Chinese in it"


@pytest.mark.parametrize(("messages", "expected"), [
    ([], "zh"),
    ([{"role": "user", "content": "write the report"}], "en"),
    ([{"role": "user", "content": "帮我写 report"}], "zh"),
    ([{"role": "user", "content": "12345"}], "zh"),
    ([{"role": "user", "content": "写报告"}, {"role": "assistant", "content": "ok"},
      {"role": "user", "content": "now in English please"}], "en"),
    ([{"role": "user", "content": [{"type": "text", "text": "看这张图"}, {"type": "image_url", "image_url": {}}]}], "zh"),
])
def test_user_language(messages: list[dict], expected: str) -> None:
    assert lang.user_language(messages) == expected


def test_retry_warning_reads_naturally_in_both_languages() -> None:
    zh = lang.say("retry_warn", "zh", why="HTTP 429", wait=0.2, attempt=2, attempts=5)
    en = lang.say("retry_warn", "en", why="HTTP 429", wait=0.2, attempt=2, attempts=5)
    assert "0.2 秒后重试" in zh and "第 2 次，共 5 次" in zh
    assert en == "the model call failed (HTTP 429); retrying in 0.2 s (attempt 2 of 5)"
