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

Plan -> check -> apply -> record (issue 34): nothing is changed before every path was checked, a
change that fails does not stop the others, and every change made is returned for the caller to
record, so a revert that fails half-way still leaves the history saying what it did.
"""

from __future__ import annotations

import functools
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from zcbot_core import safe_fs
from zcbot_core.filehistory.events import Change
from zcbot_core.filehistory.ops import file_hash, restore
from zcbot_core.filehistory.store import VersionStore

# Why a path was skipped (the gateway's file_history_texts.CONFLICTS says it to a person):
# file_where_folder_was: a file stands where a folder the run removed was; changed_since_run: the file
# no longer holds what the run left; folder_not_empty: a folder the run made holds what is not the run's;
# folder_where_file_was: a folder stands where the file is to go back; parent_not_folder: a file or a
# link stands where a folder above the path must be; not_applied: the change itself failed (disk full,
# the tree changed meanwhile; `why` says how), after the paths before it were applied.
CONFLICT_CODES = frozenset({"file_where_folder_was", "changed_since_run", "folder_not_empty",
                            "folder_where_file_was", "parent_not_folder", "not_applied"})


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


def _blocked_by(r: safe_fs.Root, rel: str) -> str | None:
    """The first folder above `rel` that exists as something else (a file, a link): `rel` cannot be
    made there. None when every existing level is a folder (missing ones are made)."""
    parts = rel.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        above = "/".join(parts[:depth])
        st = r.lstat(above)
        if st is None:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return above
    return None


def _failure(path: str, exc: Exception) -> dict[str, Any]:
    """A path whose change failed: safe_fs says what in words naming only the user's path; a bare
    OSError (the version store) only by its error name, never with a host path."""
    why = str(exc) if isinstance(exc, safe_fs.SafeFsError) else (getattr(exc, "strerror", None) or type(exc).__name__)
    return {"path": path, "code": "not_applied", "why": why[:300]}


Step = tuple[str, Callable[[], Change]]


def _remake_dir(r: safe_fs.Root, rel: str, owner: safe_fs.root.Owner) -> Change:
    r.makedirs(rel, owner=owner)
    return Change(rel, "mkdir")


def _check_dir(r: safe_fs.Root, d: DirPlan) -> str:
    """What to do with the folder `d` the run removed: "skip" (it is there), "make", or why not
    (a conflict code)."""
    st = r.lstat(d.path)
    if st is not None:
        return "skip" if stat.S_ISDIR(st.st_mode) else "file_where_folder_was"
    return "parent_not_folder" if _blocked_by(r, d.path) is not None else "make"


def _check_file(store: VersionStore, r: safe_fs.Root, f: PathPlan, force: bool) -> str | dict[str, Any] | None:
    """What to do with the file `f`: "restore", "skip" (as it was already), "missing" (its old
    version was pruned), or why not (a conflict)."""
    now = file_hash(r, f.path)
    now_digest = now[0] if now else None
    if now_digest == f.before and (f.before is not None or not r.exists(f.path)):
        return "skip"
    if now_digest != f.after and not force:
        return {"path": f.path, "code": "changed_since_run", "current_hash": now_digest, "run_left_hash": f.after}
    if f.existed_before and (f.before is None or not store.has(f.before)):
        return "missing"
    if _is_dir(r, f.path):
        return {"path": f.path, "code": "folder_where_file_was"}
    if f.before is not None and _blocked_by(r, f.path) is not None:
        return {"path": f.path, "code": "parent_not_folder"}
    return "restore"


def _refused(path: str, exc: Exception) -> dict[str, Any]:
    """A check that safe_fs refused: a link on the way is a link where a folder must be."""
    if isinstance(exc, safe_fs.SymlinkRefused):
        return {"path": path, "code": "parent_not_folder"}
    return _failure(path, exc)


def _check(store: VersionStore, r: safe_fs.Root, p: Plan, out: RevertResult, force: bool,
           owner: safe_fs.root.Owner) -> list[Step]:
    """Every path checked before anything is changed: the changes to make, in order; the paths
    that cannot or need not be changed go to `out` (conflicts, missing versions)."""
    steps: list[Step] = []
    for d in sorted((d for d in p.dirs if d.existed_before), key=lambda d: d.path.count("/")):
        try:
            verdict = _check_dir(r, d)
        except (safe_fs.SafeFsError, OSError) as exc:
            out.conflicts.append({**_refused(d.path, exc), "folder": True})
            continue
        if verdict == "make":
            steps.append((d.path, functools.partial(_remake_dir, r, d.path, owner)))
        elif verdict != "skip":
            out.conflicts.append({"path": d.path, "code": verdict, "folder": True})
    for f in p.files:
        try:
            file_verdict: str | dict[str, Any] | None = _check_file(store, r, f, force)
        except (safe_fs.SafeFsError, OSError) as exc:
            file_verdict = _refused(f.path, exc)
        if isinstance(file_verdict, dict):
            out.conflicts.append(file_verdict)
        elif file_verdict == "missing":
            out.missing.append(f.path)
        elif file_verdict == "restore":
            steps.append((f.path, functools.partial(restore, store, r, f.path, f.before, owner=owner)))
    return steps


def revert(store: VersionStore, r: safe_fs.Root, p: Plan, *, force: bool = False,
           owner: safe_fs.root.Owner = None, into: RevertResult | None = None) -> RevertResult:
    """Plan, apply, and say what was applied: every path is checked first (`_check`); then the
    folders the run removed are made again (shallowest first), the files restored, and the folders
    it made removed (deepest first, only when empty: what is left in one is not the run's). A change
    that fails is a `not_applied` conflict and the rest go on, so `reverted` always lists every
    change made, for the caller to record (the versions they replaced are reachable only through
    those rows). `into`: the result to fill, which the caller still holds if a bug raises midway."""
    out = into if into is not None else RevertResult()
    for path, apply in _check(store, r, p, out, force, owner):
        try:
            out.reverted.append(apply())
        except (safe_fs.SafeFsError, OSError) as exc:
            out.conflicts.append(_failure(path, exc))
    for d in sorted((d for d in p.dirs if not d.existed_before), key=lambda d: -d.path.count("/")):
        try:
            if not _is_dir(r, d.path):
                continue  # gone already
            if r.listdir(d.path, limit=1):  # after the files: the run's own are gone by now
                out.conflicts.append({"path": d.path, "code": "folder_not_empty", "folder": True})
                continue
            r.rmdir(d.path)
        except (safe_fs.SafeFsError, OSError) as exc:
            out.conflicts.append({**_failure(d.path, exc), "folder": True})
            continue
        out.reverted.append(Change(d.path, "rmdir"))
    return out
