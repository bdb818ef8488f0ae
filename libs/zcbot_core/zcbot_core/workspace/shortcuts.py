"""Shortcuts: a trigger word replaced by a full instruction at the entry point (seed 003 §3.7).

Stored per user in `<user root>/.memory/shortcuts.md` (the agent sees it as
`/workspace/.memory/shortcuts.md` and maintains it when the user asks in conversation). One shortcut
per markdown list item:

    # Shortcuts
    - `daily`: Summarize today's work in my folder as a short daily report in daily.md.
    - `周报`: 把本周的工作整理成周报
      (lines indented under an item continue its instruction)

Also accepted, one per line: `trigger => full instruction`. Anything else in the file (headings,
prose, blank lines) is ignored, and so is an item with an empty trigger or instruction; when a trigger
is listed twice the first one wins.

`expand(storage_root, user_id, content)`: when the whole message, stripped, equals a trigger exactly
(case-sensitive), the instruction replaces it; otherwise the message is returned unchanged. The one
entry, `submit.submit_message` (web `POST /messages`, channels), calls it before the message is stored, so the
expansion is deterministic, costs no tokens and the shortcut list itself never enters the model's
context. A missing, oversized, undecodable or unsafe file (symlink out of the root, not a regular
file) leaves every message unchanged.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from zcbot_core.safe_fs import paths
from zcbot_core.workspace import memory

log = logging.getLogger(__name__)

SHORTCUTS_FILE = f"{memory.MEMORY_DIR}/shortcuts.md"
MAX_FILE_BYTES = 64 * 1024
MAX_TRIGGER_CHARS = 100
MAX_SHORTCUTS = 200

_ITEM = re.compile(r"^[-*+]\s+`([^`\n]+)`\s*(?::|：|=>)\s*(.*)$")
_ARROW = re.compile(r"^(?:[-*+]\s+)?([^\s`].*?|`[^`\n]+`)\s*=>\s*(.*)$")
_CONTINUATION = re.compile(r"^(?: {2,}|\t)\S")


@dataclass(frozen=True)
class Shortcut:
    trigger: str
    instruction: str


def parse(text: str) -> list[Shortcut]:
    """Shortcuts in a shortcuts.md text, in file order (see the module docstring for the format)."""
    entries: list[list[str]] = []  # [trigger, instruction lines...]
    current: list[str] | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if current is not None and _CONTINUATION.match(line):
            current.append(line.strip())
            continue
        current = None
        stripped = line.strip()
        match = _ITEM.match(stripped) or _ARROW.match(stripped)
        if match is None:
            continue
        trigger = match.group(1).strip().strip("`").strip()
        current = [trigger, match.group(2).strip()]
        entries.append(current)
    out: list[Shortcut] = []
    seen: set[str] = set()
    for trigger, *lines in entries:
        instruction = "\n".join(part for part in lines if part).strip()
        if not trigger or not instruction or len(trigger) > MAX_TRIGGER_CHARS or trigger in seen:
            continue
        seen.add(trigger)
        out.append(Shortcut(trigger, instruction))
        if len(out) >= MAX_SHORTCUTS:
            break
    return out


def load(user_root: Path) -> list[Shortcut]:
    """The user's shortcuts; [] when the file is missing, too large, undecodable or unsafe."""
    text = memory.read_memory_file(user_root, SHORTCUTS_FILE, MAX_FILE_BYTES + 1)
    if text is None:
        return []
    if len(text.encode("utf-8", errors="replace")) > MAX_FILE_BYTES:
        log.warning("shortcuts file too large; ignored", extra={"user_root": str(user_root)})
        return []
    if "\ufffd" in text or "\x00" in text:  # not UTF-8 text: a garbled file expands nothing
        return []
    return parse(text)


def expand(storage_root: Path, user_id: str, content: str) -> str:
    """`content` replaced by a shortcut's instruction when it is exactly (stripped) its trigger."""
    try:
        wanted = content.strip()
        if not wanted or len(wanted) > MAX_TRIGGER_CHARS:
            return content
        root = paths.user_root(storage_root, user_id)
        for shortcut in load(root):
            if shortcut.trigger == wanted:
                log.info("shortcut expanded", extra={"user_id": user_id, "trigger": shortcut.trigger})
                return shortcut.instruction
    except Exception:  # a broken shortcuts file must never block a message
        log.warning("shortcut expansion failed; message used as is", exc_info=True)
    return content
