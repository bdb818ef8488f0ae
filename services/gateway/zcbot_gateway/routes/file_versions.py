"""File versions and undo (issue 29): `GET /v1/files/versions?path=`, `POST /v1/files/restore`,
`POST /v1/tasks/{id}/runs/{run_id}/revert-files`.

Versions are the `data_events` rows of a path whose `prev_hash` is still in the user's version
store (`zcbot_core.filehistory`): the content a change replaced or removed. A path's rows include
those from before a rename brought it there (`filehistory.lineage`; each item names the path it
had). Restoring keeps what is there now first (so a restore is undoable) and is recorded like any
other change. Refusals and a revert's conflict reasons are in the request's language (Chinese
unless Accept-Language starts with English: file_history_texts.py); each conflict keeps its `code`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import func, select

from zcbot_core import filehistory, safe_fs
from zcbot_core.db.models import DataEvent
from zcbot_core.filehistory import lineage
from zcbot_core.filehistory import revert as revert_mod
from zcbot_core.runstate import ACTIVE
from zcbot_core.runstate.transitions import TaskNotFound
from zcbot_core.safe_fs import paths
from zcbot_gateway.deps import CurrentUser, SessionDep, SettingsDep
from zcbot_gateway.file_history_texts import conflict_reasons, refusal, run_active, task_not_found
from zcbot_gateway.http import PagingDep
from zcbot_gateway.lang import LangDep
from zcbot_gateway.task_access import get_user_task

router = APIRouter(tags=["files"])
MAX_PATH = 4096
VersionPaging = PagingDep(50, 200)


class RestoreIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(max_length=MAX_PATH)
    version_id: int = Field(ge=1, description="an `id` from GET /v1/files/versions")


class RevertIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    force: bool = Field(default=False, description="also overwrite files changed again since the run")


def _rel(raw: str, lang: str) -> str:
    try:
        return paths.normalize_rel(raw.strip(), allow_empty=False, allow_hidden=False)
    except paths.PathRejected as exc:
        raise refusal(400, "bad_path", lang, why=exc) from None


def _root(settings: Any, user: str) -> Path:
    return paths.user_root(settings.storage_root, user)


@router.get("/v1/files/versions")
async def list_versions(user: CurrentUser, session: SessionDep, settings: SettingsDep, paging: VersionPaging,
                        path: Annotated[str, Query(max_length=MAX_PATH)], lang: LangDep) -> dict[str, Any]:
    """Kept versions of one file, newest first (list envelope), across the renames that brought it
    here; `size` is the kept content's."""
    rel = _rel(path, lang)
    segs = await lineage.segments(session, user, rel)
    where = (DataEvent.user_id == user, lineage.where(segs), DataEvent.prev_hash.is_not(None))
    total = await session.scalar(select(func.count()).select_from(DataEvent).where(*where)) or 0
    rows = (await session.scalars(select(DataEvent).where(*where).order_by(DataEvent.id.desc())
                                  .offset(paging.offset).limit(paging.page_size))).all()
    store = filehistory.VersionStore.from_settings(settings, user)
    sizes = await asyncio.to_thread(lambda: {r.prev_hash: store.size_of(r.prev_hash) for r in rows})
    items = [{"id": r.id, "path": r.path, "hash": r.prev_hash, "replaced_by": r.kind, "task_id": r.task_id,
              "run_id": r.run_id, "created_at": r.created_at.isoformat(), "size": sizes[r.prev_hash],
              "available": sizes[r.prev_hash] is not None} for r in rows]
    return paging.envelope(items, total, path=rel)


@router.post("/v1/files/restore")
async def restore_version(body: RestoreIn, user: CurrentUser, session: SessionDep, settings: SettingsDep,
                          lang: LangDep) -> dict[str, Any]:
    """Put a kept version back at its path (what is there now becomes a version itself)."""
    rel = _rel(body.path, lang)
    row = await session.get(DataEvent, body.version_id)
    if row is None or row.user_id != user or row.prev_hash is None \
            or not lineage.covers(await lineage.segments(session, user, rel), row.path, row.id):
        raise refusal(404, "no_version", lang)
    store = filehistory.VersionStore.from_settings(settings, user)
    digest = row.prev_hash

    def work() -> filehistory.Change:
        if not store.has(digest):
            raise refusal(404, "version_pruned", lang)
        with safe_fs.Root.open(_root(settings, user), create=True) as r:
            return filehistory.restore(store, r, rel, digest)

    try:
        change = await asyncio.to_thread(work)
    except safe_fs.SafeFsError as exc:
        raise refusal(exc.http_status, "restore_refused", lang, path=rel, why=exc) from None
    await filehistory.record(session, user, [change])
    await session.commit()
    return {"ok": True, "path": rel, "version_id": row.id, "size": change.size, "hash": change.content_hash}


@router.post("/v1/tasks/{task_id}/runs/{run_id}/revert-files")
async def revert_run_files(task_id: str, run_id: str, user: CurrentUser, session: SessionDep, settings: SettingsDep,
                           lang: LangDep, body: RevertIn | None = None) -> dict[str, Any]:
    """Every file this run changed back to its content before the run (409 while a run is active)."""
    if len(run_id) > 64:
        raise refusal(404, "no_run", lang)
    try:
        task = await get_user_task(session, user, task_id, for_update=True)
    except TaskNotFound:
        raise task_not_found(lang) from None
    if task.run_status in ACTIVE:
        raise run_active(task.run_status, lang)
    events = (await session.scalars(select(DataEvent).where(
        DataEvent.user_id == user, DataEvent.task_id == task.task_id, DataEvent.run_id == run_id
    ).order_by(DataEvent.id))).all()
    if not events:
        raise refusal(404, "no_changes", lang)
    plans = revert_mod.plan(list(events))
    store = filehistory.VersionStore.from_settings(settings, user)
    force = bool(body and body.force)
    result = revert_mod.RevertResult()

    def work() -> None:
        with safe_fs.Root.open(_root(settings, user), create=True) as r:
            revert_mod.revert(store, r, plans, force=force, into=result)

    # What was applied is recorded whatever happens next: a failure per path is a conflict already,
    # and even a bug or a cancelled request (the thread goes on: it is waited for) leaves `result`
    # listing every change made, without which the versions those changes replaced are unreachable.
    job = asyncio.ensure_future(asyncio.to_thread(work))
    failure: BaseException | None = None
    try:
        await asyncio.shield(job)
    except BaseException as exc:
        failure = exc
        if not job.done():
            await asyncio.wait({job})
    ok = failure is None and not result.conflicts and not result.missing
    # Only a revert that left nothing to do marks its rows as undoing the run: the history then says
    # "undone" (message_page.py); one that skipped paths leaves the offer up (force, or fix and retry).
    await filehistory.record(session, user, result.reverted, task_id=task.task_id,
                             undoes_run_id=run_id if ok else None)
    await session.commit()
    if isinstance(failure, safe_fs.SafeFsError):  # the user root itself could not be opened
        raise refusal(400, "revert_refused", lang, path=failure.rel or "?", why=failure) from None
    if failure is not None:
        raise failure
    return {"ok": ok, "run_id": run_id, "reverted": [c.path for c in result.reverted],
            "conflicts": conflict_reasons(result.conflicts, lang), "missing_versions": result.missing}
