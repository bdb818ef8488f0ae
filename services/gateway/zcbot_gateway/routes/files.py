"""User-rooted files API (seed 003 §7.1, §7.2, §7.4): the only mutation path for folders.

Every path is relative to `storage_root/<user_id>` and goes through `zcbot_core.paths`
(`normalize_rel` with hidden names refused, `resolve_user_path`, `validate_task_name`,
`to_db_path`): traversal, absolute paths, NUL, backslashes, dotfiles and symlinks leading out of the
root are 400. Dotfiles (`.memory/`, upload temp files) never appear in listings.

Because the agent's sandbox can change the tree at any moment (e.g. swap a folder for a symlink),
files are opened and changed through a directory file descriptor that is re-checked after opening
(`/proc/self/fd`), never by a second path lookup: check-then-use races cannot leave the root.

- `GET /v1/files?path=`: `{entries, crumbs, exists, root, current, truncated}`; a missing path is
  `exists: false` (not 404), a file is 400. `entries[]`: `{name, path, type: file|dir, size, mtime}`
  (dirs first; `size` is null for dirs; `mtime` ISO 8601 UTC). `root` is the user root as the agent
  sees it (`/workspace`); `crumbs` start with `{name: "~", path: ""}`.
- `POST /v1/files/upload?path=<dir>`: multipart field `file` (repeatable); the folder is created;
  each file is written to a temp file and renamed into place (an existing file is replaced, all or
  nothing per request). The request's total size is capped by `ZCBOT_UPLOAD_MAX_BYTES` (413).
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
import errno
import logging
import os
import posixpath
import secrets
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.background import BackgroundTask
from starlette.datastructures import UploadFile

from zcbot_core import paths
from zcbot_core.config import Settings
from zcbot_core.db.models import ScheduledJob, Task
from zcbot_core.memory import SANDBOX_ROOT

from zcbot_gateway.deps import CurrentUser, SessionDep, SettingsDep
from zcbot_gateway.routes.tasks import (
    MAX_WORKING_DIR,
    bad_request,
    conflict,
    lock_user_folders,
    normalize_working_dir,
)
from zcbot_gateway.schemas import ACTIVE_RUN_STATUSES

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/files", tags=["files"])

MAX_PATH = 4096
MAX_LIST_ENTRIES = 5000
MAX_UPLOAD_FILES = 100
MULTIPART_SLACK = 64 * 1024  # headers/boundaries allowed on top of the file bytes
CHUNK = 1024 * 1024
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_PROC_FD = Path("/proc/self/fd")

PathQuery = Annotated[str, Query(max_length=MAX_PATH, description="relative to your root; empty = the root")]


class PathIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(max_length=MAX_PATH)


class RenameIn(PathIn):
    new_name: str = Field(max_length=1000, description="a simple name: no '/', '\\', NUL, leading '.'")


def not_found(detail: str = "no such file or folder") -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, detail=detail)


# ---- path + fd helpers (all checking is `zcbot_core.paths`) -----------------------------------


def user_root(settings: Settings, user_id: str) -> Path:
    return paths.user_root(settings.storage_root, user_id)


def clean_rel(raw: str, *, allow_empty: bool = True) -> str:
    return paths.normalize_rel(raw.strip(), allow_empty=allow_empty, allow_hidden=False)


def _check_fd(root: Path, fd: int) -> None:
    """The object `fd` really refers to must be inside the root (re-checked after opening)."""
    try:
        actual = os.readlink(_PROC_FD / str(fd))
    except OSError:  # no procfs: the path check done before opening stands alone
        return
    rel = os.path.relpath(actual, os.path.realpath(root))
    try:
        paths.resolve_user_path(root, "" if rel == "." else rel)
    except paths.PathRejected:
        raise paths.PathRejected("path escapes your root") from None


def open_dir(root: Path, rel: str) -> int:
    """A verified directory fd for `rel` (400 if it escapes; FileNotFoundError/NotADirectoryError)."""
    real = os.path.realpath(paths.resolve_user_path(root, rel))
    fd = os.open(real, _DIR_FLAGS)
    try:
        _check_fd(root, fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()


def _entry(rel: str, st: os.stat_result) -> dict[str, Any]:
    is_dir = stat.S_ISDIR(st.st_mode)
    return {"name": posixpath.basename(rel), "path": rel, "type": "dir" if is_dir else "file",
            "size": None if is_dir else st.st_size, "mtime": _iso(st.st_mtime)}


@dataclass
class Target:
    """`rel` split into a verified parent dir fd and a final name (the final name is not followed)."""

    rel: str
    dfd: int
    name: str
    st: os.stat_result | None  # lstat of the final name, None when missing
    canon: str  # `rel` with symlinks in its parent resolved (how task working dirs name it)

    def close(self) -> None:
        os.close(self.dfd)


def open_target(root: Path, rel: str) -> Target:
    paths.resolve_user_path(root, rel)  # the whole path, symlinks followed, must stay inside
    parent, name = posixpath.split(rel)
    parent_real = os.path.relpath(os.path.realpath(paths.resolve_user_path(root, parent)), os.path.realpath(root))
    canon = name if parent_real == "." else posixpath.join(parent_real, name)
    try:
        dfd = open_dir(root, parent)
    except (FileNotFoundError, NotADirectoryError):
        raise not_found() from None
    try:
        st: os.stat_result | None = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    except BaseException:
        os.close(dfd)
        raise
    return Target(rel, dfd, name, st, canon)


# ---- list ------------------------------------------------------------------------------------


def _crumbs(rel: str) -> list[dict[str, str]]:
    crumbs = [{"name": "~", "path": ""}]
    parts = rel.split("/") if rel else []
    for i, part in enumerate(parts):
        crumbs.append({"name": part, "path": "/".join(parts[: i + 1])})
    return crumbs


def _list_dir(root: Path, rel: str) -> tuple[bool, list[dict[str, Any]], bool]:
    real = paths.resolve_user_path(root, rel)
    if not os.path.exists(real):  # a user without files yet has an empty (not a missing) root
        return not rel, [], False
    if not os.path.isdir(real):
        raise bad_request("path is a file; use /v1/files/download")
    dfd = open_dir(root, rel)
    entries: list[dict[str, Any]] = []
    truncated = False
    try:
        with os.scandir(dfd) as it:
            for item in it:
                if item.name.startswith("."):
                    continue
                child = posixpath.join(rel, item.name) if rel else item.name
                try:
                    if item.is_symlink():
                        paths.resolve_user_path(root, child)  # links out of the root are not shown
                    st = os.stat(item.name, dir_fd=dfd)
                except (paths.PathRejected, OSError):
                    continue
                if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                    continue
                if len(entries) >= MAX_LIST_ENTRIES:
                    truncated = True
                    break
                entries.append(_entry(child, st))
    finally:
        os.close(dfd)
    entries.sort(key=lambda e: (e["type"] != "dir", e["name"].casefold(), e["name"]))
    return True, entries, truncated


@router.get("")
async def list_files(user: CurrentUser, settings: SettingsDep, path: PathQuery = "") -> dict[str, Any]:
    """List a folder of your root (dotfiles hidden). A missing folder is `exists: false`."""
    rel = clean_rel(path)
    exists, entries, truncated = await asyncio.to_thread(_list_dir, user_root(settings, user), rel)
    return {"entries": entries, "crumbs": _crumbs(rel), "exists": exists, "root": SANDBOX_ROOT,
            "current": rel, "truncated": truncated}


# ---- download --------------------------------------------------------------------------------


def _open_download(root: Path, rel: str) -> tuple[Any, str]:
    real = os.path.realpath(paths.resolve_user_path(root, rel))
    if not os.path.exists(real):
        raise not_found("no such file")
    real_rel = os.path.relpath(real, os.path.realpath(root))
    target = open_target(root, real_rel)  # the resolved path: no symlink left to follow
    try:
        if target.st is None:
            raise not_found("no such file")
        if stat.S_ISDIR(target.st.st_mode):
            raise bad_request("path is a folder; only files can be downloaded")
        try:
            fd = os.open(target.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=target.dfd)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                raise not_found("no such file") from None
            raise bad_request("path changed while it was being opened; retry") from None
    finally:
        target.close()
    fh = os.fdopen(fd, "rb")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise bad_request("only regular files can be downloaded")
        _check_fd(root, fd)
    except BaseException:
        fh.close()
        raise
    return fh, real


@router.get("/download")
async def download_file(user: CurrentUser, settings: SettingsDep, path: PathQuery = "") -> FileResponse:
    """Download one file as an attachment."""
    rel = clean_rel(path, allow_empty=False)
    fh, real = await asyncio.to_thread(_open_download, user_root(settings, user), rel)
    served = str(_PROC_FD / str(fh.fileno())) if _PROC_FD.is_dir() else real
    # The response re-opens the very file we checked (through its fd), then closes our handle.
    return FileResponse(served, filename=posixpath.basename(rel), content_disposition_type="attachment",
                        background=BackgroundTask(fh.close))


# ---- upload ----------------------------------------------------------------------------------


def _ensure_dir(root: Path, rel: str) -> int:
    """mkdir -p `rel` under the root and return its verified fd (409 if a file is in the way)."""
    try:
        paths.make_user_dir(root, rel)
    except paths.FileInTheWay as exc:
        raise conflict(str(exc)) from None
    try:
        return open_dir(root, rel)
    except (FileNotFoundError, NotADirectoryError):
        raise conflict(f"a file (not a folder) is in the way of {rel!r}") from None


def _write_uploads(root: Path, rel_dir: str, files: list[tuple[str, UploadFile]], limit: int) -> list[dict[str, Any]]:
    dfd = _ensure_dir(root, rel_dir)
    written: list[tuple[str, str]] = []  # (tmp name, final name)
    total = 0
    try:
        for name, upload in files:
            child = posixpath.join(rel_dir, name) if rel_dir else name
            paths.resolve_user_path(root, child)
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    raise conflict(f"a folder named {name!r} already exists here")
            except FileNotFoundError:
                pass
            tmp = f".upload-{secrets.token_hex(8)}.part"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
            written.append((tmp, name))
            with os.fdopen(fd, "wb") as out:
                upload.file.seek(0)
                while chunk := upload.file.read(CHUNK):
                    total += len(chunk)
                    if total > limit:
                        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                                            detail=f"upload exceeds the limit of {limit} bytes")
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
        results = []
        for tmp, name in written:
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            child = posixpath.join(rel_dir, name) if rel_dir else name
            results.append(_entry(child, os.stat(name, dir_fd=dfd, follow_symlinks=False)))
        written = []
        return results
    finally:
        for tmp, _ in written:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
        os.close(dfd)


_UPLOAD_BODY = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file"],
    "properties": {"file": {"type": "array", "items": {"type": "string", "format": "binary"}}},
}}}}}


@router.post("/upload", status_code=status.HTTP_201_CREATED, openapi_extra=_UPLOAD_BODY)
async def upload_files(request: Request, user: CurrentUser, settings: SettingsDep, path: PathQuery = "") -> dict[str, Any]:
    """Upload files (multipart field `file`, repeatable) into a folder, creating it if needed."""
    limit = settings.zcbot_upload_max_bytes
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit + MULTIPART_SLACK:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, detail=f"upload exceeds the limit of {limit} bytes")
    rel_dir = clean_rel(path)
    if rel_dir:
        rel_dir = normalize_working_dir(rel_dir)  # every folder name it may create must be a valid name
    try:
        form = await request.form(max_files=MAX_UPLOAD_FILES, max_fields=20)
    except HTTPException:
        raise
    except Exception:
        raise bad_request("expected a multipart/form-data body with one or more 'file' parts") from None
    try:
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
        results = await asyncio.to_thread(_write_uploads, user_root(settings, user), rel_dir, files, limit)
    finally:
        await form.close()
    return {"path": rel_dir, "uploaded": results}


# ---- mkdir -----------------------------------------------------------------------------------


def _mkdir(root: Path, rel: str) -> dict[str, Any]:
    parent, name = posixpath.split(rel)
    dfd = _ensure_dir(root, parent)
    try:
        paths.resolve_user_path(root, rel)
        try:
            os.mkdir(name, 0o755, dir_fd=dfd)
        except FileExistsError:
            raise conflict(f"{rel!r} already exists") from None
        return _entry(rel, os.stat(name, dir_fd=dfd, follow_symlinks=False))
    finally:
        os.close(dfd)


@router.post("/mkdir", status_code=status.HTTP_201_CREATED)
async def make_dir(body: PathIn, user: CurrentUser, settings: SettingsDep) -> dict[str, Any]:
    """Create a folder (and missing parents)."""
    rel = normalize_working_dir(clean_rel(body.path, allow_empty=False))
    return await asyncio.to_thread(_mkdir, user_root(settings, user), rel)


# ---- delete ----------------------------------------------------------------------------------


def _task_folder_filter(user_id: str, rel: str) -> Any:
    return (Task.user_id == user_id) & or_(Task.working_dir == rel, Task.working_dir.startswith(rel + "/", autoescape=True))


def _canon_dir(root: Path, rel: str) -> str | None:
    """The canonical path of `rel` when it is a folder (not a symlink), else None; 404 when missing."""
    target = open_target(root, rel)
    try:
        if target.st is None:
            raise not_found()
        return target.canon if stat.S_ISDIR(target.st.st_mode) else None
    finally:
        target.close()


def _delete(root: Path, rel: str, check_dir: Any) -> None:
    target = open_target(root, rel)
    try:
        if target.st is None:
            raise not_found()
        if stat.S_ISDIR(target.st.st_mode):
            check_dir(target.canon)
            try:
                os.rmdir(target.name, dir_fd=target.dfd)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise bad_request("folder is not empty; delete its contents first") from None
                raise
        else:
            os.unlink(target.name, dir_fd=target.dfd)
    finally:
        target.close()


@router.post("/delete")
async def delete_path(body: PathIn, user: CurrentUser, session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    """Delete a file or an empty folder (not your root; not a live task's folder: 409)."""
    rel = clean_rel(body.path)
    if not rel:
        raise bad_request("your root folder cannot be deleted")
    root = user_root(settings, user)
    await lock_user_folders(session, user)  # no task can be created in it meanwhile
    canon = await asyncio.to_thread(_canon_dir, root, rel)
    live = None
    if canon is not None:
        live = (await session.scalars(
            select(Task.working_dir).where(_task_folder_filter(user, canon), Task.deleted_at.is_(None)).limit(1)
        )).first()

    def check_dir(now_canon: str) -> None:
        if live is not None or now_canon != canon:
            raise conflict(f"folder is used by a task (working_dir {live!r}); delete or move that task first"
                           if live is not None else "folder changed during the request; retry")

    await asyncio.to_thread(_delete, root, rel, check_dir)
    await session.commit()
    return {"ok": True, "path": rel}


# ---- rename ----------------------------------------------------------------------------------


def _stat_source(root: Path, rel: str, new_name: str) -> str | None:
    """The canonical path when `rel` is a folder (else None); 404 missing, 409 when the new name exists."""
    target = open_target(root, rel)
    try:
        if target.st is None:
            raise not_found()
        if _lexists_at(target.dfd, new_name):
            raise conflict(f"{new_name!r} already exists in this folder")
        return target.canon if stat.S_ISDIR(target.st.st_mode) else None
    finally:
        target.close()


def _lexists_at(dfd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _rename(root: Path, rel: str, new_name: str) -> dict[str, Any]:
    target = open_target(root, rel)
    try:
        if target.st is None:
            raise not_found()
        if _lexists_at(target.dfd, new_name):
            raise conflict(f"{new_name!r} already exists in this folder")
        os.rename(target.name, new_name, src_dir_fd=target.dfd, dst_dir_fd=target.dfd)
        new_rel = posixpath.join(posixpath.dirname(rel), new_name)
        return _entry(new_rel, os.stat(new_name, dir_fd=target.dfd, follow_symlinks=False))
    finally:
        target.close()


def _rename_back(root: Path, new_rel: str, old_name: str) -> None:
    try:
        _rename(root, new_rel, old_name)
    except Exception:
        log.exception("could not undo a folder rename after the database commit failed",
                      extra={"path": new_rel, "old_name": old_name})


async def _rewrite_working_dirs(session: AsyncSession, user: str, rel: str, new_rel: str) -> int:
    """Lock and rewrite the tasks (and scheduled jobs) in `rel`; 409 on active runs or nesting."""
    tasks = (await session.scalars(
        select(Task).where(_task_folder_filter(user, rel)).order_by(Task.task_id).with_for_update()
    )).all()
    busy = [t for t in tasks if t.run_status in ACTIVE_RUN_STATUSES]
    if busy:
        raise conflict(f"task {busy[0].name!r} in this folder has an active run ({busy[0].run_status}); "
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
                raise conflict(f"renaming would nest task folder {moved[task.task_id]!r} with {other!r}; "
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
        raise bad_request("your root folder cannot be renamed")
    new_name = paths.validate_task_name(body.new_name, "new_name")
    parent, old_name = posixpath.split(rel)
    new_rel = posixpath.join(parent, new_name)
    root = user_root(settings, user)
    if new_name == old_name:
        raise bad_request("new_name is the current name")
    canon = await asyncio.to_thread(_stat_source, root, rel, new_name)
    tasks_moved = 0
    if canon is not None:  # a folder: task working dirs in it move with it
        await lock_user_folders(session, user)
        tasks_moved = await _rewrite_working_dirs(session, user, canon, posixpath.join(posixpath.dirname(canon), new_name))
    try:
        entry = await asyncio.to_thread(_rename, root, rel, new_name)
    except BaseException as exc:
        await session.rollback()
        if isinstance(exc, OSError):
            log.error("folder rename failed on disk; database rolled back",
                      extra={"user_id": user, "path": rel, "error": str(exc)})
            raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR,
                                detail=f"could not rename on disk ({exc.strerror or exc}); nothing was changed") from None
        raise
    try:
        await session.commit()
    except BaseException:
        await asyncio.to_thread(_rename_back, root, new_rel, old_name)
        raise
    return {**entry, "old_path": rel, "tasks_moved": tasks_moved}
