"""Creating a task: the one path for the web (`POST /v1/tasks`), the scheduler's isolated firings
and the channel conversations' first message.

`create_task` checks the folder rules under the user's folder lock (`folders.claim_folder`),
creates the folder eagerly (`storage_root/<user_id>/<working_dir>`, never through a symlink) and
adds the row (flushed, not committed: the caller owns the transaction, and the lock lasts until
it ends). Refusals are `PathRejected`: `folders.NestedFolder`, `paths.FileInTheWay` (a file where
the folder would be) or another rejected path; `working_dir` must be a simple folder name
(`folders.simple_working_dir`), except a scheduled job's folder stored before that rule
(`existing_folder=True`: the row keeps working).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncSession

from zcbot_core.db.models import Task
from zcbot_core.safe_fs import paths
from zcbot_core.workspace.folders import claim_folder, simple_working_dir

WEB_CHANNEL = "web"


def make_task_dir(storage_root: Path, user_id: str, working_dir: str) -> Path:
    """mkdir -p storage_root/<user_id>/<working_dir>, refusing symlink escapes (PathRejected)."""
    return paths.make_user_dir(paths.user_root(storage_root, user_id), working_dir)


async def create_task(
    session: AsyncSession,
    storage_root: Path,
    *,
    user_id: str,
    name: str,
    working_dir: str,
    channel: str = WEB_CHANNEL,
    description: str | None = None,
    skill: str | None = None,
    model_profile: str | None = None,
    scheduled_job_id: str | None = None,
    existing_folder: bool = False,
) -> Task:
    """A new task of `user_id` in `working_dir` (created on disk), flushed in `session`."""
    if not existing_folder:
        working_dir = simple_working_dir(working_dir)
    await claim_folder(session, user_id, working_dir)
    await asyncio.to_thread(make_task_dir, storage_root, user_id, working_dir)
    task = Task(user_id=user_id, name=name, working_dir=working_dir, channel=channel, description=description,
                skill=skill, model_profile=model_profile, scheduled_job_id=scheduled_job_id)
    session.add(task)
    await session.flush()
    return task
