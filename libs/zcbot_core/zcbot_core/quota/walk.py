"""One iterative walk of a user tree by directory fd (no recursion, bounded depth, bounded fds).

A sandbox can build a tree of any depth (a loop of `mkdir d; cd d` makes thousands of levels), so
the walk keeps an explicit stack instead of recursing (a recursive walk raised RecursionError at
~1,000 levels and ended the meter's tick for every user), holds at most FD_WINDOW folder fds open
(deeper frames close their ancestors' fds and reopen them by name, one level at a time and never
following a symlink, when they are needed again), and stops descending at MAX_DEPTH levels and
after MAX_ENTRIES entries: the walk then reports itself incomplete (counted what it saw).

Each directory's entries are listed and lstat'ed at once (`os.scandir` on the fd), so no path is
ever built from names: a folder deeper than PATH_MAX is walked like any other.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from zcbot_core.safe_fs import resolve

MAX_DEPTH = 4096  # levels below the walk's top
MAX_ENTRIES = 2_000_000  # a walk stops here (and counts what it saw) rather than run forever
FD_WINDOW = 64  # folder fds one walk holds open at most

# visit(parent context, name, lstat) -> the child's context when the walk should descend into it
Visit = Callable[[Any, str, os.stat_result], Any]
Opened = Callable[[Any, int], None]  # called with each folder's context and open fd (watches)


@dataclass
class _Frame:
    ctx: Any
    name: str  # beneath the frame below it on the stack
    fd: int
    pending: list[tuple[str, Any]] = field(default_factory=list)  # subfolders still to walk


@dataclass
class WalkResult:
    entries: int = 0
    complete: bool = True


def walk(top_fd: int, top_ctx: Any, visit: Visit, opened: Opened | None = None, *,
         max_depth: int = MAX_DEPTH, max_entries: int = MAX_ENTRIES) -> WalkResult:
    """Every entry below the folder `top_fd` (not the top itself), parents before children. The
    caller keeps `top_fd` (it is never closed here); `opened` is not called for the top."""
    result = WalkResult()
    stack = [_Frame(top_ctx, "", top_fd)]
    _list(stack[0], visit, result, max_entries)
    try:
        while stack:
            frame = stack[-1]
            if not frame.pending or not result.complete:
                stack.pop()
                if frame.fd >= 0 and len(stack) > 0:
                    os.close(frame.fd)
                continue
            name, ctx = frame.pending.pop()
            if len(stack) > max_depth:
                result.complete = False
                continue
            try:
                fd = resolve.open_dir_at(_reopen(stack, len(stack) - 1), name)
            except OSError:
                continue  # gone, moved or swapped for a symlink/file since it was listed: its event follows
            child = _Frame(ctx, name, fd)
            stack.append(child)
            if len(stack) > FD_WINDOW:  # keep the window: the oldest open ancestor (never the top) closes
                old = stack[len(stack) - FD_WINDOW - 1]
                if old.fd >= 0 and old is not stack[0]:
                    os.close(old.fd)
                    old.fd = -1
            if opened is not None:
                opened(ctx, fd)
            _list(child, visit, result, max_entries)
    finally:
        for frame in stack[1:]:
            if frame.fd >= 0:
                os.close(frame.fd)
    return result


def _reopen(stack: list[_Frame], index: int) -> int:
    """The fd of stack[index], reopening it (and the closed frames above the nearest open one)."""
    if stack[index].fd >= 0:
        return stack[index].fd
    start = index
    while stack[start].fd < 0:
        start -= 1  # stack[0] (the caller's top fd) is always open
    for i in range(start + 1, index + 1):
        stack[i].fd = resolve.open_dir_at(stack[i - 1].fd, stack[i].name)
    return stack[index].fd


def _list(frame: _Frame, visit: Visit, result: WalkResult, max_entries: int) -> None:
    try:
        entries = list(os.scandir(frame.fd))
    except OSError:
        return
    for entry in entries:
        if result.entries >= max_entries:
            result.complete = False
            return
        result.entries += 1
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        ctx = visit(frame.ctx, entry.name, st)
        if ctx is not None and stat.S_ISDIR(st.st_mode):
            frame.pending.append((entry.name, ctx))
