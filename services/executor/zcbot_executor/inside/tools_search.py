"""Search tools served by the warm tool runner: glob and grep (stdlib only; see tools_fs.py;
run by the sandbox's python as the sandbox user: see inside/__init__.py).

Walks never follow symlinked folders and skip VCS/cache folders (`SKIP_DIRS`); results and
output are capped so a huge tree cannot flood the model.
"""

from __future__ import annotations

import os
import stat

from tools_fs import (
    BINARY_SNIFF,
    GLOB_MAX_RESULTS,
    GREP_LINE_CHARS,
    GREP_MAX_CHARS,
    GREP_MAX_FILE_BYTES,
    GREP_MAX_MATCHES,
    SKIP_DIRS,
    WALK_MAX_ENTRIES,
    ToolError,
    Workspace,
    _is_binary,
    _str_arg,
    open_regular,
)


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
            with open_regular(path, path) as fh:  # the file may have been swapped for a FIFO since the stat
                data = fh.read()
        except (OSError, ToolError):
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


TOOLS = {"glob": tool_glob, "grep": tool_grep}
