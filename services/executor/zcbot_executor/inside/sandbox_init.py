"""Process setup at the start of a sandbox (stdlib only; staged beside `tool_runner.py`,
run by the sandbox's python as the sandbox user: see inside/__init__.py).

Why the runner drops privileges itself (bwrap backend, executor running as root):
RLIMIT_NPROC is not enforced for processes whose real uid is host root, and `bwrap --unshare-user`
started by root maps the sandbox uid to host root. So when the executor is root, bwrap runs
without a user namespace but keeps only CAP_SETUID/CAP_SETGID; the runner then

1. `drop_early`: switches to the unprivileged sandbox uid/gid (e.g. 10001) as the very first thing
   the interpreter does, with builtin/frozen modules only (`os`, `sys`). Nothing is imported from
   a search path while the process is host root, and the interpreter runs with `-I` from the
   read-only runner mount, so no folder the user can write is ever on `sys.path` (the start-up
   import hijack of issue 19: `/workspace/_queue.py` used to run as uid 0);
2. `enter_userns`: unshares a private user namespace (plus a mount namespace it owns) mapping the
   outer uid, caps that namespace to one child, covers `/proc/sys` read-only, then unshares the
   inner user namespace mapping uid 1000 to it. Process counts are kept per (user namespace, uid),
   so `RLIMIT_NPROC` is a per-sandbox budget; the sandbox cannot create user namespaces (the
   `bwrap --disable-userns` trick) and cannot undo the `/proc/sys` cover (the mount belongs to the
   outer namespace, where it has no capabilities);
3. empties every capability set of the inner namespace — bounding and ambient included — and
   sets no_new_privs.

When the executor is not root, bwrap's own `--unshare-user` already yields the same shape and only
step 3 (bounding set, ambient set, no_new_privs) and the rlimits apply.

Only `os` is imported at module level: `drop_early` runs before anything else is loaded.
"""

import os

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 1, 2, 4, 8, 32, 4096
_CAP_V3 = 0x20080522


def early(uid: int | None = None, gid: int | None = None) -> None:
    """The runner's first statement: close inherited fds, leave host root (builtins only)."""
    # Only stdio is ours: an fd the executor forgot to mark close-on-exec (uvloop's spawn does not
    # close them) must not reach code in the sandbox.
    os.closerange(3, 1 << 20)
    if uid is not None and gid is not None:
        drop_early(uid, gid)


def drop_early(uid: int, gid: int) -> None:
    """Leave host root (builtins only: this runs before any import from a search path)."""
    if os.geteuid() != 0:
        return
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # uid 0 -> non-zero clears the permitted and effective sets
    if os.geteuid() == 0 or os.getuid() == 0:
        os._exit(121)


def _libc():
    import ctypes  # imported only after drop_early: the process is no longer host root

    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{what} failed: {os.strerror(err)}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def clear_capabilities(libc=None) -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable sets of this process."""
    import ctypes

    libc = libc or _libc()
    try:
        with open("/proc/sys/kernel/cap_last_cap") as fh:
            last = int(fh.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        # Needs CAP_SETPCAP (held in our own user namespace); without it, it fails for every cap
        # still in the set, and the check below refuses to start.
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)

    class _CapHeader(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class _CapData(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header = _CapHeader(_CAP_V3, 0)
    data = (_CapData * 2)()
    _check(libc.capset(ctypes.byref(header), data), "capset")
    with open("/proc/self/status") as fh:
        caps = {k: v.strip() for k, v in (line.split(":", 1) for line in fh if line.startswith("Cap"))}
    if any(int(v, 16) for v in caps.values()):
        raise OSError(1, f"capabilities left after the drop: {caps}")


def no_new_privs(libc=None) -> None:
    (libc or _libc()).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def enter_userns(uid: int, gid: int, inner_uid: int = 1000, inner_gid: int = 1000) -> None:
    """Steps 2-3 of the module doc, for a process already dropped to `uid`/`gid`."""
    libc = _libc()
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # /proc/self/*_map must be ours to write
    # Two levels, like `bwrap --disable-userns`: in the outer namespace we are its root just long
    # enough to allow one more user namespace and to cover /proc/sys, then the inner one holds the
    # sandbox. Code in the sandbox therefore cannot create user namespaces of its own.
    _unshare_user(libc, CLONE_NEWUSER | CLONE_NEWNS, 0, uid, 0, gid)
    _write("/proc/sys/user/max_user_namespaces", "1")
    _readonly(libc, "/proc/sys")
    _unshare_user(libc, CLONE_NEWUSER, inner_uid, 0, inner_gid, 0)
    clear_capabilities(libc)
    no_new_privs(libc)


def _readonly(libc, path: str) -> None:
    """Bind `path` over itself read-only (flags the parent mount locks must be repeated)."""
    target = path.encode()
    _check(libc.mount(target, target, None, MS_BIND, None), f"bind {path}")
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
    _check(libc.mount(None, target, None, flags, None), f"remount {path} read-only")


def _unshare_user(libc, flags: int, inside_uid: int, outside_uid: int, inside_gid: int, outside_gid: int) -> None:
    _check(libc.unshare(flags), "unshare")
    _write("/proc/self/uid_map", f"{inside_uid} {outside_uid} 1\n")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/gid_map", f"{inside_gid} {outside_gid} 1\n")


# Memory: RLIMIT_DATA bounds what a process really allocates (heap and private writable mappings,
# Linux >= 4.7); RLIMIT_AS is only a loose backstop, because runtimes such as V8/Chromium, the JVM
# and Go reserve large PROT_NONE address ranges they never use. Totals across processes: the
# per-user cgroup the executor puts every sandbox of a user in (cgroups.py on the executor side).
_LIMITS = {
    "data_mb": ("RLIMIT_DATA", 1024 * 1024),
    "address_space_mb": ("RLIMIT_AS", 1024 * 1024),
    "max_procs": ("RLIMIT_NPROC", 1),
    "max_file_mb": ("RLIMIT_FSIZE", 1024 * 1024),
    "max_open_files": ("RLIMIT_NOFILE", 1),
    "cpu_seconds": ("RLIMIT_CPU", 1),
}


def apply_limits(limits: dict, pid: int = 0) -> None:
    """Lower rlimits of `pid` (0 = this process); a limit above the current hard limit is clamped."""
    import resource

    if pid == 0:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for key, (name, unit) in _LIMITS.items():
        value = limits.get(key)
        if value is None:
            continue
        which = getattr(resource, name)
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
    if drop:
        drop_early(int(drop[0]), int(drop[1]))  # a no-op when the bootstrap already did it
        if config.get("userns", True):
            enter_userns(int(drop[0]), int(drop[1]))
        else:
            no_new_privs()
    else:
        if config.get("caps_clear"):
            clear_capabilities()
        if not config.get("nnp_set"):
            no_new_privs()
    apply_limits(config.get("limits") or {})
    os.umask(0o022)
