"""The executor's inotify meter of user roots (see zcbot_core/quota/__init__.py for the design).

One bounded structure per user root: a tree of nodes (name, parent, allocated bytes, inode; a
folder also has its children by name and its inotify watch), so

- an event (watch, name) finds its node in O(1), and dropping a subtree (a delete, a move out)
  costs the size of that subtree: deleting n folders is O(n) (the old map of relative paths
  scanned every key per deleted folder: 8,000 folders took 31 s under the lock tool calls wait on);
- a name that was moved in (`IN_MOVED_TO`, `mv -T y x` over a folder) or whose inode changed is
  dropped and walked again, so a replaced folder's contents are counted;
- walks are iterative and bounded (quota/walk.py), and folders are opened level by level from the
  root's fd by name (never by a built path: a tree deeper than PATH_MAX is still reachable);
- one tree's failure (an error walking or applying) is logged and contained to its user: that tree
  is re-measured later; the others' tick goes on.

What no inotify meter can see (a file with no name, a write between two ticks) is the kernel's to
refuse (quota/kernel.py); this meter is then only the report.
"""

from __future__ import annotations

import ctypes
import logging
import os
import stat
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from zcbot_core import safe_fs
from zcbot_core.quota import Ledger, entry_bytes, walk
from zcbot_core.safe_fs import resolve

log = logging.getLogger(__name__)

DEGRADED_REMEASURE_SECONDS = 30.0

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF = 0x400, 0x800
IN_Q_OVERFLOW, IN_IGNORED, IN_ISDIR = 0x4000, 0x8000, 0x40000000
IN_ONLYDIR, IN_DONT_FOLLOW, IN_EXCL_UNLINK = 0x01000000, 0x02000000, 0x04000000
WATCH_MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
              | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)
_EVENT = struct.Struct("iIII")
_libc = ctypes.CDLL(None, use_errno=True)
OPEN_CHUNK = 3000  # bytes of a relative path resolved in one openat2 (below PATH_MAX)


class _Node:
    __slots__ = ("name", "parent", "size", "ino", "children", "wd", "dead")

    def __init__(self, name: str, parent: "_Node | None", st: os.stat_result) -> None:
        self.name = name
        self.parent = parent
        self.size = entry_bytes(st)
        self.ino = st.st_ino
        self.children: dict[str, _Node] | None = {} if stat.S_ISDIR(st.st_mode) else None
        self.wd = -1
        self.dead = False

    def names(self) -> list[str]:
        """The names from the root down to this node (the root: [])."""
        out: list[str] = []
        node: _Node | None = self
        while node is not None and node.parent is not None:
            out.append(node.name)
            node = node.parent
        out.reverse()
        return out

    def depth(self) -> int:
        n, node = 0, self.parent
        while node is not None:
            n, node = n + 1, node.parent
        return n


class _Tree:
    def __init__(self, user_id: str, path: Path) -> None:
        self.user_id = user_id
        self.path = path
        self.root: _Node | None = None
        self.total = 0  # sum of every node's size, kept as nodes change
        self.entries = 0
        self.dirty: dict[tuple[int, str], tuple[_Node, str]] = {}  # (id(parent), name) -> (parent, name)
        self.replaced: set[tuple[int, str]] = set()  # names moved in: walked again whatever they were
        self.rescan = False
        self.degraded = False  # a watch could not be added, or the walk was cut: re-measured, at most so often
        self.measured_at = 0.0
        self.recorded = -1  # the total last written to the ledger

    def mark(self, parent: _Node, name: str, replaced: bool = False) -> None:
        key = (id(parent), name)
        self.dirty[key] = (parent, name)
        if replaced:
            self.replaced.add(key)


class TreeMeter:
    """Live usage of the user roots this executor serves (see the module docstring)."""

    def __init__(self, ledger: Ledger, kernel_usage: Callable[[str], int | None] | None = None) -> None:
        self.ledger = ledger
        self.kernel_usage = kernel_usage  # the kernel quota's own count (sees files with no name)
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.trees: dict[str, _Tree] = {}
        self.by_wd: dict[int, tuple[_Tree, _Node]] = {}
        self.lock = threading.Lock()

    def close(self) -> None:
        with self.lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            self.trees.clear()
            self.by_wd.clear()

    # ---- reading the structure ----------------------------------------------------------------
    def usage(self, user_id: str) -> int:
        tree = self.trees.get(user_id)
        return tree.total if tree is not None else 0

    def size_of(self, user_id: str, rel: str) -> int:
        """What the meter counts for the entry `rel` of a user root (0: not known)."""
        with self.lock:
            tree = self.trees.get(user_id)
            node = tree.root if tree is not None else None
            for part in (rel.split("/") if rel and rel != "." else []):
                if node is None or node.children is None:
                    return 0
                node = node.children.get(part)
            return node.size if node is not None else 0

    # ---- nodes and watches ----------------------------------------------------------------------
    def _watch(self, tree: _Tree, node: _Node, dfd: int) -> None:
        wd = _libc.inotify_add_watch(self.fd, f"/proc/self/fd/{dfd}".encode(), WATCH_MASK)
        if wd < 0:
            if not tree.degraded:
                log.warning("inotify watch failed; the user's usage is re-measured instead",
                            extra={"user_id": tree.user_id, "errno": ctypes.get_errno()})
            tree.rescan = tree.degraded = True
            return
        held = self.by_wd.get(wd)
        if held is not None and held[1] is not node:
            held[1].wd = -1  # the same folder was known under another node (events not read yet)
        node.wd = wd
        self.by_wd[wd] = (tree, node)

    def _add(self, tree: _Tree, parent: _Node, name: str, st: os.stat_result) -> _Node:
        assert parent.children is not None
        node = _Node(name, parent, st)
        parent.children[name] = node
        tree.total += node.size
        tree.entries += 1
        return node

    def _drop(self, tree: _Tree, node: _Node) -> None:
        """Forget a node and everything below it: O(size of the subtree)."""
        if node.parent is not None and node.parent.children is not None \
                and node.parent.children.get(node.name) is node:
            del node.parent.children[node.name]
        stack = [node]
        while stack:
            cur = stack.pop()
            cur.dead = True
            tree.total -= cur.size
            tree.entries -= 1
            if cur.wd >= 0:
                if self.by_wd.get(cur.wd, (None, None))[1] is cur:
                    del self.by_wd[cur.wd]
                    _libc.inotify_rm_watch(self.fd, cur.wd)  # EINVAL when the kernel dropped it already
                cur.wd = -1
            if cur.children:
                stack.extend(cur.children.values())
                cur.children = {}

    def _walk_below(self, tree: _Tree, node: _Node, dfd: int) -> None:
        """Measure and watch everything below the folder `node` (open as `dfd`)."""
        self._watch(tree, node, dfd)

        def visit(parent: _Node, name: str, st: os.stat_result) -> _Node | None:
            assert parent.children is not None
            old = parent.children.get(name)
            if old is not None:
                self._drop(tree, old)
            child = self._add(tree, parent, name, st)
            return child if child.children is not None else None

        done = walk.walk(dfd, node, visit, lambda child, fd: self._watch(tree, child, fd),
                         max_entries=max(walk.MAX_ENTRIES - tree.entries, 0))
        if not done.complete:
            if not tree.degraded:
                log.warning("a user tree is too deep or too large to meter fully; it is re-measured instead",
                            extra={"user_id": tree.user_id, "entries": tree.entries})
            tree.rescan = tree.degraded = True

    def _open_node(self, root_fd: int, node: _Node) -> int:
        """An fd of the folder `node`, resolved from the root's fd by its names (chunked below
        PATH_MAX, never following a symlink)."""
        fd = os.dup(root_fd)
        try:
            chunk: list[str] = []
            size = 0
            for name in node.names() + [None]:  # type: ignore[list-item]
                if name is not None and size + len(name) + 1 < OPEN_CHUNK:
                    chunk.append(name)
                    size += len(name) + 1
                    continue
                if chunk:
                    nxt = resolve.open_beneath(fd, "/".join(chunk), resolve.DIR_FLAGS)
                    os.close(fd)
                    fd = nxt
                chunk, size = ([name], len(name) + 1) if name is not None else ([], 0)
            return fd
        except BaseException:
            os.close(fd)
            raise

    # ---- measuring ------------------------------------------------------------------------------
    def _measure_tree(self, tree: _Tree) -> None:
        if tree.root is not None:
            self._drop(tree, tree.root)
        tree.root, tree.total, tree.entries = None, 0, 0
        tree.dirty.clear()
        tree.replaced.clear()
        tree.rescan = tree.degraded = False
        tree.measured_at = time.monotonic()
        try:
            with safe_fs.Root.open(tree.path) as root:
                tree.root = _Node("", None, os.fstat(root.fd))
                tree.total, tree.entries = tree.root.size, 1
                self._walk_below(tree, tree.root, root.fd)
        except (safe_fs.SafeFsError, OSError):
            pass

    def track(self, user_id: str, user_root: Path) -> int:
        """Start metering a user root (measured once); its current usage, also written to the ledger."""
        with self.lock:
            tree = self.trees.get(user_id)
            if tree is None:
                tree = self.trees[user_id] = _Tree(user_id, Path(user_root))
                self._contained(tree, self._measure_tree)
                return self._record(tree)
        return self.refresh(user_id)

    def forget(self, user_id: str) -> None:
        with self.lock:
            tree = self.trees.pop(user_id, None)
            if tree is not None and tree.root is not None:
                self._drop(tree, tree.root)

    # ---- events ---------------------------------------------------------------------------------
    def _read_events(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 256 * 1024)
            except BlockingIOError:
                return
            pos = 0
            while pos + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
                raw = data[pos + _EVENT.size: pos + _EVENT.size + length].rstrip(b"\0")
                pos += _EVENT.size + length
                self._event(wd, mask, raw.decode("utf-8", "surrogateescape"))

    def _event(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            for tree in self.trees.values():
                tree.rescan = True
            return
        held = self.by_wd.get(wd)
        if held is None:
            return
        tree, node = held
        if mask & IN_IGNORED:  # the kernel dropped the watch (its folder is gone)
            del self.by_wd[wd]
            node.wd = -1
            return
        if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
            if node.parent is None:
                tree.rescan = True  # the root itself went away or moved
            return
        if not name:  # the folder itself changed (its own blocks, mode)
            if node.parent is not None:
                tree.mark(node.parent, node.name)
            else:
                tree.mark(node, "")
            return
        if mask & (IN_DELETE | IN_MOVED_FROM):
            child = node.children.get(name) if node.children is not None else None
            if child is not None:
                self._drop(tree, child)
            tree.dirty.pop((id(node), name), None)
            tree.replaced.discard((id(node), name))
            tree.mark(node.parent, node.name) if node.parent is not None else tree.mark(node, "")
            return
        tree.mark(node, name, replaced=bool(mask & IN_MOVED_TO))
        if mask & (IN_CREATE | IN_MOVED_TO):  # a folder's own blocks grow with its entries
            tree.mark(node.parent, node.name) if node.parent is not None else tree.mark(node, "")

    # ---- applying -------------------------------------------------------------------------------
    def refresh(self, user_id: str) -> int:
        """Apply the reported changes (re-stat only those entries); the user's usage, in the ledger."""
        with self.lock:
            if self.fd < 0:
                return 0
            self._read_events()
            tree = self.trees.get(user_id)
            if tree is None:
                return 0
            self._contained(tree, self._apply)
            return self._record(tree)

    def refresh_all(self) -> dict[str, int]:
        """Every metered user's usage after applying the changes (the executor's periodic tick).
        A tree that fails is re-measured later; it never stops the others."""
        with self.lock:
            if self.fd < 0:
                return {}
            try:
                self._read_events()
            except Exception:
                log.exception("disk meter: reading inotify events failed; every tree is re-measured")
                for tree in self.trees.values():
                    tree.rescan = True
            out = {}
            for user_id, tree in self.trees.items():
                self._contained(tree, self._apply)
                out[user_id] = self._record(tree)
            return out

    def _contained(self, tree: _Tree, step) -> None:  # type: ignore[no-untyped-def]
        try:
            step(tree)
        except Exception:
            log.exception("disk meter failed for one user; their tree is re-measured later",
                          extra={"user_id": tree.user_id})
            tree.rescan = tree.degraded = True
            tree.measured_at = time.monotonic()

    def _record(self, tree: _Tree) -> int:
        """The usage reported (ledger, refusals): the meter's count, or the kernel's when larger."""
        total = tree.total
        if self.kernel_usage is not None:
            total = max(total, self.kernel_usage(tree.user_id) or 0)
        if total != tree.recorded:
            try:
                self.ledger.set(tree.user_id, total)
                tree.recorded = total
            except OSError as exc:
                log.warning("disk quota ledger unavailable", extra={"user_id": tree.user_id, "error": str(exc)})
        return total

    def _apply(self, tree: _Tree) -> None:
        if tree.rescan or tree.root is None:
            if tree.degraded and time.monotonic() - tree.measured_at < DEGRADED_REMEASURE_SECONDS:
                return
            self._measure_tree(tree)
            return
        if not tree.dirty:
            return
        dirty, tree.dirty = tree.dirty, {}
        replaced, tree.replaced = tree.replaced, set()
        by_parent: dict[int, tuple[_Node, list[tuple[str, bool]]]] = {}
        for key, (parent, name) in dirty.items():
            if not parent.dead:
                by_parent.setdefault(id(parent), (parent, []))[1].append((name, key in replaced))
        try:
            with safe_fs.Root.open(tree.path) as root:
                for parent, names in sorted(by_parent.values(), key=lambda item: item[0].depth()):
                    if parent.dead:
                        continue  # replaced or removed by an earlier entry of this pass
                    self._apply_folder(tree, root.fd, parent, names)
        except safe_fs.SafeFsError:
            tree.rescan = True

    def _apply_folder(self, tree: _Tree, root_fd: int, parent: _Node, names: list[tuple[str, bool]]) -> None:
        try:
            dfd = self._open_node(root_fd, parent)
        except OSError:
            return  # the folder is gone or moved: the events of its parent say what became of it
        try:
            for name, moved_in in names:
                if not name:  # the root's own entry
                    st = os.fstat(dfd)
                    tree.total += entry_bytes(st) - parent.size
                    parent.size = entry_bytes(st)
                    continue
                if parent.children is None:
                    continue
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except (FileNotFoundError, NotADirectoryError):
                    st = None
                old = parent.children.get(name)
                if st is None:
                    if old is not None:
                        self._drop(tree, old)
                    continue
                same = old is not None and not moved_in and old.ino == st.st_ino \
                    and (old.children is not None) == stat.S_ISDIR(st.st_mode)
                if same:
                    assert old is not None
                    tree.total += entry_bytes(st) - old.size
                    old.size = entry_bytes(st)
                    continue
                if old is not None:
                    self._drop(tree, old)
                node = self._add(tree, parent, name, st)
                if node.children is not None:  # a new, replaced or moved-in folder: walk and watch it
                    try:
                        sub = resolve.open_dir_at(dfd, name)
                    except OSError:
                        continue
                    try:
                        self._walk_below(tree, node, sub)
                    finally:
                        os.close(sub)
        finally:
            os.close(dfd)
