"""The per-user version store (issue 29): `<storage_root>/.versions/<user>/<h[:2]>/<hash>`.

Outside every user root (user ids never start with a dot, `paths.validate_user_id`), so the
sandbox, which binds only the user root, can neither see nor write it. Content-addressed by
SHA-256: the same bytes kept twice are one object (its mtime is refreshed, which is what the
retention's "oldest first" reads). Objects are copies, never hard links into the user tree: a
link would share the inode with a file the sandbox can still write in place, and the "version"
would change with it.

Every file operation here goes through `zcbot_core.safe_fs` (the user tree by fd, never by path).
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from zcbot_core import safe_fs

STORE_DIR = ".versions"
CHUNK = 1024 * 1024
DAY = 86400


@dataclass(frozen=True)
class Kept:
    digest: str
    size: int


def _valid_digest(digest: str) -> bool:
    return len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)


class VersionStore:
    """One user's kept versions. `max_age_days` / `budget_bytes` of 0 mean "no limit"."""

    def __init__(self, storage_root: Path, user_id: str, *, max_age_days: int = 30, budget_bytes: int = 0) -> None:
        self.path = Path(storage_root) / STORE_DIR / user_id
        self.max_age = max_age_days * DAY
        self.budget = budget_bytes

    @classmethod
    def from_settings(cls, settings, user_id: str) -> "VersionStore":  # type: ignore[no-untyped-def]
        return cls(settings.storage_root, user_id, max_age_days=settings.zcbot_versions_max_age_days,
                   budget_bytes=settings.zcbot_versions_budget_mb * 1024 * 1024)

    def _owner(self) -> tuple[int, int] | None:
        """The storage root's owner when we are root (the executor): the gateway, running as the
        service user, must read and add to what the executor kept."""
        if os.geteuid() != 0:
            return None
        st = os.stat(self.path.parent.parent)
        return st.st_uid, st.st_gid

    def _open(self) -> safe_fs.Root:
        owner = self._owner()
        if not self.path.parent.is_dir():
            os.makedirs(self.path.parent, mode=0o700, exist_ok=True)
            if owner is not None:
                os.chown(self.path.parent, *owner)
        return safe_fs.Root.open(self.path, create=True, owner=owner)

    # ---- keeping ---------------------------------------------------------------------------

    def keep(self, r: safe_fs.Root, rel: str) -> Kept | None:
        """Copy the regular file `rel` of the user tree `r` into the store (None: nothing to keep)."""
        try:
            src = r.open_read(rel)
        except (safe_fs.NotFound, safe_fs.Conflict, safe_fs.NotRegular, safe_fs.SymlinkRefused):
            return None
        with src, self._open() as store:
            digest = hashlib.sha256()
            size = 0
            owner = self._owner()
            with store.temp_file("", mode=0o600, owner=owner) as tmp:
                while chunk := src.read(CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    tmp.write(chunk)
                tmp.write(b"", durable=True)
                hexd = digest.hexdigest()
                shard = hexd[:2]
                if store.is_file(f"{shard}/{hexd}"):
                    self._touch(store, f"{shard}/{hexd}")  # deduplicated: the temp copy is discarded
                else:
                    store.makedirs(shard, mode=0o700, owner=owner)  # the name is known only now: rename into its shard
                    store.rename(tmp.name, f"{shard}/{hexd}", replace=True)
                    tmp.committed = True
        return Kept(hexd, size)

    @staticmethod
    def _touch(store: safe_fs.Root, rel: str) -> None:
        with store.parent(rel) as (dfd, name):
            os.utime(name, dir_fd=dfd, follow_symlinks=False)

    # ---- reading ---------------------------------------------------------------------------

    def has(self, digest: str) -> bool:
        return self.size_of(digest) is not None

    def size_of(self, digest: str) -> int | None:
        """The kept object's size in bytes (None: pruned or never kept)."""
        if not _valid_digest(digest) or not self.path.is_dir():
            return None
        with self._open() as store:
            st = store.lstat(f"{digest[:2]}/{digest}")
        return st.st_size if st is not None and stat.S_ISREG(st.st_mode) else None

    def open(self, digest: str) -> BinaryIO:
        """The kept bytes (NotFound when pruned or never kept)."""
        if not _valid_digest(digest):
            raise safe_fs.NotFound("no such version", digest)
        with self._open() as store:
            return store.open_read(f"{digest[:2]}/{digest}")

    def restore_into(self, r: safe_fs.Root, rel: str, digest: str, *, owner: safe_fs.root.Owner = None) -> int:
        """Write the version `digest` to `rel` in the user tree (atomic replace, parents made); its size."""
        head, _, name = safe_fs.norm(rel).rpartition("/")
        size = 0
        with self.open(digest) as src, r.temp_file(head, owner=owner, mkdirs=True) as tmp:
            while chunk := src.read(CHUNK):
                size += len(chunk)
                tmp.write(chunk)
            tmp.write(b"", durable=True)
            tmp.commit(name)
        return size

    # ---- retention -------------------------------------------------------------------------

    def objects(self) -> list[tuple[str, int, float]]:
        """(digest, size, mtime) of every kept object, oldest first."""
        if not self.path.is_dir():
            return []
        out = []
        with self._open() as store:
            for shard, st in store.listdir(""):
                if not stat.S_ISDIR(st.st_mode) or len(shard) != 2:
                    continue
                for name, ost in store.listdir(shard):
                    if stat.S_ISREG(ost.st_mode) and _valid_digest(name):
                        out.append((name, ost.st_size, ost.st_mtime))
        out.sort(key=lambda o: (o[2], o[0]))
        return out

    def used_bytes(self) -> int:
        return sum(size for _d, size, _m in self.objects())

    def prune(self, now: float | None = None) -> list[str]:
        """Delete versions older than the age limit, then the oldest until under the byte budget."""
        now = time.time() if now is None else now
        objs = self.objects()
        total = sum(o[1] for o in objs)
        removed = []
        with self._open() as store:
            for digest, size, mtime in objs:
                too_old = self.max_age and now - mtime > self.max_age
                over = self.budget and total > self.budget
                if not (too_old or over):
                    continue
                store.unlink(f"{digest[:2]}/{digest}", missing_ok=True)
                total -= size
                removed.append(digest)
        return removed
