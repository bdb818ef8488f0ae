"""`zcbot up`'s output: every service's lines re-printed with a `name      | ` prefix, JSON log lines
rendered for a human reader as `level msg key=value` (+ traceback lines).

Quiet by default (`zcbot up --verbose`: every line): a service's debug and info lines are dropped
(uvicorn's `Uvicorn running on http://…` of the health ports looked like URLs to open); its
warnings, errors and non-log output, lines logged with `announce` set, and everything `zcbot up`
itself says (`say`), are printed."""

from __future__ import annotations

import json
import os
import threading
from typing import IO

from zcbot_devstack.services import NAMES, SERVICES

_COLORS = {**{s.name: s.color for s in SERVICES}, "zcbot": "1"}
_PREFIX_WIDTH = max(len(n) for n in (*NAMES, "zcbot"))
# Noise for a human reader: routing keys, and uvicorn's/litellm's decorations of log records.
_QUIET_LEVELS = ("debug", "info")
_DROP_KEYS = ("ts", "service", "logger", "taskName", "color_message", "litellm_redacted")


def _record(text: str) -> dict[str, object] | None:
    """A JSON log record (a dict with `msg`), or None for any other line."""
    if not text.startswith("{"):
        return None
    try:
        body = json.loads(text)
    except ValueError:
        return None
    return body if isinstance(body, dict) and "msg" in body else None


def quiet_drops(line: str) -> bool:
    """Whether quiet output drops this line: a debug or info log record, unless it is marked
    `announce` (news for the operator, such as a shutdown's "stopping 2 background jobs…")."""
    body = _record(line.rstrip("\r\n"))
    return body is not None and str(body.get("level", "info")) in _QUIET_LEVELS and not body.get("announce")


def render_line(line: str) -> str:
    """A JSON log line as `level msg key=value ...` (+ traceback lines); other lines unchanged."""
    text = line.rstrip("\r\n")
    body = _record(text)
    if body is None:
        return text
    body.pop("announce", None)
    level = str(body.pop("level", "info"))
    msg = str(body.pop("msg"))
    exc = body.pop("exc", None)
    for key in _DROP_KEYS:
        body.pop(key, None)
    parts = [f"{level:<5} {msg}"]
    for key, value in body.items():
        rendered = value if isinstance(value, str) and value and " " not in value else json.dumps(value, default=str)
        parts.append(f"{key}={rendered}")
    result = " ".join(parts)
    if exc:
        result += "\n" + str(exc).rstrip()
    return result


class Printer:
    """Thread-safe prefixed output; colors only on a terminal (and never with NO_COLOR)."""

    def __init__(self, out: IO[str], quiet: bool = False) -> None:
        self.out = out
        self.quiet = quiet
        self.lock = threading.Lock()
        isatty = getattr(out, "isatty", lambda: False)
        self.color = bool(isatty()) and not os.environ.get("NO_COLOR")  # the no-color.org convention, not ours

    def prefix(self, name: str) -> str:
        label = f"{name:<{_PREFIX_WIDTH}} |"
        if self.color:
            label = f"\x1b[{_COLORS.get(name, '0')}m{label}\x1b[0m"
        return label

    def emit(self, name: str, line: str) -> None:
        """A service's line, rendered (dropped when quiet and it is a debug or info log line)."""
        if self.quiet and quiet_drops(line):
            return
        self.say(name, render_line(line))

    def say(self, name: str, text: str) -> None:
        """Always printed."""
        prefix = self.prefix(name)
        lines = text.split("\n")
        with self.lock:
            try:
                for line in lines:
                    self.out.write(f"{prefix} {line}\n")
                self.out.flush()
            except (BrokenPipeError, ValueError):
                pass
