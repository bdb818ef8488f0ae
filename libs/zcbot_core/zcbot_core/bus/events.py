"""Run events: a discriminated union on `type`, one dataclass each (DESIGN §4, seed 003 §7.2).

Every event is one message on `event_subject(task_id)` in the events stream; the gateway relays it
as an SSE frame whose `event:` is the type and whose `id:` is the stream sequence.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
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


def _event(name: str) -> Callable[[type[Any]], type[Any]]:
    def wrap(cls: type[Any]) -> type[Any]:
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
    code: str = ""  # machine-readable kind, when one matters: DB_UNAVAILABLE


DB_UNAVAILABLE = "db_unavailable"  # Warn.code: the runner left the run for redelivery (database outage)


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
    status: str  # ok | cancelled | stopped (the loop ended early: iteration limit) | error | idle (no active run)
    timings: dict[str, float | None] = field(default_factory=dict)  # ttft: None when no token came
    final_text: str = ""
    files_changed: int = 0  # distinct files the run created, changed or removed (data_events, issue 29)


def done_msg_id(run_id: str) -> str:
    """The `Nats-Msg-Id` of a run's `done`, whichever execution publishes it: a `done` published again for
    a run whose runner died after ending it (`zcbot_runner.stale`) is then dropped by JetStream's
    duplicate window when the first one was stored after all."""
    return f"{run_id}:done"


EVENT_TYPES: dict[str, type[RunEvent]] = {
    cls.type: cls
    for cls in (
        RunStart, LlmStart, TextDelta, ReasoningDelta, ToolCallEvent, ToolResultEvent, LlmEnd,
        ModelSwitch, Warn, ContextFold, Cancelled, ErrorEvent, Done,
    )
}
TERMINAL_TYPES = frozenset({"done"})


# ---- oversized events ----------------------------------------------------------------------------
# NATS refuses a message over the server's max payload (1 MB by default): an event over it used to
# be dropped (MaxPayloadError) and the client never saw the tool call. `fit_event` cuts the event's
# largest fields instead, each with a visible marker, so it is always delivered.
DEFAULT_MAX_PAYLOAD = 1024 * 1024  # NATS server default
EVENT_HEADROOM_BYTES = 8 * 1024  # JetStream headers and the marker text itself
TRUNCATED_KEY = "zcbot_truncated"


def truncation_marker(original_bytes: int, limit: int) -> str:
    return f"…[truncated by zcbot: this event was {original_bytes} bytes, over the bus's {limit}-byte limit]"


def _cut_text(text: str, keep_bytes: int) -> str:
    return text.encode("utf-8")[:max(keep_bytes, 0)].decode("utf-8", errors="ignore")


def fit_event(event: RunEvent, max_bytes: int) -> tuple[RunEvent, bytes]:
    """The event and its encoding, cut to fit `max_bytes` when it is larger (a marker in each cut
    field: text keeps its head; an object or list becomes `{TRUNCATED_KEY: marker}` / `[marker]`)."""
    from zcbot_core.bus.codec import encode

    data = encode(event)
    if len(data) <= max_bytes:
        return event, data
    marker = truncation_marker(len(data), max_bytes)
    budget = max(max_bytes - EVENT_HEADROOM_BYTES, 1024)
    sizes = {f.name: len(json.dumps(getattr(event, f.name), ensure_ascii=False, default=str).encode("utf-8"))
             for f in dataclasses.fields(event) if isinstance(getattr(event, f.name), (str, dict, list))}
    changes: dict[str, Any] = {}
    rest = sum(sizes.values())
    for name in sorted(sizes, key=sizes.__getitem__, reverse=True):
        if rest <= budget:
            break
        value = getattr(event, name)
        others = rest - sizes[name]
        if isinstance(value, str):
            changes[name] = _cut_text(value, budget - others - len(marker.encode("utf-8")) - 64) + marker
        elif isinstance(value, dict):
            changes[name] = {TRUNCATED_KEY: marker}
        else:
            changes[name] = [marker]
        rest = others + len(json.dumps(changes[name], ensure_ascii=False).encode("utf-8"))
    cut = dataclasses.replace(event, **changes)
    data = encode(cut)
    if len(data) > max_bytes:  # many mid-sized fields: keep only the markers
        cut = dataclasses.replace(event, **{name: marker if isinstance(getattr(event, name), str)
                                            else {TRUNCATED_KEY: marker} if isinstance(getattr(event, name), dict)
                                            else [marker] for name in sizes})
        data = encode(cut)
    return cut, data
