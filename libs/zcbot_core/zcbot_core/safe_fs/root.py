"""`Root`: an open directory fd of a user-writable tree and every operation the host does in it.

Each method resolves its path beneath the root fd with `resolve.open_beneath` (never following a
symlink, never leaving the root) and then acts on the final name relative to the parent's fd
(`*at` calls, which do not follow a final symlink either) or on the opened fd itself (fstat,
fchown, fchmod). Nothing is ever checked by path and then used by path. Errors are `SafeFsError`.

Ownership (issue 34): whatever a root process creates beneath a `Root` belongs to the `Root`'s
owner unless the caller names another: the owner given to `Root.open`, else the opened folder's own
owner. A user root belongs to the sandbox identity (the executor gives it that owner before any
sandbox runs), so every task folder, upload, restored file or skill the gateway, runner, scheduler
or channels make there as root is writable by the user's sandbox, whichever process made it, with
no setting shared between them. A process that is not root creates as itself (it cannot give files
away). `makedirs` also gives existing levels of its path to that owner (folders left owned by root
by earlier versions are repaired the next time a path through them is made).
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import BinaryIO

from zcbot_core.safe_fs import resolve, tree
from zcbot_core.safe_fs.errors import Conflict, NotFound, NotRegular, SafeFsError, TooLarge, from_oserror
from zcbot_core.safe_fs.paths import PathRejected, normalize_rel
from zcbot_core.safe_fs.temp import TempFile

Owner = tuple[int, int] | None
_READ = os.O_RDONLY | os.O_NONBLOCK  # a FIFO must never block the host: it is refused after fstat
_TEMP = os.O_WRONLY | os.O_CREAT | os.O_EXCL


def norm(rel: str | PurePath) -> str:
    try:
        return normalize_rel(str(rel) if isinstance(rel, PurePath) else rel)
    except PathRejected as exc:
        raise SafeFsError(str(exc), str(rel)) from None


def inherited_owner(fd: int) -> Owner:
    """Who new entries beneath the folder `fd` belong to when no owner is named: the folder's owner
    when this process is root and the folder is not root's own (None: create as this process)."""
    if os.geteuid() != 0:
        return None
    st = os.fstat(fd)
    return None if (st.st_uid, st.st_gid) == (0, 0) else (st.st_uid, st.st_gid)


class Root:
    """Operations beneath one directory fd. Use as a context manager (or `close()`).

    `owner`: who what this `Root` creates belongs to when a call names nobody (module docstring)."""

    def __init__(self, fd: int, path: Path, owner: Owner = None) -> None:
        self.fd = fd
        self.path = path  # for messages and logs only: never used to reach a file
        self.owner = owner

    @classmethod
    def open(cls, path: str | Path, *, create: bool = False, owner: Owner = None) -> "Root":
        """The trusted host path of a root (storage_root/<user>): created (and owned) when asked.
        `owner` is also who everything created beneath it belongs to; without one, the folder's
        own owner (`inherited_owner`)."""
        path = Path(path)
        if create:
            try:
                os.makedirs(path.parent, exist_ok=True)
                os.mkdir(path, 0o755)
                created = True
            except FileExistsError:
                created = False
            except OSError as exc:
                raise from_oserror(exc, "", "create") from None
        try:  # the host part of the path is trusted; the root folder itself must not be a symlink
            parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                fd = resolve.open_dir_at(parent, path.name)
            finally:
                os.close(parent)
        except OSError as exc:
            raise from_oserror(exc, "", "open") from None
        try:
            if create and created and owner is not None:
                os.fchown(fd, *owner)
            return cls(fd, path, owner if owner is not None else inherited_owner(fd))
        except BaseException:
            os.close(fd)
            raise

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "Root":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ---- resolution ------------------------------------------------------------------------

    def _open(self, rel: str, flags: int, mode: int = 0, action: str = "open") -> int:
        try:
            return resolve.open_beneath(self.fd, rel, flags, mode)
        except OSError as exc:
            raise from_oserror(exc, rel, action) from None

    def open_dir(self, rel: str | PurePath = "") -> int:
        """A directory fd for `rel` (the caller closes it)."""
        return self._open(norm(rel), resolve.DIR_FLAGS)

    def sub(self, rel: str | PurePath, *, create: bool = False, owner: Owner = None) -> "Root":
        """A `Root` for the folder `rel` beneath this one (created level by level when asked)."""
        rel = norm(rel)
        fd = self._makedirs(rel, owner) if create else self._open(rel, resolve.DIR_FLAGS)
        return Root(fd, self.path / rel if rel else self.path, owner if owner is not None else self.owner)

    @contextmanager
    def parent(self, rel: str | PurePath) -> Iterator[tuple[int, str]]:
        """(fd of the parent folder, final name) for single-name `*at` calls."""
        rel = norm(rel)
        if not rel:
            raise SafeFsError("this needs a path inside your root, not the root itself")
        head, _, name = rel.rpartition("/")
        dfd = self._open(head, resolve.DIR_FLAGS)
        try:
            yield dfd, name
        finally:
            os.close(dfd)

    # ---- inspection ------------------------------------------------------------------------

    def lstat(self, rel: str | PurePath) -> os.stat_result | None:
        """stat of `rel` itself (a symlink is reported as one), None when it does not exist."""
        rel = norm(rel)
        if not rel:
            return os.fstat(self.fd)
        head, _, name = rel.rpartition("/")
        try:
            dfd = resolve.open_beneath(self.fd, head, resolve.DIR_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise from_oserror(exc, rel, "stat") from None
        try:
            return os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise from_oserror(exc, rel, "stat") from None
        finally:
            os.close(dfd)

    def is_dir(self, rel: str | PurePath) -> bool:
        st = self.lstat(rel)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def is_file(self, rel: str | PurePath) -> bool:
        st = self.lstat(rel)
        return st is not None and stat.S_ISREG(st.st_mode)

    def exists(self, rel: str | PurePath) -> bool:
        return self.lstat(rel) is not None

    def listdir(self, rel: str | PurePath = "", limit: int | None = None) -> list[tuple[str, os.stat_result]]:
        """(name, lstat) of each entry of the folder `rel` (symlinks reported, never followed)."""
        rel = norm(rel)
        dfd = self._open(rel, resolve.DIR_FLAGS)
        try:
            return tree.scan(dfd, limit)
        except OSError as exc:
            raise from_oserror(exc, rel, "list") from None
        finally:
            os.close(dfd)

    def walk_files(self, rel: str | PurePath = "", *, skip_hidden: bool = True, skip: Callable[[str], bool] | None = None,
                   max_depth: int = 32, dirs: bool = False) -> list[tuple[str, os.stat_result]]:
        """(path relative to this root, lstat) of every regular file under the folder `rel`
        (depth-first by name; symlinks never entered; hidden names skipped unless asked; `dirs`:
        the folders under `rel` too, each before its contents)."""
        rel = norm(rel)

        def skipped(name: str) -> bool:
            return (skip_hidden and name.startswith(".")) or (skip is not None and skip(name))

        dfd = self._open(rel, resolve.DIR_FLAGS, action="list")
        try:
            return list(tree.walk_files(dfd, rel, skipped, max_depth, dirs=dirs))
        except OSError as exc:
            raise from_oserror(exc, rel, "list") from None
        finally:
            os.close(dfd)

    # ---- reading ---------------------------------------------------------------------------

    def open_read(self, rel: str | PurePath) -> BinaryIO:
        """A binary file object for the regular file `rel` (anything else is refused)."""
        rel = norm(rel)
        if not rel:
            raise NotRegular("your root folder is not a file")
        fd = self._open(rel, _READ, action="read")
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise Conflict(f"{rel} is a folder", rel)
            if not stat.S_ISREG(st.st_mode):
                raise NotRegular(f"{rel} is not a regular file (FIFO, socket or device)", rel)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return os.fdopen(fd, "rb")

    def read_bytes(self, rel: str | PurePath, limit: int | None = None, *, strict: bool = False) -> bytes:
        """The file's bytes, at most `limit` (with `strict`, a longer file is TooLarge)."""
        with self.open_read(rel) as fh:
            try:
                data = fh.read() if limit is None else fh.read(limit + (1 if strict else 0))
            except OSError as exc:
                raise from_oserror(exc, norm(rel), "read") from None
        if strict and limit is not None and len(data) > limit:
            raise TooLarge(f"{norm(rel)} is larger than {limit} bytes", norm(rel))
        return data

    def read_text(self, rel: str | PurePath, limit: int | None = None, *, strict: bool = False) -> str:
        return self.read_bytes(rel, limit, strict=strict).decode("utf-8", errors="replace")

    def tail(self, rel: str | PurePath, nbytes: int) -> bytes:
        with self.open_read(rel) as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - nbytes))
            return fh.read(nbytes)

    # ---- writing ---------------------------------------------------------------------------

    def temp_file(self, dir_rel: str | PurePath = "", *, owner: Owner = None, mode: int = 0o644,
                  mkdirs: bool = False) -> "TempFile":
        """A fresh O_EXCL temp file in the folder `dir_rel`; `commit(name)` renames it into place."""
        dir_rel = norm(dir_rel)
        owner = owner if owner is not None else self.owner
        dfd = self._makedirs(dir_rel, owner) if mkdirs else self._open(dir_rel, resolve.DIR_FLAGS)
        try:
            tmp = f".zcbot-{secrets.token_hex(8)}.tmp"
            fd = os.open(tmp, _TEMP | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
            try:
                os.fchmod(fd, mode)
                if owner is not None:
                    os.fchown(fd, *owner)
            except BaseException:
                os.close(fd)
                os.unlink(tmp, dir_fd=dfd)
                raise
        except OSError as exc:
            os.close(dfd)
            raise from_oserror(exc, dir_rel, "write in") from None
        except BaseException:
            os.close(dfd)
            raise
        return TempFile(dfd, tmp, os.fdopen(fd, "wb"), dir_rel)

    def write_bytes(self, rel: str | PurePath, data: bytes | str, *, owner: Owner = None, mode: int = 0o644,
                    mkdirs: bool = False, durable: bool = False) -> None:
        """Atomic replace of the file `rel` (a folder there is a Conflict; a symlink is replaced,
        never written through)."""
        rel = norm(rel)
        if not rel:
            raise SafeFsError("a file name is needed")
        head, _, name = rel.rpartition("/")
        raw = data.encode("utf-8") if isinstance(data, str) else data
        with self.temp_file(head, owner=owner, mode=mode, mkdirs=mkdirs) as tmp:
            tmp.write(raw, durable=durable)
            tmp.commit(name)

    def makedirs(self, rel: str | PurePath, *, owner: Owner = None, mode: int = 0o755) -> None:
        """mkdir -p: each missing level made with mkdirat; every level (made or found) given to
        `owner` (default: the root's); never following."""
        os.close(self._makedirs(norm(rel), owner, mode))

    def _makedirs(self, rel: str, owner: Owner, mode: int = 0o755) -> int:
        owner = owner if owner is not None else self.owner
        cur = os.dup(self.fd)
        try:
            for part in [p for p in rel.split("/") if p]:
                try:
                    os.mkdir(part, mode, dir_fd=cur)
                except FileExistsError:
                    pass
                nxt = resolve.open_dir_at(cur, part)
                os.close(cur)
                cur = nxt
                if owner is not None:  # a level found owned by another (root, before issue 34) too
                    st = os.fstat(cur)
                    if (st.st_uid, st.st_gid) != owner:
                        os.fchown(cur, *owner)
            return cur
        except OSError as exc:
            os.close(cur)
            if isinstance(exc, NotADirectoryError):
                raise Conflict(f"a file (not a folder) is in the way of {rel!r}", rel, exc.errno) from None
            raise from_oserror(exc, rel, "create") from None

    def mkdir(self, rel: str | PurePath, *, owner: Owner = None, mode: int = 0o755) -> None:
        """Create the one folder `rel` (its parent must exist; an existing name is a Conflict)."""
        owner = owner if owner is not None else self.owner
        with self.parent(rel) as (dfd, name):
            try:
                os.mkdir(name, mode, dir_fd=dfd)
                if owner is not None:
                    fd = os.open(name, resolve.DIR_FLAGS, dir_fd=dfd)
                    try:
                        os.fchown(fd, *owner)
                    finally:
                        os.close(fd)
            except OSError as exc:
                raise from_oserror(exc, norm(rel), "create") from None

    # ---- removing, renaming, owning -------------------------------------------------------

    def _remove(self, rel: str | PurePath, missing_ok: bool, remove: Callable[[int, str], None]) -> None:
        try:
            with self.parent(rel) as (dfd, name):
                remove(dfd, name)
        except NotFound:
            if not missing_ok:
                raise
        except FileNotFoundError:
            if not missing_ok:
                raise NotFound(f"{norm(rel)}: no such file or folder", norm(rel)) from None
        except OSError as exc:
            raise from_oserror(exc, norm(rel), "delete") from None

    def unlink(self, rel: str | PurePath, *, missing_ok: bool = False) -> None:
        """Remove a file or symlink (a folder is refused: `rmdir` / `rmtree`)."""
        self._remove(rel, missing_ok, lambda dfd, name: os.unlink(name, dir_fd=dfd))

    def rmdir(self, rel: str | PurePath) -> None:
        """Remove an empty folder."""
        self._remove(rel, False, lambda dfd, name: os.rmdir(name, dir_fd=dfd))

    def rmtree(self, rel: str | PurePath, *, missing_ok: bool = True) -> None:
        """Remove `rel` and everything under it, fd by fd: a symlink is unlinked, never entered."""
        self._remove(rel, missing_ok, tree.remove_entry)

    def rename(self, src: str | PurePath, dst: str | PurePath, *, replace: bool = False) -> None:
        """Rename within the root (RENAME_NOREPLACE unless `replace`: an existing `dst` is a Conflict)."""
        with self.parent(src) as (sfd, sname), self.parent(dst) as (dfd, dname):
            try:
                resolve.renameat2(sfd, sname, dfd, dname, 0 if replace else resolve.RENAME_NOREPLACE)
            except OSError as exc:
                raise from_oserror(exc, norm(dst) if exc.errno == errno.EEXIST else norm(src), "rename") from None

    def chown(self, rel: str | PurePath, owner: Owner, *, recursive: bool = False) -> None:
        """Give `rel` (and, recursively, its tree) to `owner`; symlinks and hard-linked files are
        skipped (a hard link may share its inode with a host file)."""
        if owner is None:
            return
        rel = norm(rel)
        try:
            fd = resolve.open_beneath(self.fd, rel, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise from_oserror(exc, rel, "chown") from None
        try:
            tree.chown_fd(fd, owner, recursive)
        except OSError as exc:
            raise from_oserror(exc, rel, "chown") from None
        finally:
            os.close(fd)


__all__ = ["Root", "norm"]
