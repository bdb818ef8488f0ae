"""A background process's file-changes report is recorded once (issue 29 follow-up), through the real
JetStream work queue and PostgreSQL: a runner that wrote the rows and died before its ack leaves the
report to be redelivered, and the second delivery writes nothing; another user's report with the same
proc id is its own report. Plus migration 0010 down and up again."""

from __future__ import annotations

from typing import Any

import pytest
from alembic import command
from sqlalchemy import select

from tests.helpers.db import db_rows
from zcbot_core.bus import FileChangesReport, encode
from zcbot_core.bus.topology import file_changes_consumer_config
from zcbot_core.db.migrate import alembic_config, upgrade
from zcbot_core.db.models import DataEvent
from zcbot_core.platform.service import Runtime
from zcbot_runner import file_events

CHANGES = [{"path": "w/a.txt", "kind": "create", "size": 1}, {"path": "w/b.txt", "kind": "modify", "size": 2},
           {"path": "w/old", "kind": "rmdir"}]


class _DiedBeforeAck:
    """The delivered message as a runner that dies right after writing sees it: its ack never
    reaches the server (JetStream redelivers: the nak stands for the ack wait running out)."""

    def __init__(self, msg: Any) -> None:
        self.data, self._msg = msg.data, msg

    async def ack(self) -> None:
        await self._msg.nak()

    async def nak(self, delay: float | None = None) -> None:
        raise AssertionError("the database was up: the report should have been written")

    async def term(self) -> None:
        raise AssertionError("a well-formed report is never dropped")


async def _publish(rt: Runtime, user_id: str, proc_id: str) -> None:
    # the executor's publish (zcbot_executor/background/changes.py): the same subject and message id
    rep = FileChangesReport(user_id=user_id, task_id="", run_id="", proc_id=proc_id, changes=CHANGES)
    ack = await rt.js.publish(rt.topo.file_changes_subject(), encode(rep),
                              headers={"Nats-Msg-Id": f"fchg:{user_id}:{proc_id}"})
    assert not ack.duplicate


async def _rows(rt: Runtime, user_id: str) -> list[tuple[str, str]]:
    async with rt.sessions() as s:
        return [(e.path, e.kind) for e in (await s.scalars(
            select(DataEvent).where(DataEvent.user_id == user_id).order_by(DataEvent.id))).all()]


async def test_a_redelivered_report_is_recorded_once(rt: Runtime) -> None:
    sub = await rt.js.pull_subscribe_bind(durable=file_changes_consumer_config(rt.topo).durable_name,
                                          stream=rt.topo.file_changes_stream)
    try:
        await _publish(rt, "ann", "p0123456789ab")
        first = (await sub.fetch(1, timeout=5))[0]
        await file_events.on_report(rt.sessions, _DiedBeforeAck(first))
        assert await _rows(rt, "ann") == [(c["path"], c["kind"]) for c in CHANGES]

        again = (await sub.fetch(1, timeout=5))[0]
        assert again.metadata.num_delivered == 2 and again.data == first.data
        await file_events.on_report(rt.sessions, again)  # the next runner: finds the key, writes nothing, acks
        assert await _rows(rt, "ann") == [(c["path"], c["kind"]) for c in CHANGES]
        with pytest.raises(TimeoutError):  # acked this time: nothing left to deliver
            await sub.fetch(1, timeout=1)

        # another user's report that happens to carry the same proc id is recorded in full
        await _publish(rt, "bob", "p0123456789ab")
        other = (await sub.fetch(1, timeout=5))[0]
        await file_events.on_report(rt.sessions, other)
        assert await _rows(rt, "bob") == [(c["path"], c["kind"]) for c in CHANGES]
        assert await _rows(rt, "ann") == [(c["path"], c["kind"]) for c in CHANGES]
    finally:  # a pull subscription left open holds the runtime's drain for its whole 5 s timeout
        await sub.unsubscribe()


def test_migration_0010_down_and_up(db_url: str) -> None:
    command.downgrade(alembic_config(db_url), "0009")
    assert db_rows(db_url, "select to_regclass('file_reports_recorded')") == [(None,)]
    upgrade(db_url)
    assert db_rows(db_url, "select count(*) from file_reports_recorded") == [(0,)]
    assert [r[0] for r in db_rows(db_url, "select a.attname from pg_index i join pg_attribute a on "
                                          "a.attrelid = i.indrelid and a.attnum = any(i.indkey) where "
                                          "i.indrelid = 'file_reports_recorded'::regclass and i.indisprimary "
                                          "order by a.attname")] == ["report_id", "user_id"]
