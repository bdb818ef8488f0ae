"""Resolution beneath a directory fd that never follows a symlink, and the syscall wrappers.

`openat2(dirfd, rel, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` (Linux 5.6+,
syscall 437 on x86_64 and aarch64) resolves the whole path in one kernel call: a symlink anywhere
is ELOOP, leaving the fd's tree is EXDEV. Where it is missing (old kernel, seccomp returning
ENOSYS/EPERM) the fallback walks one component at a time with `O_NOFOLLOW | O_DIRECTORY` from the
fd, which is equally exact: every step is relative to a directory already opened without
following, so a concurrent rename or symlink swap can only make the walk fail, never lead out.
`rel` is always a normalized relative path (no '', '.', '..' parts: `paths.normalize_rel`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437}.get(platform.machine())
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_renameat2 = getattr(_libc, "renameat2", None)
if _renameat2 is not None:
    _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    _renameat2.restype = ctypes.c_int


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def openat2(dirfd: int, rel: str, flags: int, mode: int = 0, resolve: int = RESOLVE) -> int:
    if SYS_OPENAT2 is None:
        raise OSError(errno.ENOSYS, "openat2 is not known on this architecture")
    how = _OpenHow(flags, mode, resolve)
    raw = os.fsencode(rel)
    for _ in range(8):  # EAGAIN: a concurrent rename raced the lookup; the kernel asks to retry
        fd = _libc.syscall(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dirfd), ctypes.c_char_p(raw),
                           ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        code = ctypes.get_errno()
        if code != errno.EAGAIN:
            break
    raise OSError(code, os.strerror(code), rel)


def _probe() -> bool:
    # raw: probed once at import, before any settings exist (declared in Settings for validation)
    if os.environ.get("ZCBOT_SAFE_FS_FALLBACK") == "1":
        return False
    try:
        base = os.open("/", DIR_FLAGS)
    except OSError:
        return False
    try:
        os.close(openat2(base, ".", DIR_FLAGS))
        return True
    except OSError:
        return False
    finally:
        os.close(base)


USE_OPENAT2 = _probe()  # tests flip it to exercise the fallback walk


def walk_open(dirfd: int, rel: str, flags: int, mode: int = 0) -> int:
    """The fallback: component by component, each directory opened O_NOFOLLOW | O_DIRECTORY."""
    parts = rel.split("/")
    cur = dirfd
    try:
        for part in parts[:-1]:
            nxt = os.open(part, DIR_FLAGS, dir_fd=cur)  # ENOTDIR on a symlink: classified above
            if cur != dirfd:
                os.close(cur)
            cur = nxt
        return os.open(parts[-1], flags | os.O_NOFOLLOW, mode, dir_fd=cur)
    finally:
        if cur != dirfd:
            os.close(cur)


def open_beneath(dirfd: int, rel: str, flags: int, mode: int = 0) -> int:
    """An fd for `rel` beneath `dirfd` (raises OSError: ELOOP for any symlink on the way)."""
    flags |= os.O_CLOEXEC | os.O_NOFOLLOW
    if not rel:
        return os.open(".", flags, mode, dir_fd=dirfd)
    try:
        if USE_OPENAT2:
            return openat2(dirfd, rel, flags, mode)
        return walk_open(dirfd, rel, flags, mode)
    except NotADirectoryError as exc:
        # The last component is "on the way" only when a folder was asked for; otherwise a file
        # there is the target itself, and the ENOTDIR came from a folder that was a link.
        on_the_way = rel if flags & os.O_DIRECTORY else rel.rpartition("/")[0]
        raise classify(dirfd, on_the_way, exc, rel) from None


def open_dir_at(dirfd: int, name: str) -> int:
    """One folder level, O_NOFOLLOW | O_DIRECTORY (a symlink there is ELOOP, a file ENOTDIR)."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dirfd)
    except NotADirectoryError as exc:
        raise classify(dirfd, name, exc) from None


def classify(dirfd: int, rel: str, exc: OSError, full: str | None = None) -> OSError:
    """O_NOFOLLOW | O_DIRECTORY on a symlink says ENOTDIR: tell a symlink (ELOOP) from a file on the
    way (the folders of `rel`), for the message only (the refusal itself has already happened)."""
    full = full or rel
    if not rel:
        return OSError(errno.ELOOP, "a symlink is on the way", full)
    cur = os.dup(dirfd)
    try:
        for part in rel.split("/"):
            st = os.stat(part, dir_fd=cur, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                break
            if not stat.S_ISDIR(st.st_mode):
                return exc  # a real file on the way
            nxt = os.open(part, DIR_FLAGS, dir_fd=cur)
            os.close(cur)
            cur = nxt
    except OSError:
        pass
    finally:
        os.close(cur)
    # A symlink now, or folders only: the path was a link when it was resolved (swapped back since).
    return OSError(errno.ELOOP, "a symlink is on the way", full)


def renameat2(src_dfd: int, src: str, dst_dfd: int, dst: str, flags: int = 0) -> None:
    """rename(2) relative to two directory fds; RENAME_NOREPLACE / RENAME_EXCHANGE as asked."""
    if _renameat2 is None:
        if flags:
            raise OSError(errno.ENOSYS, "renameat2 is not available")
        os.rename(src, dst, src_dir_fd=src_dfd, dst_dir_fd=dst_dfd)
        return
    if _renameat2(src_dfd, os.fsencode(src), dst_dfd, os.fsencode(dst), flags) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), dst)
