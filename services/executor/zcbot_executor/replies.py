"""Shaping a tool result into the bus reply: 16K chars for the model, a 400-char preview."""

from __future__ import annotations

from zcbot_core.bus import ToolCallReply
from zcbot_core.tools.results import MODEL_LIMIT, preview, truncate_for_model
from zcbot_executor.sandbox.base import ToolResult

# The runner puts "ERROR: <error>" before a failed call's output; without this room its own cut
# would drop the notice (and the saved file's name) at the end.
ERROR_ROOM = 400


def make_reply(call_id: str, result: ToolResult, host: str) -> ToolCallReply:
    full = result.output or ""
    saved = result.meta.get("output_file")
    limit = MODEL_LIMIT if result.ok else MODEL_LIMIT - ERROR_ROOM
    shown, cut = truncate_for_model(full, limit, saved=saved if isinstance(saved, str) else None,
                                    total=result.meta.get("output_bytes"))
    meta = dict(result.meta)
    meta["preview"] = preview(full)
    meta["truncated"] = bool(cut or meta.get("truncated"))
    if cut:
        meta["output_chars"] = len(full)
    return ToolCallReply(call_id=call_id, ok=result.ok, output=shown, error=result.error, meta=meta, host=host)


def outcome_of(result: ToolResult) -> str:
    if result.ok:
        return "ok"
    if result.meta.get("timed_out"):
        return "timeout"
    if result.meta.get("cancelled"):
        return "cancelled"
    return "error"
