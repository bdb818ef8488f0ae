"""The Docker sandbox's own confinement, stacked on the engine's profile (stdlib only; staged next to
`tool_runner.py`): the btrfs seccomp filter and a Landlock domain, loaded by every process the
executor starts in a container before it runs anything else.

Why (issue 36): the user root is a btrfs subvolume with a qgroup limit, and a subvolume made inside
it is its own qgroup, outside the limit. The bwrap backend hands bwrap the filter of
`sandbox/seccomp.py`; a Docker container keeps the engine's default profile (a custom one would
have to copy it whole), so here each process loads the same filter itself (filters stack: the
strictest answer wins) — the container's main process, each `docker exec` of the runner, the
background process containers. Everything the user runs descends from one of them.

A process `docker exec` starts runs unfiltered until it gets here (the interpreter's start-up), as
the sandbox's uid; a user process still running in the container could ptrace it, or write its
`/proc/<pid>/mem`, and make the ioctl for it. The Landlock domain closes that: a process in a
Landlock domain may trace only processes in the same domain or one nested in it (the kernel's
ptrace access check, which also guards `/proc/<pid>/mem` and `process_vm_writev`), so user code
(always in a domain) cannot reach a process that is not yet confined, nor docker-init. The
domain handles only making device nodes (refused without CAP_MKNOD anyway), so it restricts
nothing else. When the kernel quota is on (`landlock` true: the executor chose it, quota/kernel.py,
having seen Landlock in the host's kernel) a domain that cannot be had is an error, so the process
never runs; otherwise it is skipped (an older kernel, or an engine profile without the calls) and
the filter alone is loaded.

    python3 -I -S confine.py HEX-FILTER 0|1 COMMAND [ARG...]   # confine, then exec COMMAND (PATH search)
"""

import os
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_RESTRICT_SELF = 444, 446  # the same on every architecture
LANDLOCK_ACCESS_FS_MAKE_CHAR, LANDLOCK_ACCESS_FS_MAKE_BLOCK = 1 << 9, 1 << 11


def _fail(what: str) -> None:
    import ctypes

    err = ctypes.get_errno()
    raise OSError(err, f"{what} failed: {os.strerror(err)}")


def landlock_domain(libc) -> None:
    """Enter a new Landlock domain (OSError when the kernel or the engine's profile has none)."""
    import ctypes

    attr = ctypes.c_uint64(LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_BLOCK)  # handled_access_fs (ABI 1)
    fd = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if fd < 0:
        _fail("landlock ruleset")
    try:
        if libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            _fail("landlock restrict")
    finally:
        os.close(fd)


def apply(program: bytes, landlock: bool = False) -> None:
    """no_new_privs, the Landlock domain (required when `landlock`), then the seccomp filter."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        _fail("no_new_privs")
    try:
        landlock_domain(libc)
    except OSError:
        if landlock:
            raise

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(program, len(program))
    prog = SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(prog), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        _fail("seccomp filter")


def main(argv: list[str]) -> None:
    apply(bytes.fromhex(argv[1]), argv[2] == "1")
    os.execvp(argv[3], argv[3:])


if __name__ == "__main__":
    main(sys.argv)
