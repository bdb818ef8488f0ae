"""Tool results as the model and the user see them: 16K chars for the model, 400 for the preview."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MODEL_LIMIT = 16_000
PREVIEW_LIMIT = 400


def truncate_for_model(text: str, limit: int = MODEL_LIMIT, saved: str | None = None,
                       total: int | None = None) -> tuple[str, bool]:
    """`saved`: where the whole output was kept (a path relative to the task folder), named in the
    notice so the model reads it instead of re-running the command; `total` its size in bytes."""
    if len(text) <= limit and not saved:
        return text, False
    head = text[: limit - 400]
    if saved:
        size = f"{total} bytes" if total is not None else f"{len(text)} characters"
        return (f"{head}\n\n[output truncated: {size} in total, showing the first {len(head)} characters; the full "
                f"output is saved in the task folder as `{saved}`: use `read` with offset/limit (or `grep`) on it "
                "instead of re-running the command]"), True
    return f"{head}\n\n[output truncated: {len(text)} characters in total, showing the first {len(head)}]", True


def preview(text: str, limit: int = PREVIEW_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def preview_args(args: Any) -> str:
    if isinstance(args, str):
        return preview(args, 200)
    return preview(json.dumps(args, ensure_ascii=False, default=str), 200)


@dataclass
class ToolOutcome:
    ok: bool
    output: str
    preview: str
    truncated: bool

    @classmethod
    def make(cls, ok: bool, text: str, truncated: bool = False) -> "ToolOutcome":
        # PostgreSQL's JSONB refuses U+0000, and the result is stored as a message: a command that
        # prints a NUL (`cat` of a binary file, /proc/*/environ) would otherwise crash its own run.
        text = text.replace("\x00", "\ufffd")
        shown, cut = truncate_for_model(text)
        return cls(ok=ok, output=shown, preview=preview(text), truncated=truncated or cut)

    @classmethod
    def failure(cls, message: str) -> "ToolOutcome":
        return cls.make(False, f"ERROR: {message}")


def required_text(args: dict[str, Any], name: str, limit: int, what: str, longer: str = "") -> str | ToolOutcome:
    """A host tool's required text argument `name`, or the failure to return: missing or blank ("`name`
    is required (what)"), or over `limit` characters (`longer`: what to do instead)."""
    value = args.get(name)
    if not isinstance(value, str) or not value.strip():
        return ToolOutcome.failure(f"`{name}` is required ({what})")
    if len(value) > limit:
        return ToolOutcome.failure(f"`{name}` is limited to {limit} characters{longer}")
    return value
