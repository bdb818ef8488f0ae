"""zcbot_core.workspace.memory and zcbot_core.workspace.shortcuts on plain directories (no services needed)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from zcbot_core.safe_fs import paths
from zcbot_core.workspace import memory, shortcuts


def write(root: Path, rel: str, text: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# ---- memory ----------------------------------------------------------------------------------


def test_memory_block_is_present_when_memory_is_empty(tmp_path: Path) -> None:
    for root in (tmp_path / "missing", tmp_path):
        block = memory.memory_block(root)
        assert "/workspace/.memory/core.md" in block
        assert "/workspace/.memory/extended/<topic>.md" in block
        assert "/workspace/.memory/shortcuts.md" in block
        assert "Before writing" in block and "duplicate" in block and "short" in block
        assert "(empty)" in block and "(none yet)" in block


def test_memory_block_core_and_index(tmp_path: Path) -> None:
    write(tmp_path, ".memory/core.md", "# Me\nPrefers Chinese slides.\n")
    write(tmp_path, ".memory/extended/clients.md", "---\ndescription: 'Key clients and contacts'\n---\nACME\n")
    write(tmp_path, ".memory/extended/legacy_notes.md", "\n# Old style notes\nbody\n")
    write(tmp_path, ".memory/extended/no-desc.md", "---\ntitle: x\n---\n\nfirst body line\n")
    write(tmp_path, ".memory/extended/bad name.md", "ignored")
    write(tmp_path, ".memory/extended/.hidden.md", "ignored")
    write(tmp_path, ".memory/extended/notes.txt", "ignored")
    write(tmp_path, ".memory/shortcuts.md", "- `secret-trigger`: never in the prompt\n")
    block = memory.memory_block(tmp_path)
    assert "Prefers Chinese slides." in block
    assert "- `clients.md` — Key clients and contacts" in block
    assert "- `legacy_notes.md` — Old style notes" in block
    assert "- `no-desc.md` — first body line" in block
    for absent in ("bad name", ".hidden", "notes.txt", "secret-trigger", "never in the prompt"):
        assert absent not in block


def test_core_is_capped_in_the_prompt(tmp_path: Path) -> None:
    write(tmp_path, ".memory/core.md", "x" * (memory.CORE_MAX_CHARS * 3))
    block = memory.memory_block(tmp_path)
    assert "x" * memory.CORE_MAX_CHARS in block and "x" * (memory.CORE_MAX_CHARS + 1) not in block
    assert "cut: core.md has" in block
    assert len(memory.read_core(tmp_path, max_chars=None)) == memory.CORE_MAX_CHARS * 3


@pytest.mark.parametrize("name", ["a.md", "A_b-9.md", "x" * 120 + ".md"])
def test_extended_names_ok(name: str) -> None:
    assert memory.validate_extended_name(name) == name


@pytest.mark.parametrize(
    "name", ["", ".md", "a.txt", "a", "../a.md", "a/b.md", ".a.md", "a b.md", "a\x00.md", "a.md.bak", "ä.md",
             "x" * 121 + ".md", "..", "a.MD"],
)
def test_extended_names_rejected(name: str) -> None:
    with pytest.raises(paths.PathRejected):
        memory.validate_extended_name(name)


def test_memory_reads_are_safe(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside, "secret.md", "---\ndescription: TOP SECRET\n---\n")
    root = tmp_path / "root"
    (root / ".memory" / "extended").mkdir(parents=True)
    os.symlink(outside / "secret.md", root / ".memory" / "core.md")
    os.symlink(outside / "secret.md", root / ".memory" / "extended" / "leak.md")
    os.mkfifo(root / ".memory" / "extended" / "fifo.md")
    started = time.monotonic()
    block = memory.memory_block(root)
    assert time.monotonic() - started < 2  # a FIFO is never opened for reading
    assert "TOP SECRET" not in block and "leak.md" not in block and "fifo.md" not in block
    with pytest.raises(FileNotFoundError):
        memory.read_extended(root, "leak.md")
    with pytest.raises(FileNotFoundError):
        memory.read_extended(root, "fifo.md")
    # A whole .memory folder linked out of the root is ignored too.
    other = tmp_path / "root2"
    other.mkdir()
    os.symlink(outside, other / ".memory")
    assert memory.list_extended(other) == [] and memory.read_core(other) == ""


# ---- shortcuts -------------------------------------------------------------------------------

SHORTCUTS_MD = """# Shortcuts

Some prose that is ignored.
- `daily`: Summarize today's work as a daily report in daily.md.
- `周报`：把本周的工作整理成周报
  第二行也属于这条指令
- `deck` => Make a 10-slide deck from notes.md.
weekly => Write the weekly brief.
- `daily`: a duplicate trigger (ignored: the first wins)
- `empty`:
* `star`: star bullets work too
"""


@pytest.fixture
def user_settings(tmp_path: Path) -> SimpleNamespace:
    return SimpleNamespace(storage_root=tmp_path)


def test_parse_format() -> None:
    got = {s.trigger: s.instruction for s in shortcuts.parse(SHORTCUTS_MD)}
    assert got == {
        "daily": "Summarize today's work as a daily report in daily.md.",
        "周报": "把本周的工作整理成周报\n第二行也属于这条指令",
        "deck": "Make a 10-slide deck from notes.md.",
        "weekly": "Write the weekly brief.",
        "star": "star bullets work too",
    }


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("daily", "Summarize today's work as a daily report in daily.md."),
        ("  daily \n", "Summarize today's work as a daily report in daily.md."),
        ("周报", "把本周的工作整理成周报\n第二行也属于这条指令"),
        ("weekly", "Write the weekly brief."),
        ("Daily", "Daily"),  # case-sensitive
        ("daily please", "daily please"),  # whole message only
        ("please run daily", "please run daily"),
        ("empty", "empty"),
        ("", ""),
    ],
)
def test_expand(user_settings: SimpleNamespace, tmp_path: Path, message: str, expected: str) -> None:
    write(tmp_path / "alice", ".memory/shortcuts.md", SHORTCUTS_MD)
    assert shortcuts.expand(user_settings.storage_root, "alice", message) == expected


@pytest.mark.parametrize(
    "content",
    [None, b"\xff\xfe- `daily`: x\n\x00\x01", "- `daily`: " + "x" * (shortcuts.MAX_FILE_BYTES + 10), "not a list at all"],
)
def test_expand_leaves_content_unchanged_for_missing_or_garbled_files(
    user_settings: SimpleNamespace, tmp_path: Path, content: str | bytes | None
) -> None:
    if content is not None:
        write(tmp_path / "alice", ".memory/shortcuts.md", content)
    assert shortcuts.expand(user_settings.storage_root, "alice", "daily") == "daily"


def test_expand_ignores_bad_user_ids_and_escaping_files(user_settings: SimpleNamespace, tmp_path: Path) -> None:
    assert shortcuts.expand(user_settings.storage_root, "../etc", "daily") == "daily"
    outside = write(tmp_path / "elsewhere", "s.md", "- `daily`: leaked\n")
    (tmp_path / "bob" / ".memory").mkdir(parents=True)
    os.symlink(outside, tmp_path / "bob" / ".memory" / "shortcuts.md")
    assert shortcuts.expand(user_settings.storage_root, "bob", "daily") == "daily"
