"""The admin's hard delete of soft-deleted tasks (issue 40, seed 003 §7.9 "物理清理留管理员工具").

A task deleted (soft, `deleted_at`) more than `older_than` ago goes for good with everything that is
only its own: its messages (the conversation and its runs' steps), its runs' state (on the task row),
its `data_events` (the file history) and the versions of the version store that no remaining row of
that user names any more. A task with an active run is never touched (a delete refuses those, but a
row could be restored and started meanwhile: the selection locks the rows and re-checks).

Not deleted, on purpose: the folder and its files (a soft delete never touched them; folders no
task references are the orphan scan's business, `zcbot_core.orphans`), and `usage_events` (the
accounting: the admin's totals and each user's budget read them; purging must not lower a month's
spend). Dry run by default: the same selection, counted, nothing changed.

Shared by `zcbot admin purge` and `POST /v1/admin/purge`.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from sqlalchemy import CursorResult, delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core.db.models import DataEvent, Message, Task
from zcbot_core.filehistory.store import VersionStore
from zcbot_core.runstate.status import ACTIVE

BATCH = 200  # tasks per transaction
SAMPLE = 20  # task ids named in the report
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([dhm]?)\s*$")
_UNIT = {"d": 86400.0, "h": 3600.0, "m": 60.0, "": 86400.0}


def parse_age(text: str | float | int) -> timedelta:
    """`30d`, `12h`, `90m` or a bare number of days -> a timedelta (ValueError otherwise)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text) * 86400.0
    else:
        m = _AGE.match(str(text))
        if not m:
            raise ValueError(f"bad age {text!r}: use a number of days, or e.g. 30d, 12h, 90m")
        seconds = float(m.group(1)) * _UNIT[m.group(2)]
    if seconds < 0 or seconds > 100 * 365 * 86400:
        raise ValueError(f"bad age {text!r}: between 0 and 100 years")
    return timedelta(seconds=seconds)


@dataclass
class PurgeReport:
    dry_run: bool
    cutoff: str
    tasks: int = 0
    messages: int = 0
    data_events: int = 0
    versions: int = 0
    version_bytes: int = 0
    skipped_active: int = 0  # deleted but with a run still active: left alone
    task_ids: list[str] = field(default_factory=list)  # the first SAMPLE

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _selection(cutoff: datetime) -> Any:
    return select(Task.task_id, Task.user_id).where(
        Task.deleted_at.is_not(None), Task.deleted_at < cutoff, Task.run_status.not_in(ACTIVE))


async def purge_deleted(sessions: async_sessionmaker[AsyncSession], storage_root: Path | None,
                        older_than: timedelta, *, apply: bool = False, now: datetime | None = None) -> PurgeReport:
    """Count (dry run) or hard-delete the tasks soft-deleted before `now - older_than`.
    `storage_root` None: the version store is not reachable from here (its objects stay; the store's
    own retention drops them in time)."""
    cutoff = (now or datetime.now(UTC)) - older_than
    report = PurgeReport(dry_run=not apply, cutoff=cutoff.isoformat())
    async with sessions() as s:
        report.skipped_active = int(await s.scalar(select(func.count()).select_from(Task).where(
            Task.deleted_at.is_not(None), Task.deleted_at < cutoff, Task.run_status.in_(ACTIVE))) or 0)
        if not apply:
            rows = (await s.execute(_selection(cutoff).order_by(Task.deleted_at))).all()
            ids = [r.task_id for r in rows]
            report.tasks, report.task_ids = len(ids), ids[:SAMPLE]
            if ids:
                report.messages = int(await s.scalar(
                    select(func.count()).select_from(Message).where(Message.task_id.in_(ids))) or 0)
                report.data_events = int(await s.scalar(
                    select(func.count()).select_from(DataEvent).where(DataEvent.task_id.in_(ids))) or 0)
            return report
    while True:
        async with sessions() as s, s.begin():
            rows = (await s.execute(_selection(cutoff).order_by(Task.deleted_at).limit(BATCH)
                                    .with_for_update(skip_locked=True))).all()
            if not rows:
                break
            digests = await _delete_batch(s, [r.task_id for r in rows], report)
        report.tasks += len(rows)
        report.task_ids.extend(r.task_id for r in rows[: max(SAMPLE - len(report.task_ids), 0)])
        if storage_root is not None:
            await _discard_versions(sessions, storage_root, digests, report)
        if len(rows) < BATCH:
            break
    return report


async def _delete_batch(s: AsyncSession, ids: list[str], report: PurgeReport) -> dict[str, set[str]]:
    """Delete the tasks' rows; the version digests their file history named, per user."""
    digests: dict[str, set[str]] = defaultdict(set)
    for user, prev, cur in (await s.execute(select(DataEvent.user_id, DataEvent.prev_hash, DataEvent.content_hash)
                                            .where(DataEvent.task_id.in_(ids)))).all():
        digests[user].update(d for d in (prev, cur) if d)
    events = cast(CursorResult[Any], await s.execute(delete(DataEvent).where(DataEvent.task_id.in_(ids))))
    messages = cast(CursorResult[Any], await s.execute(delete(Message).where(Message.task_id.in_(ids))))
    report.data_events += events.rowcount or 0
    report.messages += messages.rowcount or 0
    await s.execute(delete(Task).where(Task.task_id.in_(ids)))
    return digests


async def _discard_versions(sessions: async_sessionmaker[AsyncSession], storage_root: Path,
                            digests: dict[str, set[str]], report: PurgeReport) -> None:
    """Drop the versions no remaining row of their user names (another task in the same folder, a
    revert elsewhere may still need one)."""
    for user, wanted in digests.items():
        async with sessions() as s:
            named = set((await s.scalars(select(DataEvent.prev_hash).where(
                DataEvent.user_id == user, DataEvent.prev_hash.in_(wanted)))).all())
            named |= set((await s.scalars(select(DataEvent.content_hash).where(
                DataEvent.user_id == user, DataEvent.content_hash.in_(wanted)))).all())
        store = VersionStore(storage_root, user, max_age_days=0, budget_bytes=0)  # discarding only: no limit applies
        count, freed = await asyncio.to_thread(store.discard, wanted - named)
        report.versions += count
        report.version_bytes += freed
