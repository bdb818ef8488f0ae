"""`Change` (what one file operation did) and `record`, the one writer of `data_events` rows.

File code (the files API's `files_fs`, the executor's tool hooks, restore and revert here) returns
`Change`s; the caller with the database session hands them to `record` with the user, task and
run. No route writes a `data_events` row any other way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from zcbot_core.db.models import DataEvent, FileReportRecorded

KINDS = frozenset({"create", "modify", "delete", "mkdir", "rmdir", "rename", "restore"})


@dataclass(frozen=True)
class Change:
    path: str
    kind: str
    size: int | None = None
    content_hash: str | None = None  # SHA-256 of the new content (files only)
    prev_hash: str | None = None  # the kept version of what was replaced or removed
    old_path: str | None = None  # a rename: the path before it (`path` is the new one)

    def as_dict(self) -> dict[str, Any]:
        out = {"path": self.path, "kind": self.kind, "size": self.size, "content_hash": self.content_hash,
               "prev_hash": self.prev_hash}
        if self.old_path is not None:
            out["old_path"] = self.old_path
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "Change":
        kind = str(raw.get("kind"))
        if kind not in KINDS:
            raise ValueError(f"unknown change kind {kind!r}")
        size = raw.get("size")
        old = raw.get("old_path")
        return cls(path=str(raw["path"])[:4096], kind=kind, size=int(size) if size is not None else None,
                   content_hash=_hash_or_none(raw.get("content_hash")), prev_hash=_hash_or_none(raw.get("prev_hash")),
                   old_path=str(old)[:4096] if kind == "rename" and isinstance(old, str) and old else None)


def _hash_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and len(value) == 64 else None


async def record(session: AsyncSession, user_id: str, changes: Iterable[Change], *, task_id: str | None = None,
                 run_id: str | None = None, report_id: str | None = None, undoes_run_id: str | None = None) -> int:
    """Add one `data_events` row per change to the session (the caller commits with its own work).

    `report_id` names a report that may arrive more than once (a background process's, redelivered
    when the runner that wrote it died before its ack): its key goes in with the rows, in the same
    transaction, and a key already there means the rows are too, so nothing is added (returns 0).
    `undoes_run_id`: these rows are a revert that left the run `undoes_run_id` fully undone."""
    if report_id is not None:
        key = insert(FileReportRecorded).values(user_id=user_id, report_id=report_id)
        if await session.scalar(key.on_conflict_do_nothing().returning(FileReportRecorded.report_id)) is None:
            return 0
    rows = [DataEvent(user_id=user_id, task_id=task_id, run_id=run_id, path=c.path, kind=c.kind, size=c.size,
                      content_hash=c.content_hash, prev_hash=c.prev_hash, old_path=c.old_path,
                      undoes_run_id=undoes_run_id) for c in changes]
    session.add_all(rows)
    await session.flush()
    return len(rows)
