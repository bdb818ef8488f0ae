"""Splitting replies into protocol-sized chunks without breaking a UTF-8 character."""

from __future__ import annotations


def split_utf8(text: str, max_bytes: int) -> list[str]:
    """Chunks of at most `max_bytes` UTF-8 bytes each, cut on character boundaries.

    A chunk prefers to end after a newline (else after a space) found in its second half, so
    paragraphs stay whole when they can; the concatenation of the chunks is exactly `text`.
    """
    if max_bytes < 4:
        raise ValueError("max_bytes must be at least 4 (one UTF-8 character)")
    if not text:
        return []
    out: list[str] = []
    start = 0
    n = len(text)
    while start < n:
        used = 0
        end = start
        while end < n:
            size = len(text[end].encode("utf-8"))
            if used + size > max_bytes:
                break
            used += size
            end += 1
        if end < n:
            window = text[start:end]
            half = len(window) // 2
            cut = window.rfind("\n")
            if cut < half:
                cut = window.rfind(" ")
            if cut >= half:
                end = start + cut + 1
        out.append(text[start:end])
        start = end
    return out


def split_chars(text: str, max_chars: int) -> list[str]:
    """Like `split_utf8` with a character budget (iLink counts characters, not bytes)."""
    if not text:
        return []
    out: list[str] = []
    start = 0
    while start < len(text):
        end = min(start + max_chars, len(text))
        if end < len(text):
            window = text[start:end]
            cut = window.rfind("\n")
            if cut < len(window) // 2:
                cut = window.rfind(" ")
            if cut >= len(window) // 2:
                end = start + cut + 1
        out.append(text[start:end])
        start = end
    return out
