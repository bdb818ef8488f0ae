"""Run events: a discriminated union on `type`, one dataclass each (DESIGN §4, seed 003 §7.2).

Every event is one message on `event_subject(task_id)` in the events stream; the gateway relays it
as an SSE frame whose `event:` is the type and whose `id:` is the stream sequence.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from zcbot_core.bus.codec import message


@dataclass(kw_only=True)
class RunEvent:
    type: ClassVar[str] = ""
    run_id: str
    ts: float = field(default_factory=time.time)

    def payload(self) -> dict[str, Any]:
        """The SSE `data:` object: every field plus the type."""
        body = dataclasses.asdict(self)
        body["type"] = self.type
        return body

    def sse_data(self) -> str:
        return json.dumps(self.payload(), ensure_ascii=False, separators=(",", ":"))


def _event(name: str):
    def wrap(cls):
        cls.type = name
        return message(f"ev.{name}")(cls)

    return wrap


@_event("run_start")
@dataclass(kw_only=True)
class RunStart(RunEvent):
    task_id: str
    model_profile: str = ""
    attempt: int = 1


@_event("llm_start")
@dataclass(kw_only=True)
class LlmStart(RunEvent):
    step: int
    model: str = ""


@_event("text")
@dataclass(kw_only=True)
class TextDelta(RunEvent):
    delta: str


@_event("reasoning")
@dataclass(kw_only=True)
class ReasoningDelta(RunEvent):
    delta: str


@_event("tool_call")
@dataclass(kw_only=True)
class ToolCallEvent(RunEvent):
    call_id: str
    name: str
    args: dict[str, Any]
    args_preview: str


@_event("tool_result")
@dataclass(kw_only=True)
class ToolResultEvent(RunEvent):
    call_id: str
    name: str
    preview: str
    truncated: bool
    ok: bool = True


@_event("llm_end")
@dataclass(kw_only=True)
class LlmEnd(RunEvent):
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    cost_usd: float = 0.0


@_event("model_switch")
@dataclass(kw_only=True)
class ModelSwitch(RunEvent):
    from_profile: str
    to_profile: str
    reason: str = ""


@_event("warn")
@dataclass(kw_only=True)
class Warn(RunEvent):
    msg: str


@_event("context_fold")
@dataclass(kw_only=True)
class ContextFold(RunEvent):
    phase: str  # start | done | failed
    detail: str = ""


@_event("cancelled")
@dataclass(kw_only=True)
class Cancelled(RunEvent):
    reason: str = "user"


@_event("error")
@dataclass(kw_only=True)
class ErrorEvent(RunEvent):
    msg: str
    code: str = "error"


@_event("done")
@dataclass(kw_only=True)
class Done(RunEvent):
    status: str  # ok | cancelled | error | idle (no active run)
    timings: dict[str, float] = field(default_factory=dict)
    final_text: str = ""


EVENT_TYPES: dict[str, type[RunEvent]] = {
    cls.type: cls
    for cls in (
        RunStart, LlmStart, TextDelta, ReasoningDelta, ToolCallEvent, ToolResultEvent, LlmEnd,
        ModelSwitch, Warn, ContextFold, Cancelled, ErrorEvent, Done,
    )
}
TERMINAL_TYPES = frozenset({"done"})
