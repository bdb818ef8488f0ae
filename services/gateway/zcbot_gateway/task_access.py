"""Access to one of the caller's tasks, for every router that works on a task (tasks, messages
and events, export): scoped by `Task.user_id`, so another user's task, a missing one and a
soft-deleted one all look the same (404)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from zcbot_core.db.models import Task
from zcbot_core.runstate.transitions import TaskNotFound
from zcbot_core.workspace.tasks import WEB_CHANNEL
from zcbot_gateway.http import conflict

TASK_NOT_FOUND = "task not found"
MAX_TASK_ID = 32


def check_task_id(task_id: str) -> None:
    """404 for an id no task can have, before it reaches a query or a subject."""
    if len(task_id) > MAX_TASK_ID or "\x00" in task_id:
        raise TaskNotFound(TASK_NOT_FOUND)


async def get_user_task(
    session: AsyncSession,
    user_id: str,
    task_id: str,
    *,
    for_update: bool = False,
    include_deleted: bool = False,
) -> Task:
    """The user's task or 404 (another user's, missing and soft-deleted tasks look the same)."""
    check_task_id(task_id)
    stmt = select(Task).where(Task.task_id == task_id, Task.user_id == user_id)
    if not include_deleted:
        stmt = stmt.where(Task.deleted_at.is_(None))
    if for_update:
        stmt = stmt.with_for_update()
    task = (await session.scalars(stmt)).first()
    if task is None:
        raise TaskNotFound(TASK_NOT_FOUND)
    return task


def require_web_task(task: Task) -> None:
    """Tasks of a channel (`channel != 'web'`) are read-only in the web API (409)."""
    if (task.channel or WEB_CHANNEL) != WEB_CHANNEL:
        raise conflict(f"task belongs to the {task.channel!r} channel and is read-only here")
