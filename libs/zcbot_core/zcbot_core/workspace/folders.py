"""Task folders of one user: the working-dir rule, the lock that serializes their changes and the
no-subtask rule.

Shared by task creation (`zcbot_core.workspace.tasks.create_task`: the web, the scheduler's firings, the
channel conversations), task restore, the files API's rename/delete and the scheduled jobs'
folders, so every path that creates or moves a task folder obeys the same rule.
Refusals are `PathRejected` (the gateway answers 400, or the error's `status`).
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from zcbot_core.db.models import Task
from zcbot_core.safe_fs import paths

MAX_WORKING_DIR = 1024


class NestedFolder(paths.PathRejected):
    """The working dir is strictly inside, or strictly contains, a live task's working dir."""

    code = "nested_folder"

    def __init__(self, working_dir: str, existing: str) -> None:
        relation = "inside" if working_dir.startswith(existing + "/") else "contains"
        super().__init__(f"working_dir {working_dir!r} {relation} the working_dir {existing!r} of another task; "
                         "tasks cannot be nested (use the same folder, or a sibling)")
        self.working_dir = working_dir
        self.existing = existing


def normalize_working_dir(raw: str) -> str:
    """User input -> stored working dir (PathRejected on traversal, absolute, NUL, hidden, empty
    parts, names with outer whitespace, more than `MAX_WORKING_DIR` characters)."""
    wd = paths.to_db_path(raw.strip())
    if any(part != part.strip() for part in wd.split("/")):
        raise paths.PathRejected("folder names must not start or end with whitespace")
    if len(wd) > MAX_WORKING_DIR:
        raise paths.PathRejected(f"working_dir must be at most {MAX_WORKING_DIR} characters")
    return wd


def simple_working_dir(raw: str) -> str:
    """A new task folder: one simple name (seeds §2/§7.4: no '/', '\\', '..', no leading '.'), then
    the stored form (`normalize_working_dir`). Rows made before the rule keep their nested paths:
    only new folders (a task, a job's folder when it changes, a channel's task) pass here."""
    if not isinstance(raw, str):
        raise paths.PathRejected("working_dir must be a folder name")
    name = raw.strip()
    if "/" in name or "\\" in name:
        raise paths.PathRejected(f"working_dir must be a simple folder name (no '/' or '\\'): {name[:80]!r}")
    if name == ".." or name.startswith("."):
        raise paths.PathRejected(f"working_dir must be a simple folder name (no '..', no leading '.'): {name[:80]!r}")
    return normalize_working_dir(name)


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


async def claim_folder(
    session: AsyncSession, user_id: str, working_dir: str, exclude_task_id: str | None = None
) -> None:
    """Take the user's folder lock and check the no-subtask rule (NestedFolder); the lock is held
    until the transaction ends, so no other create can nest with this folder meanwhile."""
    await lock_user_folders(session, user_id)
    existing = await nested_working_dir(session, user_id, working_dir, exclude_task_id=exclude_task_id)
    if existing is not None:
        raise NestedFolder(working_dir, existing)
