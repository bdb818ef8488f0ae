"""Filesystem tools served by the warm tool runner inside the sandbox: read, write, edit
(glob and grep are in tools_search.py), and the path rules they all share.

Stdlib only: this file is copied next to `tool_runner.py` and runs under the sandbox's python, as the
sandbox user (see inside/__init__.py).

Paths: relative to the call's cwd, or absolute under `/workspace` (the user root). Every path is
resolved with `realpath` (so `..` and symlinks are followed) and refused unless the result is still
inside the workspace: the sandbox's mount boundary is the real guard, this check gives the model a
clear message instead of touching the read-only system files it can also see.

Model mistakes raise `ToolError` (returned as ok=False with the message); nothing here should raise
anything else for bad input.
"""

from __future__ import annotations

import os
import stat

# `re`, `fnmatch` and `tempfile` are imported where needed: a cold runner starts faster without them.

READ_DEFAULT_LIMIT = 2000
READ_MAX_LIMIT = 20000
READ_MAX_CHARS = 15000  # the model sees 16K: read pages itself rather than being cut blindly
LINE_MAX_CHARS = 2000
BINARY_SNIFF = 8192
WRITE_MAX_BYTES = 20 * 1024 * 1024
EDIT_MAX_BYTES = 20 * 1024 * 1024
GLOB_MAX_RESULTS = 500
GREP_MAX_MATCHES = 300
GREP_MAX_CHARS = 15000
GREP_MAX_FILE_BYTES = 5 * 1024 * 1024
GREP_LINE_CHARS = 300
WALK_MAX_ENTRIES = 200_000
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", ".zcbot_procs", ".zcbot_tmp",
                       ".mypy_cache", ".pytest_cache"})


class ToolError(Exception):
    """A problem the model caused (bad path, no match, ...): its message goes back as the result.

    Outside the `ZcbotError` family on purpose: this module runs inside the sandbox as a top-level
    module (tool_runner.py), where `zcbot_core` is not importable."""


class Workspace:
    """Maps the model's view (`/workspace/...`) onto the real root the runner sees.

    Inside bwrap/docker both are `/workspace`; in unsafe mode the real root is the host folder.
    """

    def __init__(self, root: str, virtual: str = "/workspace") -> None:
        self.root = os.path.realpath(root)
        self.virtual = virtual.rstrip("/") or "/"

    def inside(self, real: str) -> bool:
        return real == self.root or real.startswith(self.root.rstrip("/") + "/")

    def to_virtual(self, real: str) -> str:
        if real == self.root:
            return self.virtual
        return self.virtual + real[len(self.root):]

    def to_real(self, virtual_path: str) -> str:
        """A `/workspace/...` path as the runner sees it (no checks: callers resolve() after)."""
        if virtual_path == self.virtual or virtual_path.startswith(self.virtual.rstrip("/") + "/"):
            return self.root + virtual_path[len(self.virtual):]
        return virtual_path

    def cwd(self, cwd_virtual: str) -> str:
        real = self.resolve(cwd_virtual or self.virtual, self.root, what="cwd")
        if not os.path.isdir(real):
            raise ToolError(f"working directory {cwd_virtual!r} does not exist")
        return real

    def resolve(self, path: object, cwd: str, what: str = "path") -> str:
        if not isinstance(path, str) or not path.strip():
            raise ToolError(f"{what} must be a non-empty string")
        if "\x00" in path:
            raise ToolError(f"{what} must not contain NUL bytes")
        p = path.strip()
        if p == "~" or p.startswith("~/"):
            p = self.virtual + p[1:]
        if os.path.isabs(p):
            norm = os.path.normpath(p)
            if norm != self.virtual and not norm.startswith(self.virtual.rstrip("/") + "/"):
                raise ToolError(f"{what} {path!r} is outside /workspace: only your own files under /workspace can be used")
            joined = self.root + norm[len(self.virtual):]
        else:
            joined = os.path.join(cwd, p)
        real = os.path.realpath(joined)
        if not self.inside(real):
            raise ToolError(f"{what} {path!r} resolves outside /workspace (through '..' or a symlink); access refused")
        return real

    def show(self, real: str, cwd: str) -> str:
        """How a path is shown to the model: relative to cwd when below it, else absolute."""
        if real.startswith(cwd.rstrip("/") + "/"):
            return real[len(cwd.rstrip("/")) + 1:]
        return self.to_virtual(real)


# ---- argument helpers ---------------------------------------------------------------------------


def _str_arg(args: dict, name: str, required: bool = True, allow_empty: bool = False) -> str | None:
    value = args.get(name)
    if value is None:
        if required:
            raise ToolError(f"missing required argument '{name}'")
        return None
    if not isinstance(value, str):
        raise ToolError(f"argument '{name}' must be a string")
    if not allow_empty and value == "":
        raise ToolError(f"argument '{name}' must not be empty")
    return value


def _int_arg(args: dict, name: str, default: int, lo: int, hi: int) -> int:
    value = args.get(name, default)
    if value is None:
        return default
    if isinstance(value, str) and value.strip().isdigit():  # models sometimes quote numbers
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ToolError(f"argument '{name}' must be an integer")
    value = int(value)
    if value < lo:
        raise ToolError(f"argument '{name}' must be >= {lo}")
    return min(value, hi)


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_regular(path: str, shown: str):
    """Open `path` for reading only if it is a regular file, decided on the opened fd.

    O_NONBLOCK makes the open itself return at once for a FIFO (a plain open blocks until a writer
    appears: that hung the user's sandbox for the call's whole timeout); the type is then checked
    with fstat on that fd, so a file swapped for a FIFO or device between a check and the open is
    still refused. Opening a socket fails (ENXIO), as does a device on the sandbox's nodev mount
    (EACCES): both are reported by their type.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ToolError(f"file not found: {shown}") from None
    except OSError as exc:
        try:  # only for the message: sockets fail with ENXIO, devices on a nodev mount with EACCES
            mode = os.lstat(path).st_mode
        except OSError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            kind = _kind(mode)
            raise ToolError(f"{shown} is {kind}; read only works on regular files") from None
        raise ToolError(f"cannot open {shown}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ToolError(f"{shown} is {_kind(mode)}; read only works on regular files")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _read_text(path: str, shown: str, max_bytes: int) -> str:
    if not os.path.exists(path):
        raise ToolError(f"file not found: {shown}")
    if os.path.isdir(path):
        raise ToolError(f"{shown} is a directory, not a file")
    with open_regular(path, shown) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > max_bytes:
            raise ToolError(f"{shown} is {size} bytes; files over {max_bytes} bytes cannot be edited this way (use shell or run_python)")
        data = fh.read()
    if _is_binary(data[:BINARY_SNIFF]):
        raise ToolError(f"{shown} is a binary file; use run_python to process it")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{shown} is not valid UTF-8 text; use run_python to process it") from None


def atomic_write(path: str, data: bytes) -> None:
    """Write `data` to `path` so readers see the old or the new file, never a mix: tmp, fsync, replace."""
    directory = os.path.dirname(path)
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = None
    tmp = os.path.join(directory, f".{os.path.basename(path)[:60]}.{os.urandom(6).hex()}.zcbot-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
            else:
                umask = os.umask(0)
                os.umask(umask)
                os.fchmod(fh.fileno(), 0o666 & ~umask)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


# ---- tools ---------------------------------------------------------------------------------------


def tool_read(ws: Workspace, args: dict, cwd: str) -> tuple[str, dict]:
    path = ws.resolve(_str_arg(args, "path"), cwd)
    shown = ws.show(path, cwd)
    offset = _int_arg(args, "offset", 1, 1, 10**9)
    limit = _int_arg(args, "limit", READ_DEFAULT_LIMIT, 1, READ_MAX_LIMIT)
    if not os.path.exists(path):
        raise ToolError(f"file not found: {shown}")
    if os.path.isdir(path):
        raise ToolError(f"{shown} is a directory; use glob to list its files")
    out: list[str] = []
    chars = 0
    last = offset - 1
    total = 0
    full = False  # the page is complete: only count the remaining lines (unless the file is huge)
    with open_regular(path, shown) as fh:
        size = os.fstat(fh.fileno()).st_size
        huge = size > 50 * 1024 * 1024
        if _is_binary(fh.read(BINARY_SNIFF)):
            raise ToolError(f"{shown} is a binary file ({size} bytes); use run_python to inspect it")
        fh.seek(0)
        for total, raw in enumerate(fh, start=1):
            if total < offset:
                continue
            if full or total >= offset + limit:
                if huge:
                    total = -1
                    break
                full = True
                continue
            line = raw.decode("utf-8", errors="replace").rstrip("\n").rstrip("\r")
            if len(line) > LINE_MAX_CHARS:
                line = line[:LINE_MAX_CHARS] + f"... [line cut at {LINE_MAX_CHARS} chars]"
            entry = f"{total:>6}\t{line}"
            if chars + len(entry) + 1 > READ_MAX_CHARS and out:
                full = True
                continue
            out.append(entry)
            chars += len(entry) + 1
            last = total
    if total == 0:
        return f"({shown} is empty)", {"path": shown, "total_lines": 0}
    if offset > total and total > 0:
        raise ToolError(f"offset {offset} is past the end of {shown} ({total} lines)")
    text = "\n".join(out)
    more = total == -1 or last < total
    if more:
        of = "" if total == -1 else f" of {total}"
        text += f"\n[showing lines {offset}-{last}{of}; call read with offset={last + 1} to continue]"
    return text, {"path": shown, "first_line": offset, "last_line": last, "total_lines": total, "truncated": more}


def tool_write(ws: Workspace, args: dict, cwd: str) -> tuple[str, dict]:
    path = ws.resolve(_str_arg(args, "path"), cwd)
    content = _str_arg(args, "content", allow_empty=True)
    shown = ws.show(path, cwd)
    data = content.encode("utf-8")
    if len(data) > WRITE_MAX_BYTES:
        raise ToolError(f"content is {len(data)} bytes; write accepts at most {WRITE_MAX_BYTES}")
    if os.path.isdir(path):
        raise ToolError(f"{shown} is a directory")
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    if not ws.inside(os.path.realpath(parent)):  # a symlink planted while we created the parents
        raise ToolError(f"path {shown!r} resolves outside /workspace; access refused")
    existed = os.path.exists(path)
    atomic_write(path, data)
    lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    verb = "overwrote" if existed else "created"
    return f"{verb} {shown} ({len(data)} bytes, {lines} lines)", {"path": shown, "bytes": len(data)}


def tool_edit(ws: Workspace, args: dict, cwd: str) -> tuple[str, dict]:
    path = ws.resolve(_str_arg(args, "path"), cwd)
    old = _str_arg(args, "old_str")
    new = _str_arg(args, "new_str", allow_empty=True)
    replace_all = bool(args.get("replace_all", False))
    shown = ws.show(path, cwd)
    if old == new:
        raise ToolError("old_str and new_str are identical; nothing to change")
    text = _read_text(path, shown, EDIT_MAX_BYTES)
    count = text.count(old)
    if count == 0:
        raise ToolError(
            f"old_str was not found in {shown} (0 matches). It must match the file exactly, including "
            "whitespace and indentation; read the file and copy the text."
        )
    if count > 1 and not replace_all:
        lines = []
        start = 0
        for _ in range(min(count, 5)):
            idx = text.index(old, start)
            lines.append(str(text.count("\n", 0, idx) + 1))
            start = idx + 1
        raise ToolError(
            f"old_str matches {count} times in {shown} (starting on lines {', '.join(lines)}); it must match "
            "exactly once. Include more surrounding lines to make it unique, or set replace_all=true."
        )
    updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    atomic_write(path, updated.encode("utf-8"))
    first = text.count("\n", 0, text.index(old)) + 1
    what = f"{count} occurrences" if replace_all and count > 1 else "1 occurrence"
    return f"edited {shown}: replaced {what} (first at line {first})", {"path": shown, "replacements": count if replace_all else 1}


TOOLS = {"read": tool_read, "write": tool_write, "edit": tool_edit}
