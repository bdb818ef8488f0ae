"""Token estimate of messages without a tokenizer: cheap, deterministic, a few microseconds each.

chars / 3.5 plus a surcharge for non-ASCII text (CJK runs about 0.8 tokens per character). It
matters that it is cheap because `context.prepare_messages` runs before every LLM call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

MESSAGE_OVERHEAD_TOKENS = 4


def text_tokens(text: str) -> float:
    """~chars/3.5 for ASCII, ~0.8/char for CJK (each 3-byte UTF-8 character adds 0.5)."""
    if not text:
        return 0.0
    chars = len(text)
    extra_bytes = len(text.encode("utf-8", "surrogatepass")) - chars
    return chars / 3.5 + extra_bytes / 4.0


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif part.get("type") in ("image_url", "image"):
                    parts.append("x" * 3000)  # an image costs roughly a thousand tokens
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return "" if content is None else str(content)


def message_tokens(message: dict[str, Any]) -> float:
    tokens = MESSAGE_OVERHEAD_TOKENS + text_tokens(_content_text(message.get("content")))
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str):
        tokens += text_tokens(reasoning)
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        tokens += 8 + text_tokens(str(fn.get("name") or "")) + text_tokens(str(fn.get("arguments") or ""))
    return tokens


def estimate_tokens(messages: Iterable[dict[str, Any]],
                    tokens: Callable[[dict[str, Any]], float] = message_tokens) -> int:
    """Cheap, deterministic token estimate of a message list (no tokenizer); `tokens`: the
    per-message estimate (`message_tokens`, or a remembered copy of it)."""
    return int(sum(tokens(m) for m in messages))


def reliable_context(profile: Any) -> int:
    return int(getattr(profile, "reliable_context", 0) or 0)
