"""Process setup at the start of a sandbox (stdlib only; copied next to `tool_runner.py`).

Why the runner drops privileges itself (bwrap backend, executor running as root):
RLIMIT_NPROC is not enforced for processes whose real uid is host root, and `bwrap --unshare-user`
started by root maps the sandbox uid to host root. So when the executor is root, bwrap runs
without a user namespace but keeps only CAP_SETUID/CAP_SETGID; the runner then

1. switches to the unprivileged sandbox uid/gid (`drop`, e.g. 10001) — leaving uid 0 clears the
   capability sets, and the process can no longer touch anything host-root-owned;
2. unshares a private user namespace mapping inside uid 1000 to that uid. Process counts are
   kept per (user namespace, uid), so `RLIMIT_NPROC` becomes a per-sandbox budget: a fork bomb in
   one user's sandbox cannot starve another user's. (Two nested namespaces in fact, so that the
   sandbox cannot create further user namespaces — the same trick as `bwrap --disable-userns`.);
3. clears the (namespace-local) capabilities and sets no_new_privs.

When the executor is not root, bwrap's own `--unshare-user` already yields the same shape and only
steps 3 and the rlimits apply.
"""

from __future__ import annotations

import os
import resource

CLONE_NEWUSER = 0x10000000
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
_CAP_V3 = 0x20080522


def _libc():
    import ctypes  # only root executors need it (privilege drop): not imported on the fast path

    return ctypes.CDLL(None, use_errno=True)


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def clear_capabilities() -> None:
    import ctypes

    class _CapHeader(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class _CapData(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = _libc()
    header = _CapHeader(_CAP_V3, 0)
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def no_new_privs() -> None:
    _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def drop_privileges(uid: int, gid: int, userns: bool = True, inner_uid: int = 1000, inner_gid: int = 1000) -> None:
    import ctypes

    libc = _libc()
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # /proc/self/*_map must be ours to write
    if userns:
        # Two levels, like `bwrap --disable-userns`: in the outer namespace we are its root just
        # long enough to allow one more user namespace, then the inner one holds the sandbox. Code
        # in the sandbox therefore cannot create user namespaces of its own.
        _unshare_user(libc, 0, uid, 0, gid)
        _write("/proc/sys/user/max_user_namespaces", "1")
        _unshare_user(libc, inner_uid, 0, inner_gid, 0)
        clear_capabilities()
    no_new_privs()


def _unshare_user(libc, inside_uid: int, outside_uid: int, inside_gid: int, outside_gid: int) -> None:
    import ctypes

    if libc.unshare(CLONE_NEWUSER) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER) failed")
    _write("/proc/self/uid_map", f"{inside_uid} {outside_uid} 1\n")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/gid_map", f"{inside_gid} {outside_gid} 1\n")


# Memory: RLIMIT_DATA bounds what a process really allocates (heap and private writable mappings,
# Linux >= 4.7); RLIMIT_AS is only a loose backstop, because runtimes such as V8/Chromium, the JVM
# and Go reserve large PROT_NONE address ranges they never use. Totals across processes need a
# cgroup (the docker backend has one; for bwrap, give the executor pod/slice a memory limit).
_LIMITS = {
    "data_mb": (resource.RLIMIT_DATA, 1024 * 1024),
    "address_space_mb": (resource.RLIMIT_AS, 1024 * 1024),
    "max_procs": (resource.RLIMIT_NPROC, 1),
    "max_file_mb": (resource.RLIMIT_FSIZE, 1024 * 1024),
    "max_open_files": (resource.RLIMIT_NOFILE, 1),
    "cpu_seconds": (resource.RLIMIT_CPU, 1),
}


def apply_limits(limits: dict, pid: int = 0) -> None:
    """Lower rlimits of `pid` (0 = this process); a limit above the current hard limit is clamped."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0)) if pid == 0 else None
    for key, (which, unit) in _LIMITS.items():
        value = limits.get(key)
        if value is None:
            continue
        new = int(value) * unit
        _soft, hard = resource.getrlimit(which) if pid == 0 else resource.prlimit(pid, which)
        if hard != resource.RLIM_INFINITY:
            new = min(new, hard)
        if pid == 0:
            resource.setrlimit(which, (new, new))
        else:
            resource.prlimit(pid, which, (new, new))


def setup(config: dict) -> None:
    """Everything a sandbox process does before serving: privileges first, then limits."""
    drop = config.get("drop")
    if drop and os.geteuid() == 0:
        drop_privileges(int(drop[0]), int(drop[1]), userns=bool(config.get("userns", True)))
    elif not config.get("nnp_set"):
        no_new_privs()
    apply_limits(config.get("limits") or {})
    os.umask(0o022)
