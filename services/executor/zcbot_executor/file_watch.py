"""What a sandbox tool call did to the user's files (issue 29), seen from the host side.

Before the call, the files it may replace or remove are kept in the user's version store
(`zcbot_core.filehistory`, outside the sandbox's mounts); after it, the changes are listed for the
runner, which records them as `data_events` (`ToolResult.meta["file_changes"]`).

- `write` / `edit`: the one target file.
- `shell` / `run_python`: a bounded before/after scan of the task folder, its files and folders (at
  most SCAN_MAX_FILES entries; versions of files up to KEEP_MAX_FILE bytes, KEEP_MAX_TOTAL per
  call). A per-file cache of (size, mtime, inode) -> digest keeps an unchanged folder from being
  re-read. Files past the bounds are still listed as changed, without a version (revert reports
  them). A file gone from one path and found at a new one with the same (size, mtime, inode) was
  moved (`mv`): one `rename` change. Background calls: the "before" is taken at launch and kept
  beside the executor's process record (`Before.to_json`); the "after" when the process ends
  (background/: the manager and the watch).
- `write`: the folders it made for its file (`mkdir` changes).

Everything on the user tree goes through `safe_fs`; a refusal (a symlink on the way) only means
"nothing watched" for this call, never a failed call.
"""

from __future__ import annotations

import logging
import posixpath
import stat
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zcbot_core import filehistory, safe_fs
from zcbot_core.safe_fs.paths import PathRejected, normalize_rel

log = logging.getLogger(__name__)

SCAN_MAX_FILES = 2000
KEEP_MAX_FILE = 8 * 1024 * 1024
KEEP_MAX_TOTAL = 64 * 1024 * 1024
CACHE_ENTRIES = 50_000
PRUNE_EVERY_SECONDS = 600.0  # the age limit runs at most this often per user (the byte budget holds at each keep)
MAX_FILE_CHANGES = 500  # per reply (a NATS message has a size limit)
WORKSPACE = "/workspace"
Sig = tuple[int, int, int]  # size, mtime_ns, inode


@dataclass
class Before:
    user_root: Path
    tool: str
    target: str | None = None  # write/edit
    existed: bool = False
    prev: str | None = None
    scan_dir: str | None = None  # shell/run_python
    sigs: dict[str, Sig] = field(default_factory=dict)
    kept: dict[str, str] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)  # shell/run_python: folders; write/edit: the missing parents
    full: bool = True  # the scan saw everything (not cut at SCAN_MAX_FILES)

    def to_json(self) -> dict[str, Any]:
        return {"user_root": str(self.user_root), "tool": self.tool, "scan_dir": self.scan_dir,
                "sigs": {p: list(s) for p, s in self.sigs.items()}, "kept": self.kept, "dirs": sorted(self.dirs),
                "full": self.full}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "Before":
        sigs = {str(p): (int(s[0]), int(s[1]), int(s[2])) for p, s in raw.get("sigs", {}).items()}
        return cls(Path(raw["user_root"]), str(raw["tool"]), scan_dir=str(raw.get("scan_dir") or ""), sigs=sigs,
                   kept={str(p): str(d) for p, d in raw.get("kept", {}).items()}, dirs=set(raw.get("dirs", [])), full=bool(raw.get("full", True)))


def _target(args: dict[str, Any], cwd_rel: str) -> str | None:
    raw = args.get("path")
    if not isinstance(raw, str) or not raw.strip():
        return None
    p = raw.strip()
    if p.startswith(WORKSPACE + "/"):
        p = p[len(WORKSPACE) + 1:]
    elif p.startswith("/"):
        return None
    else:
        p = posixpath.join(cwd_rel, p) if cwd_rel else p
    try:
        return normalize_rel(posixpath.normpath(p), allow_empty=False)
    except PathRejected:
        return None


class FileWatch:
    def __init__(self, settings: Any, storage_root: Path) -> None:
        self.settings = settings
        self.storage_root = storage_root
        self.cache: OrderedDict[tuple[str, str], tuple[Sig, str]] = OrderedDict()
        self.pruned: dict[str, float] = {}

    def store(self, user_id: str) -> filehistory.VersionStore:
        return filehistory.VersionStore.from_settings(self.settings, user_id, self.storage_root)

    def prune(self, user_id: str) -> None:
        """The user's age limit, at most every PRUNE_EVERY_SECONDS (the byte budget needs no pass:
        `VersionStore.keep` makes room before each copy)."""
        now = time.monotonic()
        if now - self.pruned.get(user_id, -1e9) < PRUNE_EVERY_SECONDS:
            return
        self.pruned[user_id] = now
        removed = self.store(user_id).prune()
        if removed:
            log.info("old file versions pruned", extra={"user_id": user_id, "removed": len(removed)})

    def before(self, user_id: str, user_root: Path, cwd_rel: str, tool: str, args: dict[str, Any]) -> Before | None:
        try:
            if tool in ("write", "edit", "shell", "run_python"):
                self.prune(user_id)
            with safe_fs.Root.open(user_root) as r:
                if tool in ("write", "edit"):
                    target = _target(args, cwd_rel)
                    if target is None:
                        return None
                    st = r.lstat(target)
                    prev = filehistory.keep_before(self.store(user_id), r, target) if st is not None else None
                    return Before(user_root, tool, target=target, existed=st is not None, prev=prev,
                                  dirs=_missing_parents(r, target))
                if tool in ("shell", "run_python"):  # background ones too: background/record.py keeps this until the end
                    b = Before(user_root, tool, scan_dir=cwd_rel)
                    b.sigs, b.dirs, b.full = self._scan(r, cwd_rel)
                    self._keep_all(user_id, r, b)
                    return b
        except (safe_fs.SafeFsError, OSError) as exc:
            log.info("file watch skipped", extra={"user_id": user_id, "tool": tool, "error": str(exc)})
        return None

    @staticmethod
    def _scan(r: safe_fs.Root, rel: str) -> tuple[dict[str, Sig], set[str], bool]:
        """(files, folders, complete) under `rel`, at most SCAN_MAX_FILES entries."""
        files: dict[str, Sig] = {}
        dirs: set[str] = set()
        if not r.is_dir(rel):
            return files, dirs, True
        for path, st in r.walk_files(rel, skip=lambda name: name in ("node_modules", "__pycache__", ".venv", ".zcbot"), dirs=True):
            if len(files) + len(dirs) >= SCAN_MAX_FILES:
                return files, dirs, False
            if stat.S_ISDIR(st.st_mode):
                dirs.add(path)
            else:
                files[path] = (st.st_size, st.st_mtime_ns, st.st_ino)
        return files, dirs, True

    def _keep_all(self, user_id: str, r: safe_fs.Root, b: Before) -> None:
        store, budget = self.store(user_id), KEEP_MAX_TOTAL
        for path, sig in b.sigs.items():
            hit = self.cache.get((user_id, path))
            if hit is not None and hit[0] == sig and store.has(hit[1]):
                b.kept[path] = hit[1]
                continue
            if sig[0] > KEEP_MAX_FILE or sig[0] > budget:
                continue
            kept = store.keep(r, path)
            if kept is not None:
                budget -= kept.size
                b.kept[path] = kept.digest
                self._remember(user_id, path, sig, kept.digest)

    def _remember(self, user_id: str, path: str, sig: Sig, digest: str) -> None:
        self.cache[(user_id, path)] = (sig, digest)
        self.cache.move_to_end((user_id, path))
        while len(self.cache) > CACHE_ENTRIES:
            self.cache.popitem(last=False)

    def after(self, user_id: str, b: Before, ok: bool) -> list[dict[str, Any]]:
        """The changes as plain dicts (`filehistory.Change.as_dict`): folders made (parents first),
        files, folders removed (deepest first)."""
        try:
            with safe_fs.Root.open(b.user_root) as r:
                if b.target is not None:
                    if not ok:
                        return []
                    made = [filehistory.Change(d, "mkdir") for d in sorted(b.dirs, key=_depth) if r.is_dir(d)]
                    change = filehistory.written(r, b.target, b.prev, b.existed)
                    if change.content_hash != b.prev or not b.existed:
                        made.append(change)
                    return [c.as_dict() for c in made]
                assert b.scan_dir is not None
                now, now_dirs, full = self._scan(r, b.scan_dir)
                old_dirs = b.dirs
                if not (full and b.full):  # a cut scan's missing folders may only be past the cut: no folder changes
                    now_dirs = old_dirs = set()
                changes = [filehistory.Change(d, "mkdir") for d in sorted(now_dirs - old_dirs, key=_depth)]
                changes += self._file_changes(user_id, r, b, now)
                changes += [filehistory.Change(d, "rmdir") for d in sorted(old_dirs - now_dirs, key=_depth, reverse=True)]
                return [c.as_dict() for c in changes]
        except (safe_fs.SafeFsError, OSError) as exc:
            log.info("file watch after-scan skipped", extra={"user_id": user_id, "error": str(exc)})
            return []

    def _file_changes(self, user_id: str, r: safe_fs.Root, b: Before, now: dict[str, Sig]) -> list[filehistory.Change]:
        gone = {b.sigs[p]: p for p in b.sigs if p not in now}  # a moved file keeps its (size, mtime, inode)
        moved: set[str] = set()
        changes = []
        for path in sorted(set(b.sigs) | set(now)):
            old, new = b.sigs.get(path), now.get(path)
            if old == new or new is None:
                continue
            source = gone.get(new) if old is None else None
            digest = (b.kept[source], new[0]) if source in b.kept else filehistory.file_hash(r, path)
            if digest is None or (old is not None and digest[0] == b.kept.get(path)):
                continue  # touched, same bytes
            self._remember(user_id, path, new, digest[0])
            if source is not None:
                moved.add(source)
                changes.append(filehistory.Change(path, "rename", digest[1], digest[0], None, old_path=source))
                continue
            kind = "create" if old is None else "modify"
            changes.append(filehistory.Change(path, kind, digest[1], digest[0], b.kept.get(path)))
        changes += [filehistory.Change(p, "delete", None, None, b.kept.get(p))
                    for p in sorted(set(gone.values()) - moved)]
        return changes


def absorb(b: Before, r: safe_fs.Root, changes: list[dict[str, Any]]) -> bool:
    """Take changes another call reported (and recorded) into a running background process's
    before-scan, so its end-of-process report does not list them again; True when any applied."""
    inside = (b.scan_dir + "/") if b.scan_dir else ""
    hit = False
    for c in changes:
        path, kind = c.get("path"), c.get("kind")
        if not isinstance(path, str) or not path.startswith(inside):
            continue
        hit = True
        if kind in ("mkdir", "rmdir"):
            (b.dirs.add if kind == "mkdir" else b.dirs.discard)(path)
            continue
        if kind == "rename" and isinstance(c.get("old_path"), str):
            b.sigs.pop(c["old_path"], None)
            b.kept.pop(c["old_path"], None)
        st = r.lstat(path)
        if kind == "delete" or st is None or not stat.S_ISREG(st.st_mode):
            b.sigs.pop(path, None)
            b.kept.pop(path, None)
            continue
        b.sigs[path] = (st.st_size, st.st_mtime_ns, st.st_ino)
        if isinstance(c.get("content_hash"), str):
            b.kept[path] = c["content_hash"]  # the bytes it has now (in the store when kept; else not revertible)
    return hit


def _depth(rel: str) -> int:
    return rel.count("/")


def _missing_parents(r: safe_fs.Root, target: str) -> set[str]:
    """The folders a write to `target` would make (it makes its parents)."""
    out: set[str] = set()
    head = posixpath.dirname(target)
    while head and r.lstat(head) is None:
        out.add(head)
        head = posixpath.dirname(head)
    return out
