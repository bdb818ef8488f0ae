"""The executor's inotify meter of user roots (see zcbot_core/quota/__init__.py for the design)."""

from __future__ import annotations

import ctypes
import logging
import os
import stat
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from zcbot_core import safe_fs
from zcbot_core.quota import Ledger, entry_bytes, walk_entries

log = logging.getLogger(__name__)

DEGRADED_REMEASURE_SECONDS = 30.0

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF = 0x400, 0x800
IN_Q_OVERFLOW, IN_IGNORED, IN_ISDIR = 0x4000, 0x8000, 0x40000000
IN_ONLYDIR, IN_DONT_FOLLOW, IN_EXCL_UNLINK = 0x01000000, 0x02000000, 0x04000000
WATCH_MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
              | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
_EVENT = struct.Struct("iIII")
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class _Tree:
    user_id: str
    path: Path
    sizes: dict[str, int] = field(default_factory=dict)  # rel ("" is the root) -> bytes
    watches: dict[int, str] = field(default_factory=dict)  # wd -> folder rel
    dirty: set[str] = field(default_factory=set)
    rescan: bool = False
    degraded: bool = False  # a watch could not be added (inotify's limit): re-measured, at most so often
    measured_at: float = 0.0
    recorded: int = -1  # the total last written to the ledger

    total: int = 0  # sum of `sizes`, kept as entries change (no pass over the map per refresh)

    def put(self, rel: str, nbytes: int) -> None:
        self.total += nbytes - self.sizes.get(rel, 0)
        self.sizes[rel] = nbytes

    def drop(self, rel: str) -> None:
        self.total -= self.sizes.pop(rel, 0)


class TreeMeter:
    """Live usage of the user roots this executor serves (see the module docstring)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.trees: dict[str, _Tree] = {}
        self.by_wd: dict[int, _Tree] = {}
        self.lock = threading.Lock()

    def close(self) -> None:
        with self.lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            self.trees.clear()
            self.by_wd.clear()

    # watches: added on a folder fd opened beneath the root (never by a path a sandbox could swap)
    def _watch(self, tree: _Tree, dfd: int, rel: str) -> None:
        wd = _libc.inotify_add_watch(self.fd, f"/proc/self/fd/{dfd}".encode(), WATCH_MASK & ~IN_DONT_FOLLOW)
        if wd < 0:
            log.warning("inotify watch failed; the user's usage is re-measured instead",
                        extra={"user_id": tree.user_id, "errno": ctypes.get_errno()})
            tree.rescan = tree.degraded = True
            return
        tree.watches[wd] = rel
        self.by_wd[wd] = tree

    def _scan(self, tree: _Tree, root: safe_fs.Root, rel: str) -> None:
        """Measure and watch the folder `rel` and everything below it."""
        try:
            dfd = root.open_dir(rel)
        except safe_fs.SafeFsError:
            return
        try:
            tree.put(rel, entry_bytes(os.fstat(dfd)))
            self._watch(tree, dfd, rel)
            for child, st in walk_entries(dfd, rel, [0]):
                tree.put(child, entry_bytes(st))
                if stat.S_ISDIR(st.st_mode):
                    try:
                        sub = root.open_dir(child)
                    except safe_fs.SafeFsError:
                        continue
                    try:
                        self._watch(tree, sub, child)
                    finally:
                        os.close(sub)
        finally:
            os.close(dfd)

    def _forget_below(self, tree: _Tree, rel: str) -> None:
        prefix = rel + "/"
        tree.drop(rel)
        if not any(folder == rel or folder.startswith(prefix) for folder in tree.watches.values()):
            return  # not a folder we watch: nothing else is below it
        for key in [k for k in tree.sizes if k.startswith(prefix)]:
            tree.drop(key)
        for wd, folder in list(tree.watches.items()):
            if folder == rel or folder.startswith(prefix):
                del tree.watches[wd]
                self.by_wd.pop(wd, None)
                _libc.inotify_rm_watch(self.fd, wd)

    def _measure_tree(self, tree: _Tree) -> None:
        for wd in list(tree.watches):
            self.by_wd.pop(wd, None)
            _libc.inotify_rm_watch(self.fd, wd)
        tree.watches.clear()
        tree.sizes.clear()
        tree.total = 0
        tree.dirty.clear()
        tree.rescan = tree.degraded = False
        tree.measured_at = time.monotonic()
        try:
            with safe_fs.Root.open(tree.path) as root:
                self._scan(tree, root, "")
        except safe_fs.SafeFsError:
            pass

    def track(self, user_id: str, user_root: Path) -> int:
        """Start metering a user root (measured once); its current usage, also written to the ledger."""
        with self.lock:
            tree = self.trees.get(user_id)
            if tree is None:
                tree = self.trees[user_id] = _Tree(user_id, Path(user_root))
                self._measure_tree(tree)
                return self._record(tree)
        return self.refresh(user_id)

    def forget(self, user_id: str) -> None:
        with self.lock:
            tree = self.trees.pop(user_id, None)
            if tree is not None:
                for wd in tree.watches:
                    self.by_wd.pop(wd, None)
                    _libc.inotify_rm_watch(self.fd, wd)

    def _read_events(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 256 * 1024)
            except BlockingIOError:
                return
            pos = 0
            while pos + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
                name = data[pos + _EVENT.size: pos + _EVENT.size + length].rstrip(b"\0").decode("utf-8", "surrogateescape")
                pos += _EVENT.size + length
                if mask & IN_Q_OVERFLOW:
                    for tree in self.trees.values():
                        tree.rescan = True
                    continue
                tree = self.by_wd.get(wd)
                if tree is None:
                    continue
                folder = tree.watches.get(wd)
                if mask & IN_IGNORED:
                    tree.watches.pop(wd, None)
                    self.by_wd.pop(wd, None)
                    continue
                if folder is None:
                    continue
                if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                    if folder == "":
                        tree.rescan = True  # the root itself went away or moved
                    continue
                rel = f"{folder}/{name}" if folder and name else (name or folder)
                if mask & (IN_DELETE | IN_MOVED_FROM):
                    self._forget_below(tree, rel)
                    tree.dirty.discard(rel)
                else:
                    tree.dirty.add(rel)
                    tree.dirty.add(folder)  # a folder's own blocks grow with its entries

    def refresh(self, user_id: str) -> int:
        """Apply the reported changes (re-stat only those entries); the user's usage, in the ledger."""
        with self.lock:
            if self.fd < 0:
                return 0
            self._read_events()
            tree = self.trees.get(user_id)
            if tree is None:
                return 0
            self._apply(tree)
            return self._record(tree)

    def refresh_all(self) -> dict[str, int]:
        """Every metered user's usage after applying the changes (the executor's periodic tick)."""
        with self.lock:
            if self.fd < 0:
                return {}
            self._read_events()
            out = {}
            for user_id, tree in self.trees.items():
                self._apply(tree)
                out[user_id] = self._record(tree)
            return out

    def _record(self, tree: _Tree) -> int:
        total = tree.total
        if total != tree.recorded:
            self.ledger.set(tree.user_id, total)
            tree.recorded = total
        return total

    def _apply(self, tree: _Tree) -> bool:
        if tree.rescan:
            if tree.degraded and time.monotonic() - tree.measured_at < DEGRADED_REMEASURE_SECONDS:
                return False
            self._measure_tree(tree)
            return True
        if not tree.dirty:
            return False
        dirty, tree.dirty = tree.dirty, set()
        try:
            with safe_fs.Root.open(tree.path) as root:
                for rel in sorted(dirty, key=len):
                    try:
                        st = root.lstat(rel)
                    except safe_fs.SafeFsError:
                        st = None
                    if st is None:
                        self._forget_below(tree, rel)
                    elif stat.S_ISDIR(st.st_mode) and rel not in tree.sizes:
                        self._scan(tree, root, rel)  # a new (or moved-in) folder: measure and watch it
                    else:
                        tree.put(rel, entry_bytes(st))
        except safe_fs.SafeFsError:
            tree.rescan = True
        return True
