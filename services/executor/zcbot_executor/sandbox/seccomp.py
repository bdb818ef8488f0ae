"""The sandbox's seccomp filter (bwrap `--seccomp FD`): no new btrfs subvolume or snapshot.

The kernel disk quota (zcbot_core/quota/kernel.py) is a btrfs qgroup limit on the user's
subvolume. btrfs lets any user with write access create a subvolume (or snapshot one they own)
inside it, and a nested subvolume is its own qgroup, outside the user's limit: measured, a
sandbox user wrote 100 MB into `btrfs subvolume create sub` under a 50 MB limit (full qgroups do
not put a new subvolume in its parent's group). So every sandbox process gets EPERM for the four
ioctls that create one; everything else is allowed (this filter adds one rule, it is not the
sandbox's boundary). The filter is loaded whatever the storage is: it costs nothing elsewhere.

Classic BPF over `struct seccomp_data` (nr at 0, arch at 4, args[i] at 16 + 8 i): the native and
the 32-bit compat ABI are both checked (a compat `ioctl` reaches btrfs too); x32 system calls
(x86_64 numbers with bit 30) are refused outright; an unknown architecture is refused.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

# (AUDIT_ARCH, ioctl number) of the native ABI and its 32-bit compat ABI, by machine
ARCHES = {
    "x86_64": ((0xC000003E, 16), (0x40000003, 54)),
    "aarch64": ((0xC00000B7, 29), (0x40000028, 54)),
    "arm64": ((0xC00000B7, 29), (0x40000028, 54)),
}
X32_SYSCALL_BIT = 0x40000000
# _IOW(0x94, nr, 4096-byte args): SNAP_CREATE 1, SUBVOL_CREATE 14, SNAP_CREATE_V2 23, SUBVOL_CREATE_V2 24
BLOCKED_IOCTLS = (0x50009401, 0x5000940E, 0x50009417, 0x50009418)

_LD_W_ABS, _JEQ_K, _JSET_K, _RET_K = 0x20, 0x15, 0x45, 0x06
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000


def program(machine: str | None = None) -> bytes:
    """The filter as bwrap reads it: an array of `struct sock_filter` (u16 code, u8 jt, u8 jf, u32 k)."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        raise RuntimeError(f"no seccomp filter for machine {machine!r}")
    (native_arch, native_ioctl), (compat_arch, compat_ioctl) = ARCHES[machine]
    # Symbolic program: (code, k, true label, false label); a label None means "next instruction".
    ops: list[tuple[str | None, int, int, str | None, str | None]] = [
        (None, _LD_W_ABS, 4, None, None),  # arch
        (None, _JEQ_K, native_arch, "native", None),
        (None, _JEQ_K, compat_arch, "compat", "deny"),
        ("native", _LD_W_ABS, 0, None, None),  # nr
        (None, _JSET_K, X32_SYSCALL_BIT, "deny", None) if machine == "x86_64" else (None, _JEQ_K, 0xFFFFFFFF, "deny", None),
        (None, _JEQ_K, native_ioctl, "check", "allow"),
        ("compat", _LD_W_ABS, 0, None, None),
        (None, _JEQ_K, compat_ioctl, "check", "allow"),
        ("check", _LD_W_ABS, 24, None, None),  # args[1] (the request; the kernel reads it as 32 bits)
        *[(None, _JEQ_K, request, "deny", None) for request in BLOCKED_IOCTLS],
        ("allow", _RET_K, SECCOMP_RET_ALLOW, None, None),
        ("deny", _RET_K, SECCOMP_RET_ERRNO | errno.EPERM, None, None),
    ]
    where = {label: i for i, (label, *_rest) in enumerate(ops) if label}
    out = b""
    for i, (_label, code, k, on_true, on_false) in enumerate(ops):
        jt = where[on_true] - i - 1 if on_true else 0
        jf = where[on_false] - i - 1 if on_false else 0
        if code == _RET_K or code == _LD_W_ABS:
            jt = jf = 0
        out += struct.pack("=HBBI", code, jt, jf, k)
    return out


def program_fd() -> int:
    """A readable fd holding the filter (a pipe; inheritable) for `bwrap --seccomp FD`."""
    data = program()
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, data)
    finally:
        os.close(write_fd)
    os.set_inheritable(read_fd, True)
    return read_fd
