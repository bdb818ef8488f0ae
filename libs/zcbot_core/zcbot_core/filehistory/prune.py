"""Pruning of the file-history tables (issue 29 follow-up; the rule is in docs/decisions.md).

The version store already has a retention (`ZCBOT_VERSIONS_MAX_AGE_DAYS`, the byte budget:
store.py); the rows follow it:

- `data_events`: a row older than the age limit goes once no kept version needs it — its
  `prev_hash` is no longer in the user's store (the store's own retention is applied first, so a
  user who runs no tools is pruned too). A run's rows go together (the revert plan reads the first
  and last row of each path, so half a run would undo to the wrong content): only when all of them
  are past the age and none names a kept version. A revert's rows tagged `undoes_run_id` stay while
  the run they undid has rows (the history says "undone" from them). Age limit 0: never pruned.
- `file_reports_recorded`: a key only stops a redelivered report from being recorded twice, and a
  report is redelivered within minutes unless every runner is down; keys older than the same age
  limit (REPORT_KEY_DAYS when it is 0: no age limit for versions) go.

Bounded: BATCH rows per statement, MAX_BATCHES statements per pass; the walk over old events
resumes where the last pass stopped. Every query is scoped by id range, user or run.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import delete, func, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core.db.models import DataEvent, FileReportRecorded
from zcbot_core.filehistory.store import VersionStore

BATCH = 500
MAX_BATCHES = 20
REPORT_KEY_DAYS = 30


@dataclass
class Pruned:
    events: int = 0
    report_keys: int = 0
    versions: int = 0


class RowPruner:
    """One per process (the gateway's background task): remembers where its walk stopped."""

    def __init__(self, storage_root: Path, *, max_age_days: int, budget_bytes: int = 0, batch: int = BATCH,
                 max_batches: int = MAX_BATCHES) -> None:
        self.storage_root, self.max_age_days, self.budget = storage_root, max_age_days, budget_bytes
        self.batch, self.max_batches = batch, max_batches
        self.after_id = 0  # the walk over old events: rows up to this id were looked at
        self.upto: int | None = None  # ...and stops before this one (the oldest young row when it started)

    async def run(self, sessions: async_sessionmaker[AsyncSession], now: datetime | None = None) -> Pruned:
        now = now or datetime.now(UTC)
        out = Pruned()
        out.report_keys = await self._report_keys(sessions, now - timedelta(days=self.max_age_days or REPORT_KEY_DAYS))
        if self.max_age_days:
            cutoff = now - timedelta(days=self.max_age_days)
            for _ in range(self.max_batches):
                async with sessions() as s, s.begin():
                    more = await self._events_batch(s, cutoff, out)
                if not more:
                    break
        return out

    async def _report_keys(self, sessions: async_sessionmaker[AsyncSession], cutoff: datetime) -> int:
        gone = 0
        for _ in range(self.max_batches):
            old = select(FileReportRecorded.user_id, FileReportRecorded.report_id).where(
                FileReportRecorded.created_at < cutoff).limit(self.batch)
            async with sessions() as s, s.begin():
                res = await s.execute(delete(FileReportRecorded).where(
                    tuple_(FileReportRecorded.user_id, FileReportRecorded.report_id).in_(old)))
            gone += res.rowcount or 0
            if (res.rowcount or 0) < self.batch:
                break
        return gone

    def _kept(self, user_id: str) -> tuple[set[str], int]:
        """The user's kept digests after the store's own retention ran (and how many it removed)."""
        store = VersionStore(self.storage_root, user_id, max_age_days=self.max_age_days, budget_bytes=self.budget)
        if not store.path.is_dir():
            return set(), 0  # nothing ever kept (not made here: the store is the executor's to create)
        removed = store.prune()
        return {d for d, _size, _mtime in store.objects()}, len(removed)

    async def _events_batch(self, s: AsyncSession, cutoff: datetime, out: Pruned) -> bool:
        """Look at the next BATCH old rows; False when the walk is done (it starts again next pass)."""
        if self.after_id == 0 or self.upto is None:
            self.upto = await s.scalar(select(DataEvent.id).where(DataEvent.created_at >= cutoff)
                                       .order_by(DataEvent.created_at).limit(1))
        stmt = select(DataEvent.id, DataEvent.user_id, DataEvent.run_id, DataEvent.undoes_run_id,
                      DataEvent.prev_hash).where(DataEvent.id > self.after_id, DataEvent.created_at < cutoff)
        if self.upto is not None:
            stmt = stmt.where(DataEvent.id < self.upto)
        rows = (await s.execute(stmt.order_by(DataEvent.id).limit(self.batch))).all()
        if not rows:
            self.after_id, self.upto = 0, None
            return False
        self.after_id = rows[-1].id
        kept: dict[str, set[str]] = {}
        for user in {r.user_id for r in rows}:
            kept[user], removed = await asyncio.to_thread(self._kept, user)
            out.versions += removed
        runs: dict[str, set[str]] = defaultdict(set)  # user -> runs with a row in this batch
        for r in rows:
            if r.run_id:
                runs[r.user_id].add(r.run_id)
        for user, run_ids in runs.items():
            out.events += await self._whole_runs(s, user, run_ids, cutoff, kept[user])
        loose = [r for r in rows if not r.run_id and (r.prev_hash is None or r.prev_hash not in kept[r.user_id])]
        undone = {(r.user_id, r.undoes_run_id) for r in loose if r.undoes_run_id}
        alive: set[tuple[str, str]] = set()
        if undone:
            alive = {(u, run) for u, run in (await s.execute(
                select(DataEvent.user_id, DataEvent.run_id).distinct().where(
                    DataEvent.run_id.in_({run for _u, run in undone}),
                    DataEvent.user_id.in_({u for u, _run in undone})))).all()}
        ids = [r.id for r in loose if not r.undoes_run_id or (r.user_id, r.undoes_run_id) not in alive]
        if ids:
            res = await s.execute(delete(DataEvent).where(DataEvent.id.in_(ids)))
            out.events += res.rowcount or 0
        return len(rows) == self.batch

    @staticmethod
    async def _whole_runs(s: AsyncSession, user: str, run_ids: set[str], cutoff: datetime, kept: set[str]) -> int:
        """Delete the rows of those runs that are all old and name no kept version; how many rows went."""
        stats = (await s.execute(
            select(DataEvent.run_id, func.max(DataEvent.created_at), func.array_agg(DataEvent.prev_hash.distinct()))
            .where(DataEvent.user_id == user, DataEvent.run_id.in_(run_ids)).group_by(DataEvent.run_id))).all()
        gone = [run for run, newest, prevs in stats if newest < cutoff and not kept.intersection(p for p in prevs if p)]
        if not gone:
            return 0
        res = await s.execute(delete(DataEvent).where(DataEvent.user_id == user, DataEvent.run_id.in_(gone)))
        return res.rowcount or 0
