"""The shape of a task's stored history page (`GET /v1/tasks/{id}/messages`) and the per-run count of
changed files it carries, so a page rendered after a reload can offer "undo this run's file changes"
exactly as the live `done` event's `files_changed` does (issue 29)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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


async def files_changed_by_run(session: AsyncSession, user_id: str, task_id: str,
                               run_ids: Iterable[str | None]) -> dict[str, int]:
    """One grouped query over `data_events` for the given runs of this user's task."""
    wanted = sorted({r for r in run_ids if r})
    if not wanted:
        return {}
    rows = await session.execute(
        select(DataEvent.run_id, func.count(distinct(DataEvent.path)))
        .where(DataEvent.user_id == user_id, DataEvent.task_id == task_id, DataEvent.run_id.in_(wanted))
        .group_by(DataEvent.run_id)
    )
    return {run_id: int(n) for run_id, n in rows.all() if run_id and n}
