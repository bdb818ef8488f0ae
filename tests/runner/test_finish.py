"""The runner's usual end of a run: one autocommit statement that only applies when nothing waits
behind the run and the runner still holds it (`zcbot_core.runstate.transitions.end_run_if_nothing_waits`)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from zcbot_core.db.models import Task, User
from zcbot_core.platform.config import Settings
from zcbot_core.platform.service import close_runtime, open_runtime
from zcbot_core.runstate.transitions import end_run_if_nothing_waits

WAITING = [{"run_id": "r-next", "content": "next", "origin": "web", "queued_at": 0.0}]


@pytest.mark.parametrize(("pending", "owner", "run_id", "ends"), [
    (None, "me", "r-1", True),
    ([], "me", "r-1", True),
    (WAITING, "me", "r-1", False),  # the transaction must start the waiting message
    (None, "someone-else", "r-1", False),  # redelivered elsewhere: not this runner's to end
    (None, "me", "r-old", False),  # a stale execution of an earlier run
])
async def test_ends_the_run_only_when_nothing_waits_and_it_is_still_held(
        settings: Settings, pending: Any, owner: str, run_id: str, ends: bool) -> None:
    rt = await open_runtime("runner", settings)
    try:
        async with rt.sessions() as s, s.begin():
            s.add(User(user_id="finisher"))
            await s.flush()
            s.add(Task(task_id="t-finish", user_id="finisher", name="t", working_dir="t", run_status="running",
                       run_id="r-1", run_owner=owner, pending_inputs=pending))
        ended = await end_run_if_nothing_waits(rt.autocommit, task_id="t-finish", run_id=run_id, status="ok", error=None,
                                               timings={"total": 0.1}, owner="me")
        assert ended is ends
        async with rt.sessions() as s:
            row = (await s.execute(select(Task.run_status, Task.run_owner, Task.run_timings, Task.pending_inputs)
                                   .where(Task.task_id == "t-finish"))).one()
        if ends:
            assert (row.run_status, row.run_owner, row.run_timings) == ("idle", None, {"total": 0.1})
        else:
            assert (row.run_status, row.run_owner, row.run_timings) == ("running", owner, None)
            assert row.pending_inputs == pending
    finally:
        await close_runtime(rt)
