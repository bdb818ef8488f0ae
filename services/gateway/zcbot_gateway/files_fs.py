"""File operations under a user root for the files API (`routes/files.py`), all through
`zcbot_core.safe_fs`: resolved beneath the user root's directory fd, never following a symlink,
so the agent's sandbox changing the tree meanwhile (a folder swapped for a symlink) only makes the
request fail with a 4xx. The API neither shows nor touches symlinks: they are hidden in listings
and any operation naming one (or passing through one) is 400. Refusals are the HTTP errors the
routes answer with (400/404/409/413; `SafeFsError.status`).
"""

from __future__ import annotations

import errno
import logging
import posixpath
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

from fastapi import HTTPException, status
from starlette.datastructures import UploadFile

from zcbot_core import filehistory, safe_fs
from zcbot_gateway.file_refusals import FolderNotEmpty, NameTaken, PathChanged
from zcbot_gateway.http import bad_request

log = logging.getLogger(__name__)

MAX_LIST_ENTRIES = 5000
CHUNK = 1024 * 1024


def not_found(detail: str = "no such file or folder") -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, detail=detail)


def _root(root: Path) -> safe_fs.Root:
    return safe_fs.Root.open(root, create=True)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()


def _entry(rel: str, st: Any) -> dict[str, Any]:
    is_dir = stat.S_ISDIR(st.st_mode)
    return {"name": posixpath.basename(rel), "path": rel, "type": "dir" if is_dir else "file",
            "size": None if is_dir else st.st_size, "mtime": _iso(st.st_mtime)}


def _lstat_plain(r: safe_fs.Root, rel: str) -> Any:
    """lstat of `rel` (None when missing); a symlink there is refused like one on the way."""
    st = r.lstat(rel)
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise safe_fs.SymlinkRefused(f"{rel}: is a symlink; it is not followed", rel)
    return st


def list_dir(root: Path, rel: str) -> tuple[bool, list[dict[str, Any]], bool]:
    entries: list[dict[str, Any]] = []
    truncated = False
    with _root(root) as r:
        st = _lstat_plain(r, rel)
        if st is None:  # a user without files yet has an empty (not a missing) root
            return not rel, [], False
        if not stat.S_ISDIR(st.st_mode):
            raise bad_request("path is a file; use /v1/files/download")
        for name, est in r.listdir(rel):
            if name.startswith(".") or not (stat.S_ISDIR(est.st_mode) or stat.S_ISREG(est.st_mode)):
                continue  # dotfiles, symlinks, FIFOs, sockets, devices are not shown
            if len(entries) >= MAX_LIST_ENTRIES:
                truncated = True
                break
            entries.append(_entry(posixpath.join(rel, name) if rel else name, est))
    entries.sort(key=lambda e: (e["type"] != "dir", e["name"].casefold(), e["name"]))
    return True, entries, truncated


def open_download(root: Path, rel: str) -> BinaryIO:
    """The regular file `rel`, opened (the response streams from this very fd)."""
    with _root(root) as r:
        try:
            return r.open_read(rel)
        except safe_fs.NotFound:
            raise not_found("no such file") from None
        except safe_fs.Conflict as exc:
            if r.is_dir(rel):
                raise bad_request("path is a folder; only files can be downloaded") from None
            raise (not_found("no such file") if exc.errno == errno.ENOTDIR else exc) from None
        except safe_fs.NotRegular:
            raise bad_request("only regular files can be downloaded") from None


def write_uploads(root: Path, rel_dir: str, files: list[tuple[str, UploadFile]], limit: int,
                  store: filehistory.VersionStore, changes: list[filehistory.Change]) -> list[dict[str, Any]]:
    """Each file into a temp file in the folder (created), then all renamed into place (a file
    replaced is kept in the version store first; each write is appended to `changes`)."""
    total = 0
    with _root(root) as r:
        r.makedirs(rel_dir)
        temps: list[tuple[safe_fs.TempFile, str]] = []
        try:
            for name, upload in files:
                st = r.lstat(posixpath.join(rel_dir, name) if rel_dir else name)
                if st is not None and stat.S_ISDIR(st.st_mode):  # checked before anything is renamed
                    raise NameTaken(f"a folder named {name!r} already exists here")
                tmp = r.temp_file(rel_dir)
                temps.append((tmp, name))
                upload.file.seek(0)
                while chunk := upload.file.read(CHUNK):
                    total += len(chunk)
                    if total > limit:
                        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                                            detail=f"upload exceeds the limit of {limit} bytes")
                    tmp.write(chunk)
                tmp.write(b"", durable=True)
            results = []
            for tmp, name in temps:
                child = posixpath.join(rel_dir, name) if rel_dir else name
                prev = filehistory.keep_before(store, r, child)
                tmp.commit(name)
                changes.append(filehistory.written(r, child, prev, prev is not None))
                st = r.lstat(child)
                if st is not None:
                    results.append(_entry(child, st))
            return results
        finally:
            for tmp, _ in temps:
                tmp.discard()


def mkdir_at(root: Path, rel: str) -> dict[str, Any]:
    parent = posixpath.dirname(rel)
    with _root(root) as r:
        r.makedirs(parent)
        try:
            r.mkdir(rel)
        except safe_fs.Conflict:
            raise NameTaken(f"{rel!r} already exists") from None
        st = r.lstat(rel)
        if st is None:
            raise PathChanged("folder changed during the request; retry")
        return _entry(rel, st)


def canon_dir(root: Path, rel: str) -> str | None:
    """`rel` when it is a folder, None for a file; 404 when missing (no symlink is ever followed,
    so the path as given is the folder's only name)."""
    with _root(root) as r:
        st = _lstat_plain(r, rel)
    if st is None:
        raise not_found()
    return rel if stat.S_ISDIR(st.st_mode) else None


def delete_at(root: Path, rel: str, check_dir: Any, store: filehistory.VersionStore,
              changes: list[filehistory.Change]) -> int:
    """Delete a file or an empty folder (a file is kept in the version store first); the bytes
    freed (for the disk quota's ledger)."""
    with _root(root) as r:
        st = _lstat_plain(r, rel)
        if st is None:
            raise not_found()
        if stat.S_ISDIR(st.st_mode):
            check_dir(rel)
            try:
                r.rmdir(rel)
            except safe_fs.SafeFsError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise FolderNotEmpty("folder is not empty; delete its contents first") from None
                raise
            changes.append(filehistory.Change(rel, "rmdir"))
        else:
            prev = filehistory.keep_before(store, r, rel)
            try:
                r.unlink(rel)
            except safe_fs.Conflict:  # became a folder meanwhile
                raise PathChanged("path changed during the request; retry") from None
            changes.append(filehistory.Change(rel, "delete", None, None, prev))
        return st.st_size if stat.S_ISREG(st.st_mode) else 0


def stat_source(root: Path, rel: str, new_name: str) -> str | None:
    """`rel` when it is a folder (else None); 404 missing, 409 when the new name exists beside it."""
    with _root(root) as r:
        st = _lstat_plain(r, rel)
        if st is None:
            raise not_found()
        if r.lstat(posixpath.join(posixpath.dirname(rel), new_name)) is not None:
            raise NameTaken(f"{new_name!r} already exists in this folder")
    return rel if stat.S_ISDIR(st.st_mode) else None


def rename_at(root: Path, rel: str, new_name: str) -> dict[str, Any]:
    new_rel = posixpath.join(posixpath.dirname(rel), new_name)
    with _root(root) as r:
        _lstat_plain(r, rel)
        try:
            r.rename(rel, new_rel)  # RENAME_NOREPLACE: a sibling made meanwhile is never replaced
        except safe_fs.Conflict:
            raise NameTaken(f"{new_name!r} already exists in this folder") from None
        except safe_fs.NotFound:
            raise not_found() from None
        st = r.lstat(new_rel)
        if st is None:
            raise PathChanged("path changed during the request; retry")
        return _entry(new_rel, st)


def rename_back(root: Path, new_rel: str, old_name: str) -> None:
    try:
        rename_at(root, new_rel, old_name)
    except Exception:
        log.exception("could not undo a folder rename after the database commit failed",
                      extra={"path": new_rel, "old_name": old_name})
