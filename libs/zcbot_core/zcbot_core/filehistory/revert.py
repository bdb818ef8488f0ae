"""Undo a run's file changes (issue 29): every file the run touched goes back to its content
before the run. A file changed again since the run (its content is no longer what the run left)
is a conflict: listed and skipped unless `force`.

From the run's `data_events` (oldest first): the state before the run is the first event's
`prev_hash` (a `create` first: the file did not exist); the state the run left is the last
event's `content_hash` (a `delete` last: gone).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zcbot_core import safe_fs
from zcbot_core.filehistory.events import Change
from zcbot_core.filehistory.ops import file_hash, restore
from zcbot_core.filehistory.store import VersionStore


@dataclass
class PathPlan:
    path: str
    before: str | None  # digest before the run, None: did not exist
    after: str | None  # digest the run left, None: removed
    existed_before: bool


@dataclass
class RevertResult:
    reverted: list[Change] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # the old version was pruned


def plan(events: list[Any]) -> list[PathPlan]:
    """One plan per file path from the run's events (objects with path, kind, prev_hash, content_hash)."""
    plans: dict[str, PathPlan] = {}
    for ev in events:
        if ev.kind in ("mkdir", "rmdir"):
            continue
        if ev.path not in plans:
            existed = ev.kind != "create"
            plans[ev.path] = PathPlan(ev.path, ev.prev_hash if existed else None, None, existed)
        plans[ev.path].after = None if ev.kind == "delete" else ev.content_hash
    return list(plans.values())


def revert(store: VersionStore, r: safe_fs.Root, plans: list[PathPlan], *, force: bool = False,
           owner: safe_fs.root.Owner = None) -> RevertResult:
    out = RevertResult()
    for p in plans:
        now = file_hash(r, p.path)
        now_digest = now[0] if now else None
        if now_digest == p.before and (p.before is not None or not r.exists(p.path)):
            continue  # already as it was
        if now_digest != p.after and not force:
            out.conflicts.append({"path": p.path, "reason": "changed since the run", "current_hash": now_digest,
                                  "run_left_hash": p.after})
            continue
        if p.existed_before and (p.before is None or not store.has(p.before)):
            out.missing.append(p.path)
            continue
        out.reverted.append(restore(store, r, p.path, p.before, owner=owner))
    return out
