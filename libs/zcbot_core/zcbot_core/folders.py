"""Task folders of one user: the lock that serializes their changes and the no-subtask rule.

Shared by the gateway (task create/restore, files rename/delete), the scheduler's job folders and
the channel conversations, so every path that creates or moves a task folder obeys the same rule.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from zcbot_core import paths
from zcbot_core.db.models import Task


async def lock_user_folders(session: AsyncSession, user_id: str) -> None:
    """Serialize working-dir changes of one user until the transaction ends."""
    key = func.hashtextextended(f"zcbot:folders:{user_id}", 0)
    await session.execute(select(func.pg_advisory_xact_lock(key)))


async def nested_working_dir(
    session: AsyncSession, user_id: str, working_dir: str, exclude_task_id: str | None = None
) -> str | None:
    """A live working dir of the user strictly inside or containing `working_dir` (None if none)."""
    stmt = select(Task.working_dir).distinct().where(Task.user_id == user_id, Task.deleted_at.is_(None))
    if exclude_task_id is not None:
        stmt = stmt.where(Task.task_id != exclude_task_id)
    for existing in (await session.scalars(stmt)).all():
        if paths.is_prefix_nested(working_dir, existing):
            return existing
    return None
