"""Pruning of the file-history tables (zcbot_core/filehistory/prune.py) against real PostgreSQL and a
real version store: old rows whose versions are gone go, a run's rows go together or not at all, a
revert's "undone" rows stay while the run they undid has rows, a row naming a kept version stays,
each user's rows are judged by that user's store, old report keys go, and the work is bounded per
pass but finishes over several. Plus migration 0011 down and up again."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from alembic import command
from sqlalchemy import insert, select, update

from tests.helpers.db import db_rows
from zcbot_core import filehistory, safe_fs
from zcbot_core.db.migrate import alembic_config, upgrade
from zcbot_core.db.models import DataEvent, FileReportRecorded
from zcbot_core.filehistory.prune import RowPruner
from zcbot_core.platform.service import Runtime

OLD = timedelta(days=40)  # past the 30-day retention


def _keep(storage: Path, user: str, data: bytes, age_days: float = 0) -> str:
    """Keep `data` in the user's store (its mtime `age_days` back, as the retention reads it)."""
    root = storage / user
    root.mkdir(parents=True, exist_ok=True)
    (root / "f").write_bytes(data)
    store = filehistory.VersionStore(storage, user, max_age_days=30, budget_bytes=0)
    with safe_fs.Root.open(root) as r:
        kept = store.keep(r, "f")
    assert kept is not None
    if age_days:
        then = time.time() - age_days * 86400
        os.utime(store.path / kept.digest[:2] / kept.digest, (then, then))
    return kept.digest


async def _add(rt: Runtime, user: str, path: str, *, prev: str | None = None, run: str | None = None,
               undoes: str | None = None, old: bool = True) -> None:
    async with rt.sessions() as s, s.begin():
        await filehistory.record(s, user, [filehistory.Change(path, "modify" if prev else "create", 1, None, prev)],
                                 task_id="t1", run_id=run, undoes_run_id=undoes)
        if old:
            top = await s.scalar(select(DataEvent.id).order_by(DataEvent.id.desc()).limit(1))
            await s.execute(update(DataEvent).where(DataEvent.id == top).values(
                created_at=datetime.now(UTC) - OLD))


async def _paths(rt: Runtime) -> set[tuple[str, str]]:
    async with rt.sessions() as s:
        return {(u, p) for u, p in (await s.execute(select(DataEvent.user_id, DataEvent.path))).all()}


async def test_pruning_drops_what_no_kept_version_needs(rt: Runtime, tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    kept = _keep(storage, "pia", b"still kept")
    aged = _keep(storage, "pia", b"past the age", age_days=35)  # the store's own retention removes it
    await _add(rt, "pia", "kept.txt", prev=kept)  # names a kept version: stays
    await _add(rt, "pia", "aged.txt", prev=aged)  # its version goes now: the row goes
    await _add(rt, "pia", "made.txt")  # a create, old: goes
    await _add(rt, "pia", "old-run/a", run="r-old")  # a whole old run without kept versions: goes
    await _add(rt, "pia", "old-run/b", run="r-old", prev=aged)
    await _add(rt, "pia", "kept-run/a", run="r-kept")  # one of its rows names a kept version: all stay
    await _add(rt, "pia", "kept-run/b", run="r-kept", prev=kept)
    await _add(rt, "pia", "mixed-run/a", run="r-mixed")  # a row of the run is young: all stay
    await _add(rt, "pia", "undo-kept", undoes="r-kept")  # the undone run still has rows: stays
    await _add(rt, "pia", "undo-old", undoes="r-old")  # the undone run's rows go: so does this
    await _add(rt, "quin", "theirs.txt", prev=kept)  # pia's kept digest is not in quin's store: goes
    await _add(rt, "pia", "young.txt", old=False)  # within the age: stays
    await _add(rt, "pia", "mixed-run/b", run="r-mixed", old=False)
    async with rt.sessions() as s, s.begin():
        await s.execute(insert(FileReportRecorded), [
            {"user_id": "pia", "report_id": "p-old", "created_at": datetime.now(UTC) - OLD},
            {"user_id": "pia", "report_id": "p-new"}])

    # Bounded: two rows per statement, one statement per pass; the walk resumes where it stopped.
    pruner = RowPruner(storage, max_age_days=30, batch=2, max_batches=1)
    first = await pruner.run(rt.sessions)
    assert first.report_keys == 1 and first.versions == 1
    assert len(await _paths(rt)) > 6  # not all of it in one bounded pass
    for _ in range(10):
        await pruner.run(rt.sessions)
    assert await _paths(rt) == {("pia", p) for p in ("kept.txt", "young.txt", "kept-run/a", "kept-run/b",
                                                     "mixed-run/a", "mixed-run/b", "undo-kept")}
    async with rt.sessions() as s:
        assert (await s.scalars(select(FileReportRecorded.report_id))).all() == ["p-new"]
    assert filehistory.VersionStore(storage, "pia", max_age_days=30, budget_bytes=0).has(kept)

    # Once the kept version goes too, the rows that needed it follow (the whole run with them).
    os.utime(filehistory.VersionStore(storage, "pia", max_age_days=30, budget_bytes=0).path / kept[:2] / kept, (time.time() - 35 * 86400,) * 2)
    done = await RowPruner(storage, max_age_days=30).run(rt.sessions)
    assert done.versions == 1
    assert await _paths(rt) == {("pia", p) for p in ("young.txt", "mixed-run/a", "mixed-run/b")}


async def test_no_age_limit_keeps_every_row(rt: Runtime, tmp_path: Path) -> None:
    await _add(rt, "ria", "made.txt")
    async with rt.sessions() as s, s.begin():
        await s.execute(insert(FileReportRecorded), [
            {"user_id": "ria", "report_id": "r-31d", "created_at": datetime.now(UTC) - timedelta(days=31)},
            {"user_id": "ria", "report_id": "r-29d", "created_at": datetime.now(UTC) - timedelta(days=29)}])
    done = await RowPruner(tmp_path, max_age_days=0).run(rt.sessions)
    assert done.events == 0 and await _paths(rt) == {("ria", "made.txt")}
    # report keys still go, after REPORT_KEY_DAYS (30)
    async with rt.sessions() as s:
        assert (await s.scalars(select(FileReportRecorded.report_id))).all() == ["r-29d"]


def test_migration_0011_down_and_up(db_url: str) -> None:
    command.downgrade(alembic_config(db_url), "0010")
    assert db_rows(db_url, "select count(*) from information_schema.columns where table_name = 'data_events' "
                           "and column_name = 'undoes_run_id'") == [(0,)]
    upgrade(db_url)
    assert db_rows(db_url, "select count(*) from pg_indexes where indexname in ('ix_data_events_undoes', "
                           "'ix_data_events_created', 'ix_file_reports_recorded_created')") == [(3,)]
