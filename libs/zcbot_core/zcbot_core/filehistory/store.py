"""The per-user version store (issue 29): `<storage_root>/.versions/<user>/<h[:2]>/<hash>`.

Outside every user root (user ids never start with a dot, `paths.validate_user_id`), so the
sandbox, which binds only the user root, can neither see nor write it. Content-addressed by
SHA-256: the same bytes kept twice are one object (its mtime is refreshed, which is what the
retention's "oldest first" reads). Objects are copies, never hard links into the user tree: a
link would share the inode with a file the sandbox can still write in place, and the "version"
would change with it.

The byte budget (`ZCBOT_VERSIONS_BUDGET_MB`) is hard (issue 36): `keep` makes room for a copy
before it is made, pruning the oldest versions under a flock'd usage record beside the objects, so
the store never holds more than the budget, however fast a run rewrites files (it grew to 798 MB
over a 100 MB budget when retention only ran every 10 minutes). The age limit is applied by
`prune` (periodically).

Every file operation here goes through `zcbot_core.safe_fs` (the user tree by fd, never by path).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from zcbot_core import safe_fs

STORE_DIR = ".versions"
CHUNK = 1024 * 1024
DAY = 86400
USAGE_FILE = ".usage"  # {"bytes", "counted_at"}: the objects' total, updated under its flock
RECOUNT_SECONDS = 600.0  # the record is counted again from the objects at most this old
PRUNE_SLACK = 0.1  # making room frees this share of the budget more than the copy needs


@dataclass(frozen=True)
class Kept:
    digest: str
    size: int


def _valid_digest(digest: str) -> bool:
    return len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)


class VersionSettings(Protocol):
    """What the store reads of the settings (`zcbot_core.platform.config.Settings` has it all)."""

    @property
    def storage_root(self) -> Path: ...

    @property
    def zcbot_versions_max_age_days(self) -> int: ...

    @property
    def zcbot_versions_budget_mb(self) -> int: ...


class VersionStore:
    """One user's kept versions. `max_age_days` / `budget_bytes` of 0 mean "no limit"; the service
    code builds it with `from_settings` (ZCBOT_VERSIONS_MAX_AGE_DAYS / _BUDGET_MB, declared once)."""

    def __init__(self, storage_root: Path, user_id: str, *, max_age_days: int, budget_bytes: int) -> None:
        self.path = Path(storage_root) / STORE_DIR / user_id
        self.max_age = max_age_days * DAY
        self.budget = budget_bytes

    @classmethod
    def from_settings(cls, settings: VersionSettings, user_id: str, storage_root: Path | None = None) -> "VersionStore":
        """`storage_root`: when the caller's differs from the settings' (an executor configured apart)."""
        return cls(storage_root or settings.storage_root, user_id, max_age_days=settings.zcbot_versions_max_age_days,
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
        """Copy the regular file `rel` of the user tree `r` into the store (None: nothing to keep).

        The byte budget holds at every moment (issue 36): under the store's lock, room for the
        file's size is made first (the oldest versions pruned, synchronously), then it is copied;
        a file larger than the whole budget is not kept, and one that grows while it is copied is
        abandoned (its bytes were never one version)."""
        try:
            src = r.open_read(rel)
        except (safe_fs.NotFound, safe_fs.Conflict, safe_fs.NotRegular, safe_fs.SymlinkRefused):
            return None
        with src, self._open() as store:
            size = os.fstat(src.fileno()).st_size
            if self.budget and size > self.budget:
                return None
            with self._usage_lock(store) as lock:
                used = self._used(store, lock)
                if self.budget and used + size > self.budget:
                    used = self._make_room(store, self.budget - size)
                kept, added = self._copy(store, src, size)
                if kept is not None:
                    self._write_usage(lock, used + added)
                return kept

    def _copy(self, store: safe_fs.Root, src: BinaryIO, size: int) -> tuple[Kept | None, int]:
        """(what was kept, bytes the store grew by); (None, 0) when the file grew past `size`."""
        digest = hashlib.sha256()
        copied = 0
        owner = self._owner()
        with store.temp_file("", mode=0o600, owner=owner) as tmp:
            while chunk := src.read(CHUNK):
                copied += len(chunk)
                if copied > size:
                    return None, 0  # written to while copied: the temp file goes on exit
                digest.update(chunk)
                tmp.write(chunk)
            tmp.write(b"", durable=True)
            hexd = digest.hexdigest()
            shard = hexd[:2]
            if store.is_file(f"{shard}/{hexd}"):
                self._touch(store, f"{shard}/{hexd}")  # deduplicated: the temp copy is discarded
                return Kept(hexd, copied), 0
            store.makedirs(shard, mode=0o700, owner=owner)  # the name is known only now: rename into its shard
            store.rename(tmp.name, f"{shard}/{hexd}", replace=True)
            tmp.committed = True
        return Kept(hexd, copied), copied

    # ---- the usage record: what the store holds, kept beside it under one lock ----------------

    @contextmanager
    def _usage_lock(self, store: safe_fs.Root) -> Iterator[int]:
        """The store's usage file, flock'd: every process that keeps or prunes (the executor as
        root, the gateway as the service user) takes it, so the budget is checked once per copy."""
        fd = os.open(USAGE_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=store.fd)
        try:
            owner = self._owner()
            if owner is not None and os.fstat(fd).st_uid != owner[0]:
                os.fchown(fd, *owner)
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)

    def _used(self, store: safe_fs.Root, lock: int) -> int:
        """The recorded usage; counted from the objects when there is none or it is older than
        RECOUNT_SECONDS (a crash between a copy and its record would otherwise drift for ever)."""
        os.lseek(lock, 0, os.SEEK_SET)
        try:
            body = json.loads(os.read(lock, 4096) or b"{}")
            used, counted = int(body["bytes"]), float(body["counted_at"])
        except (ValueError, KeyError, TypeError):
            used, counted = -1, 0.0
        if used < 0 or time.time() - counted > RECOUNT_SECONDS:
            used = sum(size for _d, size, _m in self._objects(store))
            self._write_usage(lock, used, counted_at=time.time())
        return used

    @staticmethod
    def _write_usage(lock: int, used: int, counted_at: float | None = None) -> None:
        if counted_at is None:
            os.lseek(lock, 0, os.SEEK_SET)
            try:
                counted_at = float(json.loads(os.read(lock, 4096) or b"{}").get("counted_at", 0.0))
            except (ValueError, TypeError, AttributeError):
                counted_at = 0.0
        data = json.dumps({"bytes": max(int(used), 0), "counted_at": counted_at}).encode()
        os.lseek(lock, 0, os.SEEK_SET)
        os.write(lock, data)
        os.ftruncate(lock, len(data))

    def _make_room(self, store: safe_fs.Root, target: int) -> int:
        """Delete the oldest versions until at most `target` bytes are kept, and PRUNE_SLACK of the
        budget more (so the next copies need no listing); what is kept after."""
        goal = max(target - int(self.budget * PRUNE_SLACK), 0) if self.budget else target
        objs = self._objects(store)
        total = sum(o[1] for o in objs)
        for digest, size, _m in objs:
            if total <= goal:
                break
            store.unlink(f"{digest[:2]}/{digest}", missing_ok=True)
            total -= size
        return total

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
        with self._open() as store:
            return self._objects(store)

    @staticmethod
    def _objects(store: safe_fs.Root) -> list[tuple[str, int, float]]:
        out = []
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

    def discard(self, digests: set[str]) -> tuple[int, int]:
        """Delete these versions (an admin purge: nothing names them any more); (count, bytes) freed."""
        if not digests or not self.path.is_dir():
            return 0, 0
        count = freed = 0
        with self._open() as store, self._usage_lock(store) as lock:
            used = self._used(store, lock)
            for digest in sorted(d for d in digests if _valid_digest(d)):
                rel = f"{digest[:2]}/{digest}"
                st = store.lstat(rel)
                if st is None or not stat.S_ISREG(st.st_mode):
                    continue
                store.unlink(rel, missing_ok=True)
                count, freed = count + 1, freed + st.st_size
            self._write_usage(lock, max(used - freed, 0))
        return count, freed

    def prune(self, now: float | None = None) -> list[str]:
        """Delete versions older than the age limit, then the oldest until under the byte budget
        (which `keep` already holds; this also absorbs a lowered budget)."""
        now = time.time() if now is None else now
        if not self.path.is_dir():
            return []
        removed = []
        with self._open() as store, self._usage_lock(store) as lock:
            objs = self._objects(store)
            total = sum(o[1] for o in objs)
            for digest, size, mtime in objs:
                too_old = self.max_age and now - mtime > self.max_age
                over = self.budget and total > self.budget
                if not (too_old or over):
                    continue
                store.unlink(f"{digest[:2]}/{digest}", missing_ok=True)
                total -= size
                removed.append(digest)
            self._write_usage(lock, total, counted_at=time.time())
        return removed
