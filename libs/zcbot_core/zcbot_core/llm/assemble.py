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
    """Feed each chunk to `add`; `message()` is the assistant message in OpenAI form.

    Tool-call deltas are keyed by their `index`, except that a delta carrying a new, different `id`
    at an index whose call already has a name starts a new call: Ollama streams parallel calls all
    at index 0, each complete with its own id (ollama#15457), and merging them would make one call
    with the last name and concatenated arguments. Continuation deltas with an empty id (Qwen /
    DashScope) or none (OpenAI) keep folding into the call at their index.
    """

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: dict[int, _ToolCallParts] = field(default_factory=dict)
    usage: Any = None
    chunks: int = 0
    finish_reason: str | None = None
    # Anthropic's thinking blocks by block index: the text and the signature must go back unchanged on
    # the assistant message of a tool-use turn (LiteLLM turns `thinking_blocks` back into content blocks).
    thinking_blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    # stream index -> key in `tool_calls` (they differ once an index is reused)
    _slots: dict[int, int] = field(default_factory=dict)

    def add(self, chunk: Any) -> ChunkDelta | None:
        """Fold one chunk in; returns what its delta adds (None for a usage-only chunk)."""
        self.chunks += 1
        usage = chunk_field(chunk, "usage")
        if usage is not None:
            self.usage = usage
        choices = chunk_field(chunk, "choices")
        if not choices:
            return None
        finish = chunk_field(choices[0], "finish_reason")
        if finish:
            self.finish_reason = str(finish)
        delta = chunk_field(choices[0], "delta")
        if delta is None:
            return None
        content = chunk_field(delta, "content")
        if content:
            self.content.append(content)
        # `reasoning` (vLLM, OpenRouter) where a parser did not already rename it to `reasoning_content`
        reasoning = chunk_field(delta, "reasoning_content") or chunk_field(delta, "reasoning")
        if reasoning and isinstance(reasoning, str):
            self.reasoning.append(reasoning)
        for block in chunk_field(delta, "thinking_blocks") or ():
            self._add_thinking(block)
        tool_calls = chunk_field(delta, "tool_calls")
        for position, call in enumerate(tool_calls or ()):
            parts = self._parts_for(call, position)
            if call.id:
                parts.id = call.id
            function = call.function
            if function is not None:
                if function.name:
                    parts.name = function.name
                if function.arguments:
                    parts.arguments.append(function.arguments)
        return ChunkDelta(content or None, reasoning if isinstance(reasoning, str) and reasoning else None,
                          bool(tool_calls))

    def _add_thinking(self, block: Any) -> None:
        if not isinstance(block, dict):
            return
        index = int(block.get("index") or 0)
        kept = self.thinking_blocks.setdefault(index, {"type": block.get("type") or "thinking"})
        for key, value in block.items():
            if key == "index" or value in (None, ""):
                continue
            if key == "thinking":
                kept["thinking"] = kept.get("thinking", "") + str(value)
            else:
                kept[key] = value  # signature (arrives once, at the end), redacted `data`, type

    def _parts_for(self, call: Any, position: int) -> _ToolCallParts:
        index = call.index if getattr(call, "index", None) is not None else position
        key = self._slots.get(index)
        current = self.tool_calls.get(key) if key is not None else None
        if current is None or (call.id and current.id and call.id != current.id and current.name):
            key = len(self.tool_calls)
            self._slots[index] = key
            current = self.tool_calls[key] = _ToolCallParts()
        return current

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.thinking_blocks:
            message["thinking_blocks"] = [self.thinking_blocks[i] for i in sorted(self.thinking_blocks)]
        calls = [self.tool_calls[i] for i in sorted(self.tool_calls) if self.tool_calls[i].name]
        if calls:
            message["tool_calls"] = [
                {"id": parts.id or f"call_{n}", "type": "function",
                 "function": {"name": parts.name, "arguments": "".join(parts.arguments) or "{}"}}
                for n, parts in enumerate(calls)
            ]
        return message
