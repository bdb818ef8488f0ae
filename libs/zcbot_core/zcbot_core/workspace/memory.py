"""Two-layer user memory on the filesystem (seed 003 §3.7). Memory never goes into the database.

Layout under each user root (the agent sees the user root as `/workspace`):

    .memory/core.md              core memory: put in full (capped) into every system prompt
    .memory/extended/<topic>.md  extended memory: only an index (frontmatter `description`, legacy:
                                 the first line) goes into the prompt; the agent `read`s on demand
    .memory/shortcuts.md         shortcuts (see `zcbot_core.workspace.shortcuts`): never put into the prompt

- The agent maintains memory itself with its ordinary fs tools; `memory_block` tells it where the
  files are and the contract (check for duplicates first, keep core short). The block is present
  even when memory is empty, so a first session knows where to write (cold start).
- The web API is read-only (`GET /v1/memory*`); changes go through the conversation.
- This module is where memory file names are checked: extended files must match
  `[A-Za-z0-9_-]+\\.md` (`validate_extended_name`); everything is read through `zcbot_core.safe_fs`
  (resolved beneath the user root's fd, no symlink ever followed, so a folder swapped for a symlink
  by the sandbox is refused); only regular files are read (a FIFO cannot hang the caller) and reads
  are size-capped.
"""

from __future__ import annotations

import logging
import re
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from zcbot_core import safe_fs
from zcbot_core.safe_fs import paths

log = logging.getLogger(__name__)

MEMORY_DIR = ".memory"
CORE_FILE = "core.md"
EXTENDED_DIR = "extended"
SANDBOX_ROOT = "/workspace"  # the user root as the agent's tools see it
CORE_PATH = f"{SANDBOX_ROOT}/{MEMORY_DIR}/{CORE_FILE}"
EXTENDED_PATH = f"{SANDBOX_ROOT}/{MEMORY_DIR}/{EXTENDED_DIR}"
SHORTCUTS_PATH = f"{SANDBOX_ROOT}/{MEMORY_DIR}/shortcuts.md"

CORE_MAX_CHARS = 8_000  # what goes into the prompt
MAX_INDEX_ENTRIES = 100
MAX_DESCRIPTION = 200
MAX_FILE_BYTES = 1_000_000  # any single memory file read by the host
HEAD_BYTES = 4_096  # enough to find the frontmatter / first line of an extended file

_EXTENDED_NAME = re.compile(r"^[A-Za-z0-9_-]{1,120}\.md$")


@dataclass(frozen=True)
class ExtendedEntry:
    filename: str
    description: str
    size: int
    mtime: str  # ISO 8601, UTC


def validate_extended_name(filename: str) -> str:
    """An extended memory file name (`topic.md`); anything else (traversal, dotfiles) is rejected."""
    if not isinstance(filename, str) or not _EXTENDED_NAME.match(filename):
        raise paths.PathRejected("memory file names must be letters, digits, '_' or '-' ending in '.md'")
    return filename


def _rel(*parts: str) -> str:
    return "/".join((MEMORY_DIR, *parts))


def read_memory_file(user_root: Path, rel: str, max_bytes: int = MAX_FILE_BYTES) -> str | None:
    """Text of `rel` (relative to the user root) or None when absent, not a regular file, or behind a
    symlink (never followed: `safe_fs`). At most `max_bytes` are read; undecodable bytes are replaced.
    """
    try:
        with safe_fs.Root.open(user_root) as root:
            return root.read_text(rel, max_bytes)
    except safe_fs.SymlinkRefused:
        log.warning("memory file behind a symlink; ignored", extra={"rel": rel})
        return None
    except paths.PathRejected:
        return None


def read_core(user_root: Path, max_chars: int | None = CORE_MAX_CHARS) -> str:
    """core.md ("" when absent); longer than `max_chars` -> cut, with a note saying so."""
    text = read_memory_file(user_root, _rel(CORE_FILE)) or ""
    text = text.strip()
    if max_chars is not None and len(text) > max_chars:
        text = (
            text[:max_chars].rstrip()
            + f"\n[... cut: core.md has {len(text)} characters; keep it under {max_chars} by moving details"
            " into extended files]"
        )
    return text


def describe(text: str) -> str:
    """Frontmatter `description:`; legacy files without one: their first non-empty line."""
    lines = text.splitlines()
    body = lines
    if lines and lines[0].strip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
        for line in lines[1:end]:
            key, sep, value = line.partition(":")
            if sep and key.strip().lower() == "description" and value.strip():
                return _one_line(value.strip().strip("'\""))
        body = lines[end + 1:] if end is not None else lines[1:]
    for line in body:
        stripped = line.strip().lstrip("#").strip()
        if stripped:
            return _one_line(stripped)
    return ""


def _one_line(value: str) -> str:
    value = " ".join(value.split())
    return value if len(value) <= MAX_DESCRIPTION else value[: MAX_DESCRIPTION - 1].rstrip() + "…"


def list_extended(user_root: Path, limit: int | None = None) -> list[ExtendedEntry]:
    """Extended memory files with valid names, sorted by name (symlinks and non-files skipped)."""
    out: list[ExtendedEntry] = []
    try:
        with safe_fs.Root.open(user_root) as root, root.sub(_rel(EXTENDED_DIR)) as folder:
            for name, st in sorted(folder.listdir()):
                if not _EXTENDED_NAME.match(name) or not stat.S_ISREG(st.st_mode):
                    continue
                try:
                    head = folder.read_text(name, HEAD_BYTES)
                except paths.PathRejected:
                    continue  # swapped or removed meanwhile
                mtime = datetime.fromtimestamp(st.st_mtime, timezone.utc).isoformat()
                out.append(ExtendedEntry(filename=name, description=describe(head), size=st.st_size, mtime=mtime))
                if limit is not None and len(out) >= limit:
                    break
    except paths.PathRejected:
        return out
    return out


def read_extended(user_root: Path, filename: str, max_bytes: int = MAX_FILE_BYTES) -> str:
    """Content of one extended file. PathRejected for a bad name; FileNotFoundError when absent."""
    name = validate_extended_name(filename)
    text = read_memory_file(user_root, _rel(EXTENDED_DIR, name), max_bytes)
    if text is None:
        raise FileNotFoundError(name)
    return text


CONTRACT = f"""## Memory
Facts about the user that hold across tasks live in `{SANDBOX_ROOT}/{MEMORY_DIR}/` (plain files you edit):
- `{CORE_PATH}` — core memory, shown below on every run. Keep it short (well under {CORE_MAX_CHARS} characters):
  who the user is, lasting preferences, standing instructions.
- `{EXTENDED_PATH}/<topic>.md` — extended memory, one topic per file (name: letters, digits, `_` or `-`, then
  `.md`). Start each file with frontmatter `---` / `description: <one line>` / `---`. Only the index below is
  shown; `read` a file when its topic matters.

You maintain memory yourself with your file tools (there is no separate memory tool):
- Write down what will matter in later tasks: a preference the user states, a correction, a fact about their
  work, or anything they ask you to remember. Do not store secrets (passwords, keys, tokens) or one-off details.
- Before writing, read the file and the index and update an existing entry rather than adding a duplicate;
  fix or remove entries the user says are wrong.
- Keep core.md short: move details into an extended topic file and leave a one-line pointer in core.
- Shortcuts: when the user asks for one, add a line ``- `trigger`: full instruction`` to `{SHORTCUTS_PATH}`.
  A message that is exactly a trigger is replaced by its instruction before you see it."""


def memory_block(user_root: Path) -> str:
    """The memory section of the system prompt: contract, core content and the extended index.

    Rebuilt for every run (memory edits apply at once); never fails (an unreadable memory is empty).
    """
    try:
        core = read_core(user_root)
        index = list_extended(user_root, limit=MAX_INDEX_ENTRIES + 1)
    except Exception:  # memory must never stop a run
        log.warning("could not read memory; continuing without it", exc_info=True)
        core, index = "", []
    lines = [CONTRACT, "", f"### Core memory (`{CORE_PATH}`)", core or "(empty)", "",
             f"### Extended memory index (`{EXTENDED_PATH}/`)"]
    if not index:
        lines.append("(none yet)")
    for entry in index[:MAX_INDEX_ENTRIES]:
        lines.append(f"- `{entry.filename}` — {entry.description or '(no description)'}")
    if len(index) > MAX_INDEX_ENTRIES:
        lines.append(f"- ... more files in `{EXTENDED_PATH}/` (list the folder to see them)")
    return "\n".join(lines)
