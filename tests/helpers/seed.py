"""Resources a test seeds directly (no HTTP route creates them in one step)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zcbot_core import schedules
from zcbot_core.db.engine import make_engine, make_sessionmaker
from zcbot_core.workspace import folders
from zcbot_core.workspace.tasks import create_task


async def seed_schedule(db_url: str, user_id: str, name: str, prompt: str) -> str:
    """A daily 09:00 UTC scheduled job of the user; returns its job_id."""
    engine = make_engine(db_url, pool_size=1, max_overflow=0)
    try:
        async with make_sessionmaker(engine)() as session:
            job = await schedules.create_schedule(session, user_id=user_id, name=name, cron="0 9 * * *",
                                                  prompt=prompt, timezone="UTC")
            await session.commit()
            return job.job_id
    finally:
        await engine.dispose()


def seed_extended_memory(storage_root: Path, user_id: str, filename: str, description: str, body: str) -> None:
    """One extended-memory file of the user (front matter + body)."""
    folder = storage_root / user_id / ".memory" / "extended"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / filename).write_text(f"---\ndescription: {description}\n---\n{body}\n")


async def seed_legacy_task(sessions: Any, storage_root: Path, user_id: str, name: str, working_dir: str) -> dict[str, str]:
    """A task in a nested folder (`a/b`), as rows made before the simple-name rule (issue 26 item 5)
    still are: no entry creates one now, but such rows keep working."""
    async with sessions() as session, session.begin():
        task = await create_task(session, storage_root, user_id=user_id, name=name,
                                 working_dir=folders.normalize_working_dir(working_dir), existing_folder=True)
        return {"task_id": task.task_id, "working_dir": task.working_dir, "name": task.name}


async def legacy_task(client: Any, user_id: str, name: str, working_dir: str) -> dict[str, str]:
    """`seed_legacy_task` through an in-process app client (`client.app.state.rt`)."""
    rt = client.app.state.rt
    return await seed_legacy_task(rt.sessions, rt.settings.storage_root, user_id, name, working_dir)
