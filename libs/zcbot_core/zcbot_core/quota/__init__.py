"""Per-user disk quota (`ZCBOT_USER_DISK_QUOTA_MB`; 0 turns it off): the one home of its logic.

Where the storage root is btrfs, the kernel enforces it at write time: each user root is a
subvolume with a qgroup limit (`quota/kernel.py`, issue 36). Everywhere else, and for reporting in
both cases, zcbot keeps it itself (the storage root is shared by the gateway and the executor, a
volume in Kubernetes; docs/security.md, layer 4):

- `Ledger`: one small file per user under `<storage_root>/.quota/` (outside every user root, so no
  sandbox can reach it), read and updated under `flock` by every process that writes a user's
  files. Writers that know their size (uploads, skill and memory saves) check and add exactly.
- `TreeMeter` (executor, quota/meter.py): inotify over each active user root. It measures a root once (the first
  time it is seen) and afterwards re-stats only the entries the kernel reported as changed, so
  what a shell, a Python run or a background process wrote is counted without walking the tree
  per call. It sets the ledger to the measured total (or the kernel's, when larger), which also
  absorbs what other writers added. Walks are iterative and bounded (quota/walk.py).

What is allocated counts (`st_blocks`), directories included; a hard link is counted per path
(over, never under). Without a kernel quota, a command that writes past the quota is stopped
within one meter tick (its call is killed); the overrun is bounded by what it can write in that
time and by RLIMIT_FSIZE, and a file with no name is not seen.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from pathlib import Path

from zcbot_core import safe_fs
from zcbot_core.errors import ZcbotError
from zcbot_core.quota import walk

log = logging.getLogger(__name__)

MB = 1024 * 1024
LEDGER_DIR = ".quota"  # user ids never start with a dot (paths.validate_user_id)
REMEASURE_SECONDS = 60.0  # a refusal re-measures a ledger at most this often


class DiskQuotaExceeded(ZcbotError):
    """A write would take the user over the quota: a tool error, or HTTP 507 at the gateway."""

    code = "disk_quota_exceeded"
    http_status = 507

    def __init__(self, used: int, extra: int, limit: int) -> None:
        self.used, self.extra, self.limit = used, extra, limit
        super().__init__(quota_message(used, extra, limit))


def quota_message(used: int, extra: int, limit: int) -> str:
    need = f"writing {_mb(extra)} more " if extra > 0 else ""
    return (f"disk quota exceeded: your files use {_mb(used)} of {_mb(limit)}; {need}would go over it. "
            "Delete files you no longer need (e.g. shell `rm`), then try again.")


def _mb(n: int) -> str:
    return f"{n / MB:.1f} MB"


def entry_bytes(st: os.stat_result) -> int:
    """What an entry costs against the quota: its allocated blocks (a sparse file costs what it uses)."""
    return st.st_blocks * 512


# ---- the ledger ---------------------------------------------------------------------------------


class Ledger:
    """Each user's usage in bytes, shared by every process on the storage root."""

    def __init__(self, storage_root: Path, limit_bytes: int) -> None:
        self.dir = Path(storage_root) / LEDGER_DIR
        self.limit = limit_bytes

    @classmethod
    def from_settings(cls, settings) -> "Ledger":  # type: ignore[no-untyped-def]
        return cls(settings.storage_root, settings.zcbot_user_disk_quota_mb * MB)

    @property
    def enabled(self) -> bool:
        return self.limit > 0

    def _locked(self, user_id: str) -> int:
        """The user's ledger file, locked. Owned like the storage root, so a root executor and a
        non-root gateway share it; no sandbox can reach it (sandboxes see only their own root)."""
        if not self.dir.is_dir():
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._own(self.dir)
        path = self.dir / user_id
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        if os.geteuid() == 0 and os.fstat(fd).st_uid == 0:
            self._own(path, fd)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def _own(self, path: Path, fd: int | None = None) -> None:
        if os.geteuid() != 0:
            return
        st = os.stat(self.dir.parent)
        if fd is not None:
            os.fchown(fd, st.st_uid, st.st_gid)
        else:
            os.chown(path, st.st_uid, st.st_gid, follow_symlinks=False)

    @staticmethod
    def _read(fd: int) -> tuple[int | None, float]:
        os.lseek(fd, 0, os.SEEK_SET)
        raw = os.read(fd, 4096)
        try:
            body = json.loads(raw) if raw else {}
            value, measured = body.get("bytes"), float(body.get("measured_at", 0.0))
        except (ValueError, TypeError, AttributeError):
            value, measured = None, 0.0
        return (value if isinstance(value, int) and value >= 0 else None), measured

    @staticmethod
    def _write(fd: int, used: int, measured_at: float) -> None:
        data = json.dumps({"bytes": max(int(used), 0), "measured_at": measured_at}).encode()
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, data)
        os.ftruncate(fd, len(data))

    def _current(self, fd: int, user_root: Path | None, extra: int) -> tuple[int, float]:
        """The recorded usage, measured (a full walk) when there is none yet, or when `extra` would
        be refused on a record not measured for REMEASURE_SECONDS: what only adds (uploads, saves)
        drifts up when files are deleted or overwritten, and that drift must never refuse a write."""
        value, measured = self._read(fd)
        if value is None and user_root is None:
            raise LookupError("no ledger yet and no root to measure")
        stale = value is not None and self.enabled and extra > 0 and value + extra > self.limit \
            and time.time() - measured > REMEASURE_SECONDS
        if (value is None or stale) and user_root is not None:
            value, measured = measure(user_root), time.time()
            self._write(fd, value, measured)
        return value, measured

    def used(self, user_id: str, user_root: Path | None = None) -> int:
        """The recorded usage (measured once when the user has no ledger yet)."""
        fd = self._locked(user_id)
        try:
            return self._current(fd, user_root, 0)[0]
        except LookupError:
            return 0
        finally:
            os.close(fd)

    def set(self, user_id: str, used: int) -> None:
        """A measured total (the executor's meter)."""
        fd = self._locked(user_id)
        try:
            self._write(fd, used, time.time())
        finally:
            os.close(fd)

    def reserve(self, user_id: str, extra: int, user_root: Path | None = None) -> int:
        """Add `extra` bytes (negative frees) unless that goes over the quota: DiskQuotaExceeded then,
        and nothing is recorded. Freeing is always allowed. Returns the new usage."""
        try:
            fd = self._locked(user_id)
        except OSError as exc:  # the ledger is unusable: let the write go on rather than fail it
            log.warning("disk quota ledger unavailable", extra={"user_id": user_id, "error": str(exc)})
            return 0
        try:
            try:
                value, measured = self._current(fd, user_root, extra)
            except LookupError:  # nothing recorded to adjust: the first measure will count it
                return 0
            if self.enabled and extra > 0 and value + extra > self.limit:
                raise DiskQuotaExceeded(value, extra, self.limit)
            self._write(fd, value + extra, measured)
            return value + extra
        finally:
            os.close(fd)


def measure(user_root: Path | None) -> int:
    """Bytes allocated under a user root: a full walk by directory fd that never follows a symlink
    (only where nothing better is known: a user's first ledger, an inotify overflow). Iterative and
    bounded (quota/walk.py): a tree of any shape is counted or cut, never an exception."""
    if user_root is None or not Path(user_root).is_dir():
        return 0
    total = [0]

    def visit(_ctx: object, _name: str, st: os.stat_result) -> object:
        total[0] += entry_bytes(st)
        return True

    try:
        with safe_fs.Root.open(user_root) as root:
            total[0] += entry_bytes(os.fstat(root.fd))
            walk.walk(root.fd, True, visit)
    except (safe_fs.SafeFsError, OSError):
        pass
    return total[0]


from zcbot_core.quota.meter import TreeMeter  # noqa: E402,F401  (re-exported: one import for callers)
