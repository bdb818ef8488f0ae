"""Whole-tree operations on directory fds: scan, recursive removal, recursive chown.

Every child is reached with `openat(dfd, name, O_NOFOLLOW | O_DIRECTORY)` from its parent's fd, so
the walk cannot be redirected by a symlink swapped in while it runs. Depth is bounded (no
RecursionError, no fd exhaustion from a deliberately deep tree).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator

from zcbot_core.safe_fs import resolve

MAX_DEPTH = 128


def scan(dfd: int, limit: int | None = None) -> list[tuple[str, os.stat_result]]:
    out: list[tuple[str, os.stat_result]] = []
    with os.scandir(dfd) as it:
        for entry in it:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed while listing
            out.append((entry.name, st))
            if limit is not None and len(out) >= limit:
                break
    return out


def remove_entry(dfd: int, name: str, depth: int = 0) -> None:
    """Remove `name` in the folder `dfd`: unlink a non-folder, empty and rmdir a folder."""
    try:
        os.unlink(name, dir_fd=dfd)  # files and symlinks (never followed); EISDIR for folders
        return
    except IsADirectoryError:
        pass
    if depth >= MAX_DEPTH:
        raise OSError(errno.ELOOP, "folder tree too deep to remove")
    try:
        child = os.open(name, resolve.DIR_FLAGS, dir_fd=dfd)
    except NotADirectoryError:  # swapped for a file meanwhile
        os.unlink(name, dir_fd=dfd)
        return
    try:
        for entry, _st in scan(child):
            try:
                remove_entry(child, entry, depth + 1)
            except FileNotFoundError:
                continue
    finally:
        os.close(child)
    os.rmdir(name, dir_fd=dfd)


def chown_fd(fd: int, owner: tuple[int, int], recursive: bool, depth: int = 0) -> None:
    """fchown the object `fd` and, for a folder with `recursive`, everything under it."""
    uid, gid = owner
    st = os.fstat(fd)
    is_dir = stat.S_ISDIR(st.st_mode)
    if (st.st_uid, st.st_gid) != (uid, gid) and (is_dir or st.st_nlink <= 1):
        os.fchown(fd, uid, gid)
    if not (recursive and is_dir) or depth >= MAX_DEPTH:
        return
    for name, est in scan(fd):
        if stat.S_ISLNK(est.st_mode) or not (stat.S_ISDIR(est.st_mode) or stat.S_ISREG(est.st_mode)):
            continue  # symlinks are never followed; FIFOs, sockets and devices are not opened
        try:
            child = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError:
            continue  # gone or swapped for a symlink meanwhile
        try:
            cst = os.fstat(child)
            if stat.S_ISDIR(cst.st_mode) or stat.S_ISREG(cst.st_mode):
                chown_fd(child, owner, recursive, depth + 1)
        finally:
            os.close(child)


def walk_files(dfd: int, prefix: str, skip: Callable[[str], bool], max_depth: int,
               depth: int = 0, dirs: bool = False) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, lstat) of each regular file under the folder `dfd`, depth-first; folders are
    entered through O_NOFOLLOW | O_DIRECTORY from their parent's fd, symlinks never; names for
    which `skip(name)` is true are passed over (files and folders). `dirs`: each folder is yielded
    too, before what is in it."""
    for name, st in sorted(scan(dfd)):
        if skip(name):
            continue
        rel = f"{prefix}/{name}" if prefix else name
        if stat.S_ISREG(st.st_mode):
            yield rel, st
        elif stat.S_ISDIR(st.st_mode) and depth < min(max_depth, MAX_DEPTH):
            if dirs:
                yield rel, st
            try:
                child = os.open(name, resolve.DIR_FLAGS, dir_fd=dfd)
            except OSError:
                continue  # removed or swapped for a symlink meanwhile
            try:
                yield from walk_files(child, rel, skip, max_depth, depth + 1, dirs)
            finally:
                os.close(child)
