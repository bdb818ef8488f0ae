"""The disk quota the kernel enforces at write time (issue 36): btrfs subvolume qgroups.

The userland meter (quota/meter.py) acts after the fact: `fallocate`, a file with no name, a fast
writer or a folder moved over another got past it. Where the storage root is a btrfs filesystem,
each user root is a subvolume with a qgroup limit of ZCBOT_USER_DISK_QUOTA_MB, so every write past
it — by the sandbox, a background process, the gateway — fails with EDQUOT in the kernel, and the
meter stays only for reporting. Measured on this machine: `fallocate -l 200M` refused under a
50 MB limit, an O_TMPFILE writer stopped at 30 MB, `rm` still frees space at the limit.

- `ZCBOT_DISK_QUOTA_BACKEND`: `auto` (btrfs when the storage root is btrfs, the executor is root,
  `btrfs` (btrfs-progs) is installed and sandboxes are bwrap, or docker on a kernel with Landlock;
  else the meter), `btrfs` (required:
  the executor refuses to start without it), `meter` (the userland meter only).
- Quotas are enabled on the filesystem at start (`btrfs quota enable`, once).
- A user root is made a subvolume when the executor first prepares it; an existing plain folder
  (from before, or made by the gateway for an upload) is migrated: a new subvolume is filled with
  a reflink copy, swapped in with one RENAME_EXCHANGE, and the old folder removed.
- A nested subvolume would be its own qgroup, outside the limit (measured: 100 MB written under
  a 50 MB limit): the sandbox's seccomp filter refuses the ioctls that create one
  (zcbot_executor/sandbox/seccomp.py; bwrap loads it, in a Docker container every process the
  executor starts loads it itself with a Landlock domain that keeps user code from tracing a
  process not yet filtered: zcbot_executor/inside/confine.py). Docker without Landlock, or another
  sandbox, has no such filter, so `auto` picks the meter with it and `btrfs` refuses to start.
- Usage: the qgroup's referenced bytes from sysfs (`/sys/fs/btrfs/<fsid>/qgroups/0_<id>/referenced`,
  no privilege needed), updated by the kernel at each transaction commit (≤ 30 s); the meter
  reports the larger of its own count and this one, so bytes no name points to are reported too.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import os
import shutil
import struct
import subprocess
import threading
import uuid
from pathlib import Path

from zcbot_core.safe_fs import resolve

log = logging.getLogger(__name__)

BTRFS_SUPER_MAGIC = 0x9123683E
BTRFS_FIRST_FREE_OBJECTID = 256  # the inode number of every subvolume's root folder
BTRFS_IOC_INO_LOOKUP = 0xD0009412  # _IOWR(0x94, 18, 4096 bytes)
BTRFS_IOC_FS_INFO = 0x8400941F  # _IOR(0x94, 31, 1024 bytes)
MIGRATE_PREFIX = ".quota-migrate-"  # user ids never start with a dot: no user root has these names
BACKENDS = ("auto", "btrfs", "meter")
CLI_TIMEOUT = 120.0


class KernelQuotaUnavailable(RuntimeError):
    """`ZCBOT_DISK_QUOTA_BACKEND=btrfs` was asked for and cannot be had (the message says why)."""


class _Statfs(ctypes.Structure):
    _fields_ = [("f_type", ctypes.c_long), ("f_bsize", ctypes.c_long), ("f_blocks", ctypes.c_ulong),
                ("f_bfree", ctypes.c_ulong), ("f_bavail", ctypes.c_ulong), ("f_files", ctypes.c_ulong),
                ("f_ffree", ctypes.c_ulong), ("f_fsid", ctypes.c_int * 2), ("f_namelen", ctypes.c_long),
                ("f_frsize", ctypes.c_long), ("f_flags", ctypes.c_long), ("f_spare", ctypes.c_long * 4)]


_libc = ctypes.CDLL(None, use_errno=True)


def fs_type(path: Path) -> int:
    buf = _Statfs()
    if _libc.statfs(os.fsencode(str(path)), ctypes.byref(buf)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(path))
    return int(buf.f_type) & 0xFFFFFFFF


def is_btrfs(path: Path) -> bool:
    try:
        return fs_type(path) == BTRFS_SUPER_MAGIC
    except OSError:
        return False


def is_subvolume(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return st.st_ino == BTRFS_FIRST_FREE_OBJECTID and is_btrfs(path)


def subvolume_id(fd: int) -> int:
    """The id of the subvolume the folder `fd` is in (no privilege needed)."""
    args = bytearray(struct.pack("=QQ", 0, BTRFS_FIRST_FREE_OBJECTID) + b"\0" * 4080)
    fcntl.ioctl(fd, BTRFS_IOC_INO_LOOKUP, args, True)
    return struct.unpack_from("=Q", args, 0)[0]


def fs_uuid(fd: int) -> str:
    args = bytearray(1024)
    fcntl.ioctl(fd, BTRFS_IOC_FS_INFO, args, True)
    return str(uuid.UUID(bytes=bytes(args[16:32])))


def btrfs_cli() -> str | None:
    return shutil.which("btrfs") or next((p for p in ("/usr/sbin/btrfs", "/sbin/btrfs", "/usr/bin/btrfs")
                                          if os.access(p, os.X_OK)), None)


def _run(*args: str) -> str:
    cli = btrfs_cli()
    if cli is None:
        raise KernelQuotaUnavailable("btrfs-progs is not installed (no `btrfs` command)")
    try:
        proc = subprocess.run([cli, *args], capture_output=True, text=True, timeout=CLI_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise OSError(errno.ETIMEDOUT, f"btrfs {' '.join(args[:2])} did not finish in {CLI_TIMEOUT:g} s") from None
    if proc.returncode != 0:
        raise OSError(errno.EIO, f"btrfs {' '.join(args[:2])} failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
    return proc.stdout


class BtrfsQuota:
    """Per-user btrfs subvolumes with a qgroup limit under one storage root."""

    name = "btrfs"

    def __init__(self, storage_root: Path, limit_bytes: int, owner: tuple[int, int] | None = None) -> None:
        self.storage_root = Path(storage_root)
        self.limit = limit_bytes
        self.owner = owner
        self.ready: dict[str, int] = {}  # user id -> subvolume id, once made and limited by this process
        self.lock = threading.Lock()
        self.sysfs: Path | None = None

    # ---- the filesystem ---------------------------------------------------------------------
    def start(self) -> None:
        """Quotas on (idempotent), and where the kernel reports qgroup usage."""
        fd = os.open(self.storage_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            sysfs = Path("/sys/fs/btrfs") / fs_uuid(fd) / "qgroups"
        finally:
            os.close(fd)
        if not sysfs.is_dir():
            _run("quota", "enable", str(self.storage_root))
            log.info("btrfs quotas enabled", extra={"storage_root": str(self.storage_root)})
        self.sysfs = sysfs if sysfs.is_dir() else None

    # ---- user roots -------------------------------------------------------------------------
    def ensure(self, user_id: str, user_root: Path) -> None:
        """The user root is a subvolume under the limit (made, or migrated from a plain folder)."""
        if user_id in self.ready:
            return
        with self.lock:
            if user_id in self.ready:
                return
            try:
                self._ensure(user_id, Path(user_root))
            except (OSError, subprocess.SubprocessError) as exc:  # host paths stay in the log, not the tool result
                log.error("making a user root a limited subvolume failed", extra={"user_id": user_id, "error": str(exc)})
                raise OSError(getattr(exc, "errno", None) or errno.EIO,
                              "the disk quota could not be set up for your files (see the executor's log)") from None

    def _ensure(self, user_id: str, user_root: Path) -> None:
        if not os.path.lexists(user_root):
            self._create(user_root)
        elif not is_subvolume(user_root):
            self._migrate(user_id, user_root)
        _run("qgroup", "limit", str(self.limit), str(user_root))
        fd = os.open(user_root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            self.ready[user_id] = subvolume_id(fd)
        finally:
            os.close(fd)
        log.info("user root is a btrfs subvolume with a qgroup limit",
                 extra={"user_id": user_id, "limit_bytes": self.limit, "subvolume": self.ready[user_id]})

    def _create(self, path: Path) -> None:
        _run("subvolume", "create", str(path))
        os.chmod(path, 0o755)
        if self.owner is not None:
            os.chown(path, *self.owner)

    def _migrate(self, user_id: str, user_root: Path) -> None:
        """A plain folder becomes a subvolume with the same contents: a reflink copy into a new
        subvolume, one atomic exchange of the two names, the old folder removed."""
        st = os.lstat(user_root)
        if not os.path.isdir(user_root) or os.path.islink(user_root):
            raise OSError(errno.ENOTDIR, "a user root is not a folder", str(user_root))
        staging = self.storage_root / f"{MIGRATE_PREFIX}{user_id}"
        self._remove(staging)  # left by a migration that crashed
        _run("subvolume", "create", str(staging))
        try:
            subprocess.run(["cp", "-a", "--reflink=auto", f"{user_root}/.", f"{staging}/"], check=True,
                           capture_output=True, timeout=3600)
            os.chmod(staging, st.st_mode & 0o7777)
            os.chown(staging, st.st_uid, st.st_gid)
            parent = os.open(self.storage_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                resolve.renameat2(parent, staging.name, parent, user_root.name, resolve.RENAME_EXCHANGE)
            finally:
                os.close(parent)
        except BaseException:
            self._remove(staging)
            raise
        self._remove(staging)  # now the old plain folder
        log.info("user root migrated to a btrfs subvolume", extra={"user_id": user_id})

    def _remove(self, path: Path) -> None:
        if not os.path.lexists(path):
            return
        if is_subvolume(path):
            _run("subvolume", "delete", str(path))
        else:  # `rm`, not Python's rmtree, which recurses: a tree of any depth
            subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=True, capture_output=True, timeout=3600)

    # ---- usage ------------------------------------------------------------------------------
    def usage(self, user_id: str) -> int | None:
        """The qgroup's referenced bytes as of the last transaction commit (None: not known)."""
        subvol = self.ready.get(user_id)
        if subvol is None or self.sysfs is None:
            return None
        try:
            return int((self.sysfs / f"0_{subvol}" / "referenced").read_text().strip())
        except (OSError, ValueError):
            return None


def mount_image(storage_root: Path, image: Path, size_mb: int) -> bool:
    """Loop-mount a sparse btrfs image at the storage root (`ZCBOT_DISK_QUOTA_IMAGE_MB`, for a
    laptop whose disk is not btrfs): made and formatted the first time; what the storage root held
    is copied in and the old folder kept beside it (`<root>.pre-btrfs`) for the operator to remove.
    True when the storage root is on btrfs afterwards. Root only; nothing happens when it already is."""
    storage_root = Path(storage_root)
    if is_btrfs(storage_root) or os.geteuid() != 0 or size_mb <= 0:
        return is_btrfs(storage_root)
    try:
        return _mount_image(storage_root, image, size_mb)
    except (OSError, subprocess.SubprocessError) as exc:  # `auto` goes on with the meter; `btrfs` refuses to start
        log.warning("the disk quota image could not be mounted", extra={"image": str(image), "error": str(exc)})
        return False


def _mount_image(storage_root: Path, image: Path, size_mb: int) -> bool:
    mkfs = shutil.which("mkfs.btrfs") or ("/usr/sbin/mkfs.btrfs" if os.access("/usr/sbin/mkfs.btrfs", os.X_OK) else None)
    if mkfs is None:
        log.warning("no mkfs.btrfs: the disk quota image is not made", extra={"image": str(image)})
        return False
    image.parent.mkdir(parents=True, exist_ok=True)
    if not image.exists():
        with open(image, "wb") as fh:
            fh.truncate(size_mb * 1024 * 1024)  # sparse: takes what is written, up to this
        subprocess.run([mkfs, "-q", str(image)], check=True, capture_output=True, timeout=CLI_TIMEOUT)
        log.info("disk quota image made", extra={"image": str(image), "size_mb": size_mb})
    storage_root.mkdir(parents=True, exist_ok=True)
    if any(os.scandir(storage_root)):  # copy what is there in, keep the old folder aside
        staging = image.with_name(image.name + ".mnt")
        staging.mkdir(exist_ok=True)
        subprocess.run(["mount", "-o", "loop", str(image), str(staging)], check=True, capture_output=True)
        try:
            subprocess.run(["cp", "-a", "--reflink=auto", f"{storage_root}/.", f"{staging}/"], check=True,
                           capture_output=True, timeout=3600)
        finally:
            subprocess.run(["umount", str(staging)], check=True, capture_output=True)
        staging.rmdir()
        st = os.stat(storage_root)
        aside = storage_root.with_name(storage_root.name + ".pre-btrfs")
        os.rename(storage_root, aside)
        storage_root.mkdir(mode=st.st_mode & 0o7777)
        os.chown(storage_root, st.st_uid, st.st_gid)
        log.warning("the storage root was copied into the disk quota image; the old folder is kept",
                    extra={"kept": str(aside)})
    subprocess.run(["mount", "-o", "loop", str(image), str(storage_root)], check=True, capture_output=True)
    return is_btrfs(storage_root)


SYS_LANDLOCK_CREATE_RULESET = 444  # the same number on every architecture


def landlock_available() -> bool:
    """The kernel has Landlock (its ABI version is at least 1)."""
    abi = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return abi >= 1


def select(backend: str, storage_root: Path, limit_bytes: int, owner: tuple[int, int] | None,
           sandbox: str) -> BtrfsQuota | None:
    """The kernel quota for this executor (None: the userland meter alone), started. `btrfs`
    raises KernelQuotaUnavailable with the reason when it cannot be had; `auto` logs it."""
    if backend not in BACKENDS:
        raise KernelQuotaUnavailable(f"ZCBOT_DISK_QUOTA_BACKEND must be one of {', '.join(BACKENDS)}")
    if backend == "meter" or limit_bytes <= 0:
        return None
    reason = None
    if os.geteuid() != 0:
        reason = "the executor is not root (qgroup limits need CAP_SYS_ADMIN)"
    elif not is_btrfs(storage_root):
        reason = f"the storage root {storage_root} is not on btrfs"
    elif btrfs_cli() is None:
        reason = "btrfs-progs is not installed (no `btrfs` command)"
    elif sandbox not in ("bwrap", "docker"):
        reason = f"the {sandbox} sandbox has no seccomp filter against nested subvolumes (bwrap and docker have)"
    elif sandbox == "docker" and not landlock_available():
        reason = "this kernel has no Landlock, which keeps docker sandbox processes from tracing one not yet filtered"
    if reason is None:
        quota = BtrfsQuota(storage_root, limit_bytes, owner)
        try:
            quota.start()
            return quota
        except (OSError, KernelQuotaUnavailable) as exc:
            reason = f"enabling btrfs quotas failed: {exc}"
    if backend == "btrfs":
        raise KernelQuotaUnavailable(f"ZCBOT_DISK_QUOTA_BACKEND=btrfs: {reason}")
    log.warning("disk quota: no kernel enforcement, the userland meter only", extra={"reason": reason})
    return None
