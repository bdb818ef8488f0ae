"""Filesystem tools served by the warm tool runner inside the sandbox: read, write, edit, glob, grep.

Stdlib only: this file is copied next to `tool_runner.py` and runs under the sandbox's python.

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
    """A problem the model caused (bad path, no match, ...): its message goes back as the result."""


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
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ToolError(f"argument '{name}' must be an integer")
    value = int(value)
    if value < lo:
        raise ToolError(f"argument '{name}' must be >= {lo}")
    return min(value, hi)


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head


def _read_text(path: str, shown: str, max_bytes: int) -> str:
    if not os.path.exists(path):
        raise ToolError(f"file not found: {shown}")
    if os.path.isdir(path):
        raise ToolError(f"{shown} is a directory, not a file")
    size = os.path.getsize(path)
    if size > max_bytes:
        raise ToolError(f"{shown} is {size} bytes; files over {max_bytes} bytes cannot be edited this way (use shell or run_python)")
    with open(path, "rb") as fh:
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
    huge = os.path.getsize(path) > 50 * 1024 * 1024
    with open(path, "rb") as fh:
        if _is_binary(fh.read(BINARY_SNIFF)):
            raise ToolError(f"{shown} is a binary file ({os.path.getsize(path)} bytes); use run_python to inspect it")
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
    return text, {"path": shown, "first_line": offset, "last_line": last, "total_lines": total}


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


def glob_regex(pattern: str):
    """Translate a glob (`*`, `?`, `[...]`, `{a,b}`, `**`) to a regex over '/'-separated paths."""
    import re

    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                if pattern.startswith("**/", i):
                    out.append("(?:.*/)?")
                    i += 3
                else:
                    out.append(".*")
                    i += 2
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 2)
            if j == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j
        elif c == "{":
            j = pattern.find("}", i)
            if j == -1:
                out.append(re.escape(c))
            else:
                alts = pattern[i + 1:j].split(",")
                out.append("(?:" + "|".join(glob_regex(a).pattern[1:-1] for a in alts) + ")")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("^" + "".join(out) + "$", re.S)


def _walk(base: str, max_depth: int | None):
    """(rel_path, is_dir) under base without following symlinked dirs; skips SKIP_DIRS."""
    seen = 0
    base_depth = base.rstrip("/").count("/")
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        depth = dirpath.rstrip("/").count("/") - base_depth
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        rel_dir = os.path.relpath(dirpath, base)
        prefix = "" if rel_dir == "." else rel_dir + "/"
        for name in dirnames:
            yield prefix + name, True
        for name in sorted(filenames):
            yield prefix + name, False
        seen += len(dirnames) + len(filenames)
        if seen > WALK_MAX_ENTRIES:
            return
        if max_depth is not None and depth + 1 >= max_depth:
            dirnames[:] = []


def tool_glob(ws: Workspace, args: dict, cwd: str) -> tuple[str, dict]:
    pattern = _str_arg(args, "pattern").strip()
    base = ws.resolve(args["path"], cwd) if args.get("path") else cwd
    if pattern.startswith("/"):
        prefix = ws.virtual.rstrip("/") + "/"
        if not pattern.startswith(prefix):
            raise ToolError(f"pattern {pattern!r} is outside /workspace: only your own files can be listed")
        base, pattern = ws.root, pattern[len(prefix):]
    if any(part == ".." for part in pattern.split("/")):
        raise ToolError("pattern must not contain '..'; pass the directory as path instead")
    if not os.path.isdir(base):
        raise ToolError(f"{ws.show(base, cwd)} is not a directory")
    rx = glob_regex(pattern)
    max_depth = None if "**" in pattern else pattern.count("/") + 1
    matches = [rel for rel, _ in _walk(base, max_depth) if rx.match(rel)]
    total = len(matches)
    shown = [ws.show(os.path.join(base, rel), cwd) for rel in matches[:GLOB_MAX_RESULTS]]
    if not shown:
        return f"no files match {pattern!r} in {ws.show(base, cwd) if base != cwd else 'the current folder'}", {"matches": 0}
    text = "\n".join(shown)
    if total > GLOB_MAX_RESULTS:
        text += f"\n[{total - GLOB_MAX_RESULTS} more matches not shown; narrow the pattern]"
    return text, {"matches": total}


def tool_grep(ws: Workspace, args: dict, cwd: str) -> tuple[str, dict]:
    import fnmatch
    import re

    pattern = _str_arg(args, "pattern")
    flags = re.IGNORECASE if args.get("case_insensitive") or args.get("ignore_case") else 0
    try:
        rx = re.compile(pattern, flags)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from None
    target = ws.resolve(args.get("path") or ".", cwd)
    file_glob = args.get("glob")
    if file_glob is not None and not isinstance(file_glob, str):
        raise ToolError("argument 'glob' must be a string")
    if not os.path.exists(target):
        raise ToolError(f"path not found: {ws.show(target, cwd)}")
    if os.path.isdir(target):
        files = (os.path.join(target, rel) for rel, is_dir in _walk(target, None) if not is_dir)
    else:
        files = iter([target])
    out: list[str] = []
    chars = matches = searched = 0
    capped = False
    for path in files:
        if file_glob and not (fnmatch.fnmatch(os.path.basename(path), file_glob)
                              or fnmatch.fnmatch(os.path.relpath(path, target), file_glob)):
            continue
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_size > GREP_MAX_FILE_BYTES:
                continue
            if not ws.inside(os.path.realpath(path)):
                continue
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        if _is_binary(data[:BINARY_SNIFF]):
            continue
        searched += 1
        shown = ws.show(path, cwd)
        for lineno, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
            if rx.search(line):
                matches += 1
                if capped:
                    continue
                entry = f"{shown}:{lineno}: {line[:GREP_LINE_CHARS]}"
                if matches > GREP_MAX_MATCHES or chars + len(entry) > GREP_MAX_CHARS:
                    capped = True
                    continue
                out.append(entry)
                chars += len(entry) + 1
    if not out:
        return f"no matches for /{pattern}/ ({searched} files searched)", {"matches": 0, "files_searched": searched}
    text = "\n".join(out)
    if capped:
        text += f"\n[{matches - len(out)} more matches not shown; narrow the pattern, path or glob]"
    return text, {"matches": matches, "files_searched": searched}


FS_TOOLS = {"read": tool_read, "write": tool_write, "edit": tool_edit, "glob": tool_glob, "grep": tool_grep}
