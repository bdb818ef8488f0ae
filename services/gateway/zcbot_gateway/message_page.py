"""The shape of a task's stored history page (`GET /v1/tasks/{id}/messages`) and the per-run count of
changed files it carries, so a page rendered after a reload can offer "undo this run's file changes"
exactly as the live `done` event's `files_changed` does (issue 29), and which of those runs were
undone since (`files_undone`: the page shows "undone" instead of the offer).

Undone is read from `data_events`: a revert that left nothing to do tags its rows with the run
(`undoes_run_id`, routes/file_versions.py); the run is undone while that tag is newer than the run's
own newest row (a background process's late report after the undo offers the undo again)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from pydantic import BaseModel, Field
from sqlalchemy import distinct, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from zcbot_core.db.models import DataEvent


class MessageOut(BaseModel):
    idx: int
    kind: str
    run_id: str | None
    payload: Any = Field(description="the stored chat message (role, content, tool_calls, ...)")
    tokens_in: int | None
    tokens_out: int | None
    model_profile: str | None
    created_at: str | None


class MessagePage(BaseModel):
    """The list envelope (`http.Paging.envelope`) of a task's messages, plus `task_id` and `files_changed`."""

    items: list[MessageOut]
    total: int
    page: int
    page_size: int
    task_id: str
    files_changed: dict[str, int] = Field(
        default_factory=dict,
        description="run_id → distinct files that run created, changed or removed, for the runs of this page's "
                    "messages that changed any (the same count as the run's `done` event; absent runs changed none)")
    files_undone: list[str] = Field(
        default_factory=list,
        description="the run_ids of `files_changed` whose file changes were undone since (revert-files left "
                    "nothing to do): no undo to offer for them")


class RunFiles(NamedTuple):
    changed: dict[str, int]
    undone: list[str]


async def files_by_run(session: AsyncSession, user_id: str, task_id: str, run_ids: Iterable[str | None]) -> RunFiles:
    """Two grouped queries over `data_events` for the given runs of this user's task."""
    wanted = sorted({r for r in run_ids if r})
    if not wanted:
        return RunFiles({}, [])
    mine = (DataEvent.user_id == user_id, DataEvent.task_id == task_id)
    rows = (await session.execute(
        select(DataEvent.run_id, func.count(distinct(DataEvent.path)), func.max(DataEvent.id))
        .where(*mine, DataEvent.run_id.in_(wanted)).group_by(DataEvent.run_id)
    )).all()
    changed = {run_id: int(n) for run_id, n, _last in rows if run_id and n}
    if not changed:
        return RunFiles({}, [])
    undos = await session.execute(
        select(DataEvent.undoes_run_id, func.max(DataEvent.id))
        .where(*mine, DataEvent.undoes_run_id.in_(sorted(changed))).group_by(DataEvent.undoes_run_id)
    )
    last = {run_id: top for run_id, _n, top in rows}
    return RunFiles(changed, sorted(r for r, top in undos.all() if r in last and top > last[r]))
