"""User-rooted files API (seed 003 §7.1, §7.2, §7.4): the only mutation path for folders.

Every path is relative to `storage_root/<user_id>` and goes through `zcbot_core.safe_fs.paths`
(`normalize_rel` with hidden names refused, `validate_task_name`,
`to_db_path`): traversal, absolute paths, NUL, backslashes, dotfiles and symlinks leading out of the
root are 400. Dotfiles (`.memory/`, upload temp files) never appear in listings.

Because the agent's sandbox can change the tree at any moment (e.g. swap a folder for a symlink),
files are opened and changed through `zcbot_core.safe_fs` (resolution beneath the user root's fd
that never follows a symlink), never by a path lookup: check-then-use races cannot leave the root.
Symlinks are neither listed nor followed (400).

- `GET /v1/files?path=`: the list envelope `{items, total, page, page_size}` plus `crumbs, exists,
  root, current, truncated`; a missing path is `exists: false` (not 404), a file is 400.
  `items[]`: `{name, path, type: file|dir, size, mtime}`
  (dirs first; `size` is null for dirs; `mtime` ISO 8601 UTC). `root` is the user root as the agent
  sees it (`/workspace`); `crumbs` start with `{name: "~", path: ""}`.
- `POST /v1/files/upload`: multipart field `file` (repeatable), the folder as the form field `path`
  or the query `?path=` (both and different, or any other form field: 422); the folder is created;
  each file is written to a temp file and renamed into place (an existing file is replaced, all or
  nothing per request). The request's total size is capped by `ZCBOT_UPLOAD_MAX_BYTES` (413); an
  upload that would take the user over `ZCBOT_USER_DISK_QUOTA_MB` is 507 and writes nothing.
- `GET /v1/files/download?path=`: the file as an attachment (dirs 400, missing 404).
- `POST /v1/files/mkdir {path}`: creates the folder and missing parents (exists -> 409).
- `POST /v1/files/delete {path}`: a file or an empty folder; the root, non-empty folders (400) and
  folders that are, or contain, a live task's working dir (409) are refused.
- `POST /v1/files/rename {path, new_name}`: in place (new_name is a simple name); an existing sibling
  is 409. A folder rename is DB-aware: in one transaction (per-user folder lock) the tasks whose
  working_dir is the folder or inside it are locked (FOR UPDATE); any with an active run -> 409; the
  new working dirs must not nest with other live tasks (409); tasks and scheduled jobs are rewritten
  BEFORE the disk rename, and the transaction is rolled back if the rename fails.
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.background import BackgroundTask
from starlette.datastructures import UploadFile

from zcbot_core import filehistory, quota
from zcbot_core.db.models import ScheduledJob, Task
from zcbot_core.platform.config import Settings
from zcbot_core.runstate import ACTIVE
from zcbot_core.safe_fs import paths
from zcbot_core.workspace.folders import MAX_WORKING_DIR, lock_user_folders, normalize_working_dir
from zcbot_core.workspace.memory import SANDBOX_ROOT
from zcbot_gateway.deps import CurrentUser, SessionDep, SettingsDep
from zcbot_gateway.file_refusals import FolderBusy, FolderInUse, PathChanged, RootRefused, SameName, WouldNest
from zcbot_gateway.files_fs import (
    MAX_LIST_ENTRIES,
    canon_dir,
    delete_at,
    list_dir,
    mkdir_at,
    open_download,
    rename_at,
    rename_back,
    stat_source,
    write_uploads,
)
from zcbot_gateway.http import PagingDep, bad_request, invalid_query

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/files", tags=["files"])

MAX_PATH = 4096
MAX_UPLOAD_FILES = 100
MULTIPART_SLACK = 64 * 1024  # headers/boundaries allowed on top of the file bytes
FilePaging = PagingDep(MAX_LIST_ENTRIES, MAX_LIST_ENTRIES)
PathQuery = Annotated[str, Query(max_length=MAX_PATH, description="relative to your root; empty = the root")]


class PathIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(max_length=MAX_PATH)


class RenameIn(PathIn):
    new_name: str = Field(max_length=1000, description="a simple name: no '/', '\\', NUL, leading '.'")


# ---- path + fd helpers (all checking is `zcbot_core.safe_fs.paths`) -----------------------------------


def user_root(settings: Settings, user_id: str) -> Path:
    return paths.user_root(settings.storage_root, user_id)


def clean_rel(raw: str, *, allow_empty: bool = True) -> str:
    return paths.normalize_rel(raw.strip(), allow_empty=allow_empty, allow_hidden=False)


# ---- list ------------------------------------------------------------------------------------


def _crumbs(rel: str) -> list[dict[str, str]]:
    crumbs = [{"name": "~", "path": ""}]
    parts = rel.split("/") if rel else []
    for i, part in enumerate(parts):
        crumbs.append({"name": part, "path": "/".join(parts[: i + 1])})
    return crumbs


@router.get("")
async def list_files(user: CurrentUser, settings: SettingsDep, paging: FilePaging, path: PathQuery = "") -> dict[str, Any]:
    """List a folder of your root (dotfiles hidden; list envelope). A missing folder is `exists: false`."""
    rel = clean_rel(path)
    exists, entries, truncated = await asyncio.to_thread(list_dir, user_root(settings, user), rel)
    return paging.slice(entries, crumbs=_crumbs(rel), exists=exists, root=SANDBOX_ROOT, current=rel,
                        truncated=truncated)


# ---- download --------------------------------------------------------------------------------


@router.get("/download")
async def download_file(user: CurrentUser, settings: SettingsDep, path: PathQuery = "") -> FileResponse:
    """Download one file as an attachment."""
    rel = clean_rel(path, allow_empty=False)
    fh = await asyncio.to_thread(open_download, user_root(settings, user), rel)
    # The response re-opens the very file we opened through its fd (/proc/self/fd/N is our own
    # descriptor, not a lookup in the user's tree), then closes our handle.
    return FileResponse(f"/proc/self/fd/{fh.fileno()}", filename=posixpath.basename(rel), content_disposition_type="attachment",
                        background=BackgroundTask(fh.close))


# ---- upload ----------------------------------------------------------------------------------


_UPLOAD_BODY = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file"],
    "properties": {"file": {"type": "array", "items": {"type": "string", "format": "binary"}},
                   "path": {"type": "string", "maxLength": MAX_PATH,
                            "description": "target folder (or the query parameter `path`)"}},
    "additionalProperties": False,
}}}}}
UPLOAD_FIELDS = {"file", "path"}


@router.post("/upload", status_code=status.HTTP_201_CREATED, openapi_extra=_UPLOAD_BODY)
async def upload_files(request: Request, user: CurrentUser, session: SessionDep, settings: SettingsDep,
                       path: PathQuery = "") -> dict[str, Any]:
    """Upload files (multipart field `file`, repeatable) into a folder, creating it if needed."""
    limit = settings.zcbot_upload_max_bytes
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit + MULTIPART_SLACK:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, detail=f"upload exceeds the limit of {limit} bytes")
    try:
        form = await request.form(max_files=MAX_UPLOAD_FILES, max_fields=20)
    except HTTPException:
        raise
    except Exception:
        raise bad_request("expected a multipart/form-data body with one or more 'file' parts") from None
    try:
        rel_dir = _upload_dir(form, path, request.query_params)
        files: list[tuple[str, UploadFile]] = []
        for value in form.getlist("file"):
            if not isinstance(value, UploadFile):
                raise bad_request("'file' must be a file part (with a filename)")
            name = paths.validate_task_name(value.filename or "", "filename")
            if name != value.filename:
                raise bad_request("filename must not start or end with whitespace")
            if any(name == seen for seen, _ in files):
                raise bad_request(f"filename {name!r} appears twice in this upload")
            files.append((name, value))
        if not files:
            raise bad_request("no files: send one or more multipart parts named 'file'")
        root, need = user_root(settings, user), sum(upload.size or 0 for _, upload in files)
        ledger = quota.Ledger.from_settings(settings)
        await asyncio.to_thread(ledger.reserve, user, need, root)  # DiskQuotaExceeded: 507 at the edge
        try:
            changes: list[filehistory.Change] = []
            results = await asyncio.to_thread(write_uploads, root, rel_dir, files, limit,
                                              filehistory.VersionStore.from_settings(settings, user), changes)
        except BaseException:
            await asyncio.to_thread(ledger.reserve, user, -need)  # nothing was kept
            raise
    finally:
        await form.close()
    await filehistory.record(session, user, changes)
    await session.commit()
    return {"path": rel_dir, "uploaded": results}


def _upload_dir(form: Any, query_path: str, query: Any) -> str:
    """The target folder: the form field `path` or the query `path` (never a silent wrong place:
    an unknown field, two different paths or a file part as `path` are 422)."""
    unknown = sorted({key for key in form.keys() if key not in UPLOAD_FIELDS})
    if unknown:
        raise invalid_query("body", zh=f"未知的表单字段 {', '.join(unknown)[:200]}；请发送 file，可另加 path",
                            en=f"unknown form field(s) {', '.join(unknown)[:200]}; send 'file' and optionally 'path'")
    fields = form.getlist("path")
    if len(fields) > 1 or (fields and not isinstance(fields[0], str)):
        raise invalid_query("path", zh="表单字段 path 只能给一次，且须为文本",
                            en="give the form field 'path' once, as text")
    raw = fields[0] if fields else query_path
    if fields and "path" in query and query_path != fields[0]:
        raise invalid_query("path", zh="表单字段 path 与查询参数 path 指向不同的文件夹",
                            en="the form field and the query parameter name different folders")
    if len(raw) > MAX_PATH:
        raise invalid_query("path", zh=f"至多 {MAX_PATH} 个字符", en=f"at most {MAX_PATH} characters")
    rel_dir = clean_rel(raw)
    return normalize_working_dir(rel_dir) if rel_dir else rel_dir  # every folder it may create: a valid name


# ---- mkdir -----------------------------------------------------------------------------------


@router.post("/mkdir", status_code=status.HTTP_201_CREATED)
async def make_dir(body: PathIn, user: CurrentUser, session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    """Create a folder (and missing parents)."""
    rel = normalize_working_dir(clean_rel(body.path, allow_empty=False))
    entry = await asyncio.to_thread(mkdir_at, user_root(settings, user), rel)
    await filehistory.record(session, user, [filehistory.Change(rel, "mkdir")])
    await session.commit()
    return entry


# ---- delete ----------------------------------------------------------------------------------


def _task_folder_filter(user_id: str, rel: str) -> Any:
    return (Task.user_id == user_id) & or_(Task.working_dir == rel, Task.working_dir.startswith(rel + "/", autoescape=True))


@router.post("/delete")
async def delete_path(body: PathIn, user: CurrentUser, session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    """Delete a file or an empty folder (not your root; not a live task's folder: 409)."""
    rel = clean_rel(body.path)
    if not rel:
        raise RootRefused("your root folder cannot be deleted")
    root = user_root(settings, user)
    await lock_user_folders(session, user)  # no task can be created in it meanwhile
    canon = await asyncio.to_thread(canon_dir, root, rel)
    live = None
    if canon is not None:
        live = (await session.scalars(
            select(Task.working_dir).where(_task_folder_filter(user, canon), Task.deleted_at.is_(None)).limit(1)
        )).first()

    def check_dir(now_canon: str) -> None:
        if live is not None or now_canon != canon:
            if live is not None:
                raise FolderInUse(f"folder is used by a task (working_dir {live!r}); delete or move that task first")
            raise PathChanged("folder changed during the request; retry")

    changes: list[filehistory.Change] = []
    freed = await asyncio.to_thread(delete_at, root, rel, check_dir, filehistory.VersionStore.from_settings(settings, user),
                                    changes)
    await filehistory.record(session, user, changes)
    await session.commit()
    await asyncio.to_thread(quota.Ledger.from_settings(settings).reserve, user, -freed, root)
    return {"ok": True, "path": rel}


# ---- rename ----------------------------------------------------------------------------------


async def _rewrite_working_dirs(session: AsyncSession, user: str, rel: str, new_rel: str) -> int:
    """Lock and rewrite the tasks (and scheduled jobs) in `rel`; 409 on active runs or nesting."""
    tasks = (await session.scalars(
        select(Task).where(_task_folder_filter(user, rel)).order_by(Task.task_id).with_for_update()
    )).all()
    busy = [t for t in tasks if t.run_status in ACTIVE]
    if busy:
        raise FolderBusy(f"task {busy[0].name!r} in this folder has an active run ({busy[0].run_status}); "
                       "wait for it or cancel it first")
    moved = {t.task_id: new_rel + t.working_dir[len(rel):] for t in tasks}
    if any(len(wd) > MAX_WORKING_DIR for wd in moved.values()):
        raise bad_request(f"the new folder paths would be longer than {MAX_WORKING_DIR} characters")
    others_stmt = select(Task.working_dir).distinct().where(Task.user_id == user, Task.deleted_at.is_(None))
    if moved:
        others_stmt = others_stmt.where(Task.task_id.not_in(list(moved)))
    others = (await session.scalars(others_stmt)).all()
    for task in tasks:
        if task.deleted_at is not None:
            continue
        for other in others:
            if paths.is_prefix_nested(moved[task.task_id], other):
                raise WouldNest(f"renaming would nest task folder {moved[task.task_id]!r} with {other!r}; "
                               "tasks cannot be nested")
    for task in tasks:
        task.working_dir = moved[task.task_id]
    jobs = (await session.scalars(
        select(ScheduledJob).where(
            ScheduledJob.user_id == user,
            or_(ScheduledJob.working_dir == rel, ScheduledJob.working_dir.startswith(rel + "/", autoescape=True)),
        ).with_for_update()
    )).all()
    for job in jobs:
        job.working_dir = new_rel + job.working_dir[len(rel):]
    await session.flush()
    return len(tasks)


@router.post("/rename")
async def rename_path(body: RenameIn, user: CurrentUser, session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    """Rename a file or folder in place. Task folders: DB updated first, 409 while a run is active."""
    rel = clean_rel(body.path)
    if not rel:
        raise RootRefused("your root folder cannot be renamed")
    new_name = paths.validate_task_name(body.new_name, "new_name")
    parent, old_name = posixpath.split(rel)
    new_rel = posixpath.join(parent, new_name)
    root = user_root(settings, user)
    if new_name == old_name:
        raise SameName("new_name is the current name")
    canon = await asyncio.to_thread(stat_source, root, rel, new_name)
    tasks_moved = 0
    if canon is not None:  # a folder: task working dirs in it move with it
        await lock_user_folders(session, user)
        tasks_moved = await _rewrite_working_dirs(session, user, canon, posixpath.join(posixpath.dirname(canon), new_name))
    try:
        entry = await asyncio.to_thread(rename_at, root, rel, new_name)
    except BaseException as exc:
        await session.rollback()
        if isinstance(exc, paths.PathRejected):  # safe_fs refusals (the tree changed meanwhile, I/O, ...)
            log.info("rename refused on disk; database rolled back", extra={"user_id": user, "path": rel, "error": str(exc)})
            raise HTTPException(exc.http_status, detail=f"{exc}; nothing was changed") from None
        raise
    try:
        await filehistory.record(session, user, [filehistory.Change(entry["path"], "rename", entry["size"], old_path=rel)])
        await session.commit()
    except BaseException:
        await asyncio.to_thread(rename_back, root, new_rel, old_name)
        raise
    return {**entry, "old_path": rel, "tasks_moved": tasks_moved}
