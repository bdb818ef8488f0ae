"""The single place user paths are checked (seed 003 §7.4).

- `validate_task_name`: display names and folder names (no empty, `/`, `\\`, NUL, leading `.`).
- `to_db_path`: working dirs are stored relative to the user root as normalized posix strings.
- `resolve_user_path`: a check of where a path leads now (symlinks followed); it is no way to reach
  a file, since the tree may change right after. Files in a user tree are reached only through
  `zcbot_core.safe_fs` (docs/security.md, layer 2; tests/security/test_fs_rule.py enforces it).
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path, PurePosixPath

from zcbot_core.errors import ZcbotError

MAX_NAME = 200
_USER_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class PathRejected(ZcbotError, ValueError):
    """A user-supplied path or name that is not allowed (the caller's fault: maps to 400)."""

    code = "path_rejected"
    http_status = 400


def _require_text(value: str, what: str) -> None:
    """Lone surrogates (legal in JSON `\\ud800` escapes) are no text a file name or Postgres can hold."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PathRejected(f"{what} must be valid Unicode text") from None


def validate_task_name(name: str, what: str = "name") -> str:
    if not isinstance(name, str):
        raise PathRejected(f"{what} must be a string")
    _require_text(name, what)
    stripped = name.strip()
    if not stripped:
        raise PathRejected(f"{what} must not be empty")
    if len(stripped) > MAX_NAME:
        raise PathRejected(f"{what} must be at most {MAX_NAME} characters")
    if any(ch in stripped for ch in ("/", "\\", "\x00")):
        raise PathRejected(f"{what} must not contain '/', '\\' or NUL")
    if stripped.startswith("."):
        raise PathRejected(f"{what} must not start with '.'")
    if any(ord(ch) < 32 for ch in stripped):
        raise PathRejected(f"{what} must not contain control characters")
    return stripped


def validate_user_id(user_id: str) -> str:
    """User ids name a directory and a subject token, so they are restricted to a safe alphabet."""
    if not isinstance(user_id, str) or not _USER_ID.match(user_id):
        raise PathRejected("user_id must be 1-128 characters of letters, digits, '_' or '-'")
    return user_id


def normalize_rel(path: str, *, allow_empty: bool = True, allow_hidden: bool = True) -> str:
    """Normalize a user-relative posix path; reject absolute, traversal, NUL and backslashes."""
    if not isinstance(path, str):
        raise PathRejected("path must be a string")
    _require_text(path, "path")
    if "\x00" in path:
        raise PathRejected("path must not contain NUL")
    if "\\" in path:
        raise PathRejected("path must use '/' separators")
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        raise PathRejected("path must be relative to your root")
    parts: list[str] = []
    for part in PurePosixPath(path).parts:
        if part in ("", "."):
            continue
        if part == "..":
            raise PathRejected("path must not contain '..'")
        if not allow_hidden and part.startswith("."):
            raise PathRejected("path must not name hidden files")
        parts.append(part)
    result = posixpath.join(*parts) if parts else ""
    if not result and not allow_empty:
        raise PathRejected("path must not be empty")
    return result


def to_db_path(path: str) -> str:
    """A working dir as stored: normalized relative posix, never empty (the root is not a task folder)."""
    rel = normalize_rel(path, allow_empty=False)
    for part in rel.split("/"):
        validate_task_name(part, "folder name")
    return rel


def user_root(storage_root: Path, user_id: str) -> Path:
    return storage_root / validate_user_id(user_id)


def resolve_user_path(root: Path, rel: str, *, must_exist: bool = False) -> Path:
    """Absolute path of `rel` inside `root`; symlinks anywhere on the way must stay inside."""
    norm = normalize_rel(rel)
    root_real = Path(os.path.realpath(root))
    candidate = root_real / norm if norm else root_real
    real = Path(os.path.realpath(candidate))
    if real != root_real and root_real not in real.parents:
        raise PathRejected("path escapes your root")
    if must_exist and not real.exists():
        raise PathRejected("path does not exist")
    return candidate


class FileInTheWay(PathRejected):
    """A file stands where a folder must be created (the HTTP edge answers 409)."""

    code = "file_in_the_way"


def make_user_dir(root: Path, rel: str, owner: tuple[int, int] | None = None) -> Path:
    """mkdir -p `rel` under the user root through `safe_fs` (each level made beneath the root's fd,
    never through a symlink: `SymlinkRefused` 400, a file in the way `FileInTheWay` 409)."""
    from zcbot_core import safe_fs  # safe_fs builds on this module's checks and errors

    norm = normalize_rel(rel)
    with safe_fs.Root.open(root, create=True, owner=owner) as user:
        user.makedirs(norm, owner=owner)
    return root / norm if norm else root


def is_prefix_nested(a: str, b: str) -> bool:
    """True when one working dir is strictly inside the other (the no-subtask rule)."""
    if a == b:
        return False
    return a.startswith(b + "/") or b.startswith(a + "/")
