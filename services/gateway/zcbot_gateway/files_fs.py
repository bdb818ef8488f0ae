"""File operations under a user root for the files API (`routes/files.py`), through directory file
descriptors re-checked after opening (`/proc/self/fd`), never a second path lookup: the agent's
sandbox can change the tree at any moment, and check-then-use races must not leave the root.
Refusals are the HTTP errors the routes answer with (400/404/409).
"""

from __future__ import annotations

import errno
import logging
import os
import posixpath
import secrets
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fastapi import HTTPException, status
from starlette.datastructures import UploadFile

from zcbot_core import paths

from zcbot_gateway.routes.tasks import bad_request, conflict

log = logging.getLogger(__name__)

MAX_LIST_ENTRIES = 5000
CHUNK = 1024 * 1024
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
PROC_FD = Path("/proc/self/fd")


def not_found(detail: str = "no such file or folder") -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, detail=detail)


def _check_fd(root: Path, fd: int) -> None:
    """The object `fd` really refers to must be inside the root (re-checked after opening)."""
    try:
        actual = os.readlink(PROC_FD / str(fd))
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


def list_dir(root: Path, rel: str) -> tuple[bool, list[dict[str, Any]], bool]:
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


def open_download(root: Path, rel: str) -> tuple[Any, str]:
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


def ensure_dir(root: Path, rel: str) -> int:
    """mkdir -p `rel` under the root and return its verified fd (409 if a file is in the way)."""
    try:
        paths.make_user_dir(root, rel)
    except paths.FileInTheWay as exc:
        raise conflict(str(exc)) from None
    try:
        return open_dir(root, rel)
    except (FileNotFoundError, NotADirectoryError):
        raise conflict(f"a file (not a folder) is in the way of {rel!r}") from None


def write_uploads(root: Path, rel_dir: str, files: list[tuple[str, UploadFile]], limit: int) -> list[dict[str, Any]]:
    dfd = ensure_dir(root, rel_dir)
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


def mkdir_at(root: Path, rel: str) -> dict[str, Any]:
    parent, name = posixpath.split(rel)
    dfd = ensure_dir(root, parent)
    try:
        paths.resolve_user_path(root, rel)
        try:
            os.mkdir(name, 0o755, dir_fd=dfd)
        except FileExistsError:
            raise conflict(f"{rel!r} already exists") from None
        return _entry(rel, os.stat(name, dir_fd=dfd, follow_symlinks=False))
    finally:
        os.close(dfd)


def canon_dir(root: Path, rel: str) -> str | None:
    """The canonical path of `rel` when it is a folder (not a symlink), else None; 404 when missing."""
    target = open_target(root, rel)
    try:
        if target.st is None:
            raise not_found()
        return target.canon if stat.S_ISDIR(target.st.st_mode) else None
    finally:
        target.close()


def delete_at(root: Path, rel: str, check_dir: Any) -> None:
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


def _rename_source(root: Path, rel: str, new_name: str) -> Target:
    """`rel`, opened, when it exists and `new_name` is free beside it (404 / 409 otherwise). The caller
    closes it."""
    target = open_target(root, rel)
    try:
        if target.st is None:
            raise not_found()
        if _lexists_at(target.dfd, new_name):
            raise conflict(f"{new_name!r} already exists in this folder")
    except BaseException:
        target.close()
        raise
    return target


def stat_source(root: Path, rel: str, new_name: str) -> str | None:
    """The canonical path when `rel` is a folder (else None); 404 missing, 409 when the new name exists."""
    target = _rename_source(root, rel, new_name)
    try:
        assert target.st is not None
        return target.canon if stat.S_ISDIR(target.st.st_mode) else None
    finally:
        target.close()


def _lexists_at(dfd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def rename_at(root: Path, rel: str, new_name: str) -> dict[str, Any]:
    target = _rename_source(root, rel, new_name)
    try:
        os.rename(target.name, new_name, src_dir_fd=target.dfd, dst_dir_fd=target.dfd)
        new_rel = posixpath.join(posixpath.dirname(rel), new_name)
        return _entry(new_rel, os.stat(new_name, dir_fd=target.dfd, follow_symlinks=False))
    finally:
        target.close()


def rename_back(root: Path, new_rel: str, old_name: str) -> None:
    try:
        rename_at(root, new_rel, old_name)
    except Exception:
        log.exception("could not undo a folder rename after the database commit failed",
                      extra={"path": new_rel, "old_name": old_name})
