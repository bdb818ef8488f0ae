"""The language of a request's messages: Chinese unless the request's Accept-Language starts with
English (the web page sends its own language; other clients send the browser's or nothing).

Routes whose refusals a person reads take `LangDep` and pick their text from a catalogue of
`{key: {"zh": ..., "en": ...}}` with `say` (previews.py, file_history_texts.py).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Depends, Header

Lang = Literal["zh", "en"]
Catalogue = dict[str, dict[str, str]]


def lang_of(accept_language: str | None) -> Lang:
    """Only the first (most preferred) tag counts: "zh-CN,zh;q=0.9,en;q=0.8" is Chinese."""
    return "en" if (accept_language or "").strip().lower().startswith("en") else "zh"


def request_lang(accept_language: Annotated[str | None, Header(max_length=200)] = None) -> Lang:
    return lang_of(accept_language)


LangDep = Annotated[Lang, Depends(request_lang)]


def say(texts: Catalogue, key: str, lang: str, /, **values: object) -> str:
    return texts[key]["en" if lang == "en" else "zh"].format(**values)
