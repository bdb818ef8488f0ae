"""Tool-call arguments from the model, parsed with bounds (the model is an attacker, docs/security.md).

`json.loads` recurses once per nesting level: a few thousand `[` raise `RecursionError`, which is
not a `ValueError` and used to end the run. Arguments are checked before parsing: at most
`MAX_ARGS_CHARS` characters and `MAX_ARGS_DEPTH` levels of nesting. No tool takes arguments nested
deeper than a few levels, and a file body larger than the bound belongs in several calls (the bus
carries ~1 MB per call anyway). A violation is a tool error the model reads; the run goes on.

Numbers must be finite: Python's JSON accepts `NaN`, `Infinity` and overflows `1e309` to infinity,
and every comparison with NaN is false, so `timeout: NaN` used to pass a `limit <= 0` check and
remove a background process's time limit (issue 36). `non_finite_error` is the one check, used
here for every tool call the model makes and again by the executor for every call it receives.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_ARGS_CHARS = 2_000_000
MAX_ARGS_DEPTH = 64

# A JSON string (escapes included) or one bracket: strings are skipped whole, so brackets inside
# them do not count as nesting.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.S)


def nesting_depth(raw: str, limit: int = MAX_ARGS_DEPTH) -> int:
    """The deepest bracket nesting of `raw` (stops counting once past `limit`)."""
    if raw.count("[") + raw.count("{") <= limit:
        return 0  # cannot exceed the limit: skip the scan (the common case)
    depth = deepest = 0
    for match in _TOKENS.finditer(raw):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif token in "]}":
            depth -= 1
    return deepest


def non_finite_path(value: Any) -> str | None:
    """The path (`timeout`, `edits[2].line`) of the first NaN or infinite number in `value`, else None.
    Iterative: the executor runs it on arguments that did not come through `parse_args`'s depth check."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return path or "(the value)"
        elif isinstance(item, dict):
            stack.extend((f"{path}.{key}" if path else str(key), sub) for key, sub in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{path}[{i}]", sub) for i, sub in enumerate(item))
    return None


def non_finite_error(args: Any) -> str | None:
    """The tool error for arguments holding NaN or Infinity (None: every number is finite)."""
    path = non_finite_path(args)
    if path is None:
        return None
    return (f"argument '{path}' must be a finite number (NaN and Infinity are not accepted); "
            "send an ordinary number, or leave the argument out to get its default")


def parse_args(raw: str) -> tuple[dict[str, Any] | None, str | None]:
    """(arguments, None) or (None, the error the model is told)."""
    raw = raw or "{}"
    if len(raw) > MAX_ARGS_CHARS:
        return None, (f"the tool arguments are too large ({len(raw)} characters; at most {MAX_ARGS_CHARS}); "
                      "split the work into several smaller calls (e.g. write a large file in parts)")
    if nesting_depth(raw) > MAX_ARGS_DEPTH:
        return None, (f"the tool arguments are nested more than {MAX_ARGS_DEPTH} levels deep; "
                      "send a flat JSON object")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, f"the tool arguments are not valid JSON ({exc.msg} at position {exc.pos}); send a JSON object"
    except RecursionError:  # the depth check should make this unreachable; never let it end the run
        return None, "the tool arguments are nested too deeply; send a flat JSON object"
    if not isinstance(value, dict):
        return None, "the tool arguments must be a JSON object"
    error = non_finite_error(value)
    if error is not None:
        return None, error
    return value, None
