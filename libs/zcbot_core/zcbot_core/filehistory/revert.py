"""Undo a run's file changes (issue 29): every file the run touched goes back to its content
before the run, and its folders to how they were (a folder it made is removed, one it removed is
made again). A file changed again since the run (its content is no longer what the run left) is a
conflict: listed and skipped unless `force`. Each conflict carries a stable `code` (CONFLICT_CODES);
the words a person reads are the gateway's (file_history_texts.py), in the request's language.

From the run's `data_events` (oldest first): the state before the run is the first event's
`prev_hash` (a `create` first: the file did not exist); the state the run left is the last
event's `content_hash` (a `delete` last: gone). A `rename` (old_path -> path) is a delete of
old_path, whose content was `content_hash`, and a create of path with it. Folders: `mkdir` first
means it did not exist, `rmdir` first that it did.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass, field
from typing import Any

from zcbot_core import safe_fs
from zcbot_core.filehistory.events import Change
from zcbot_core.filehistory.ops import file_hash, restore
from zcbot_core.filehistory.store import VersionStore

# file_where_folder_was: a file stands where a folder the run removed was; changed_since_run: the file
# no longer holds what the run left; folder_not_empty: a folder the run made holds what is not the run's.
CONFLICT_CODES = frozenset({"file_where_folder_was", "changed_since_run", "folder_not_empty"})


@dataclass
class PathPlan:
    path: str
    before: str | None  # digest before the run, None: did not exist
    after: str | None  # digest the run left, None: removed
    existed_before: bool


@dataclass
class DirPlan:
    path: str
    existed_before: bool
    exists_after: bool


@dataclass
class Plan:
    files: list[PathPlan] = field(default_factory=list)
    dirs: list[DirPlan] = field(default_factory=list)


@dataclass
class RevertResult:
    reverted: list[Change] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # the old version was pruned


def plan(events: list[Any]) -> Plan:
    """The plan from the run's events (objects with path, kind, prev_hash, content_hash, old_path)."""
    files: dict[str, PathPlan] = {}
    dirs: dict[str, DirPlan] = {}

    def step(path: str, existed: bool, before: str | None, after: str | None) -> None:
        if path not in files:
            files[path] = PathPlan(path, before if existed else None, None, existed)
        files[path].after = after

    for ev in events:
        if ev.kind in ("mkdir", "rmdir"):
            made = ev.kind == "mkdir"
            dirs.setdefault(ev.path, DirPlan(ev.path, not made, made)).exists_after = made
        elif ev.kind == "rename":
            if getattr(ev, "old_path", None):
                step(ev.old_path, True, ev.content_hash, None)
            step(ev.path, False, None, ev.content_hash)
        else:
            existed = ev.kind != "create"
            step(ev.path, existed, ev.prev_hash, None if ev.kind == "delete" else ev.content_hash)
    return Plan(list(files.values()), [d for d in dirs.values() if d.existed_before != d.exists_after])


def _is_dir(r: safe_fs.Root, rel: str) -> bool:
    st = r.lstat(rel)
    return st is not None and stat.S_ISDIR(st.st_mode)


def revert(store: VersionStore, r: safe_fs.Root, p: Plan, *, force: bool = False,
           owner: safe_fs.root.Owner = None) -> RevertResult:
    """Folders the run removed first (shallowest first), then the files, then the folders it made
    (deepest first, only when empty: what is left in one is not the run's)."""
    out = RevertResult()
    for d in sorted((d for d in p.dirs if d.existed_before), key=lambda d: d.path.count("/")):
        if _is_dir(r, d.path):
            continue
        if r.lstat(d.path) is not None:
            out.conflicts.append({"path": d.path, "code": "file_where_folder_was", "folder": True})
            continue
        r.makedirs(d.path, owner=owner)
        out.reverted.append(Change(d.path, "mkdir"))
    for f in p.files:
        now = file_hash(r, f.path)
        now_digest = now[0] if now else None
        if now_digest == f.before and (f.before is not None or not r.exists(f.path)):
            continue  # already as it was
        if now_digest != f.after and not force:
            out.conflicts.append({"path": f.path, "code": "changed_since_run", "current_hash": now_digest,
                                  "run_left_hash": f.after})
            continue
        if f.existed_before and (f.before is None or not store.has(f.before)):
            out.missing.append(f.path)
            continue
        out.reverted.append(restore(store, r, f.path, f.before, owner=owner))
    for d in sorted((d for d in p.dirs if not d.existed_before), key=lambda d: -d.path.count("/")):
        if not _is_dir(r, d.path):
            continue  # gone already
        if r.listdir(d.path, limit=1):
            out.conflicts.append({"path": d.path, "code": "folder_not_empty", "folder": True})
            continue
        r.rmdir(d.path)
        out.reverted.append(Change(d.path, "rmdir"))
    return out
