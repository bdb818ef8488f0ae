"""Rebuild one assistant message from LiteLLM's normalized stream chunks, as they arrive.

LiteLLM already turns every provider's stream into OpenAI-shaped chunks (`ModelResponseStream`);
folding those deltas here costs a few dict operations per chunk, where a second
`litellm.stream_chunk_builder` pass over the chunk list (plus its cost lookup) cost ~3 ms per call
(docs/performance.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, NamedTuple


@functools.cache
def _class_defines(cls: type, name: str) -> bool:
    return any(name in klass.__dict__ for klass in cls.__mro__)


def chunk_field(obj: Any, name: str) -> Any:
    """`getattr(obj, name, None)` for LiteLLM's pydantic chunk objects, without pydantic's miss path.

    LiteLLM keeps a chunk's optional parts (usage, content, tool calls) as extra fields or plain
    attributes, absent when unset; `getattr` on an absent one goes through pydantic's `__getattr__`
    and an AttributeError (~2.5 µs, several times per streamed chunk). Found in the instance or its
    extras directly; anything the class itself defines (a property, a declared field) is read normally.
    """
    values = getattr(obj, "__dict__", None)
    if values is None:
        return getattr(obj, name, None)
    if name in values:
        return values[name]
    extra = getattr(obj, "__pydantic_extra__", None)
    if extra and name in extra:
        return extra[name]
    if _class_defines(type(obj), name):
        return getattr(obj, name, None)
    return None


class ChunkDelta(NamedTuple):
    content: str | None
    reasoning: str | None
    has_tool_calls: bool


@dataclass
class _ToolCallParts:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamAssembler:
    """Feed each chunk to `add`; `message()` is the assistant message in OpenAI form."""

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: dict[int, _ToolCallParts] = field(default_factory=dict)
    usage: Any = None
    chunks: int = 0

    def add(self, chunk: Any) -> ChunkDelta | None:
        """Fold one chunk in; returns what its delta adds (None for a usage-only chunk)."""
        self.chunks += 1
        usage = chunk_field(chunk, "usage")
        if usage is not None:
            self.usage = usage
        choices = chunk_field(chunk, "choices")
        if not choices:
            return None
        delta = chunk_field(choices[0], "delta")
        if delta is None:
            return None
        content = chunk_field(delta, "content")
        if content:
            self.content.append(content)
        reasoning = chunk_field(delta, "reasoning_content")
        if reasoning:
            self.reasoning.append(reasoning)
        tool_calls = chunk_field(delta, "tool_calls")
        for position, call in enumerate(tool_calls or ()):
            index = call.index if getattr(call, "index", None) is not None else position
            parts = self.tool_calls.setdefault(index, _ToolCallParts())
            if call.id:
                parts.id = call.id
            function = call.function
            if function is not None:
                if function.name:
                    parts.name = function.name
                if function.arguments:
                    parts.arguments.append(function.arguments)
        return ChunkDelta(content or None, reasoning or None, bool(tool_calls))

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        calls = [self.tool_calls[i] for i in sorted(self.tool_calls) if self.tool_calls[i].name]
        if calls:
            message["tool_calls"] = [
                {"id": parts.id or f"call_{n}", "type": "function",
                 "function": {"name": parts.name, "arguments": "".join(parts.arguments) or "{}"}}
                for n, parts in enumerate(calls)
            ]
        return message
