"""Rebuild one assistant message from LiteLLM's normalized stream chunks, as they arrive.

LiteLLM already turns every provider's stream into OpenAI-shaped chunks (`ModelResponseStream`);
folding those deltas here costs a few dict operations per chunk, where a second
`litellm.stream_chunk_builder` pass over the chunk list (plus its cost lookup) cost ~3 ms per call
(docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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

    def add(self, chunk: Any) -> Any:
        """Fold one chunk in; returns its delta (None for a usage-only chunk)."""
        self.chunks += 1
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage = usage
        if not chunk.choices:
            return None
        delta = chunk.choices[0].delta
        if delta.content:
            self.content.append(delta.content)
        reasoning = getattr(delta, "reasoning_content", None)
        if reasoning:
            self.reasoning.append(reasoning)
        for position, call in enumerate(getattr(delta, "tool_calls", None) or ()):
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
        return delta

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
