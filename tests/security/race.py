"""The race harness: a directory inside a user root that keeps turning into a symlink out of it.

`flipping(target, canary)` makes `target` a real folder, places a symlink to `canary` beside it
and, in a subprocess (truly parallel to the code under test: no GIL shared), swaps the two names
with `renameat2(RENAME_EXCHANGE)` in a tight loop, so `target` is the folder one instant and a link
to the canary the next, exactly what a background process in the sandbox can do. The real
folder's fd (`Flip.real_fd`) follows it wherever its name is, so a test can refill it without ever
going through the link itself. On exit the real folder is put back at `target`.

`Canary`: a tree of root-owned files outside every root, each carrying `MARKER`; `assert_intact`
checks it byte for byte (content, mode, owner) and that no entry appeared in it or beside it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

MARKER = "CANARY-7f3e2a-host-secret"
MAX_FLIPPER_SECONDS = 120.0  # a flipper outlives no test, even one that crashed

_FLIPPER = r"""
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fn = libc.renameat2
fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
dfd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
a, b = os.fsencode(sys.argv[2]), os.fsencode(sys.argv[3])
deadline = time.monotonic() + float(sys.argv[4])
running = True
def stop(*_):
    global running
    running = False
signal.signal(signal.SIGTERM, stop)
n = 0
while n < 64:  # flipping for real before the test starts (an even count: the original layout)
    n += fn(dfd, a, dfd, b, 2) == 0
sys.stdout.write("ready\n"); sys.stdout.flush()
while running and (n & 1023 or time.monotonic() < deadline):
    if fn(dfd, a, dfd, b, 2) == 0:  # RENAME_EXCHANGE
        n += 1
sys.stdout.write(f"{n}\n"); sys.stdout.flush()
"""


@dataclass
class Flip:
    target: Path
    real_fd: int
    flips: int = 0


@contextmanager
def flipping(target: Path, canary: Path) -> Iterator[Flip]:
    """Flip `target` (created as a folder when missing) with a symlink to `canary` until exit."""
    target.mkdir(parents=True, exist_ok=True)
    link = target.with_name(f".flip-{target.name}")
    if link.is_symlink():
        link.unlink()
    link.symlink_to(canary)
    real_fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    flip = Flip(target, real_fd)
    proc = subprocess.Popen([sys.executable, "-c", _FLIPPER, str(target.parent), target.name, link.name,
                             str(MAX_FLIPPER_SECONDS)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield flip
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        flip.flips = int(out.split()[-1]) if out.split() else 0
        if target.is_symlink():  # stopped mid-way: put the real folder back under its name
            dfd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                from zcbot_core.safe_fs import RENAME_EXCHANGE, renameat2

                renameat2(dfd, target.name, dfd, link.name, RENAME_EXCHANGE)
            finally:
                os.close(dfd)
        link.unlink()
        os.close(real_fd)
    assert flip.flips > 0, "the flipper never ran"


Snapshot = dict[str, tuple[str, int, int, bytes]]


def snapshot(folder: Path) -> Snapshot:
    """Every entry under `folder` (not following links): type, mode, owner, content."""
    out: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            kind = "l" if path.is_symlink() else "d" if path.is_dir() else "f"
            data = path.read_bytes() if kind == "f" else (os.readlink(path).encode() if kind == "l" else b"")
            out[str(path.relative_to(folder))] = (kind, st.st_mode, st.st_uid, data)
    return out


@dataclass
class Canary:
    """Root-owned files outside every user root; `files` maps relative names to contents."""

    folder: Path
    files: dict[str, str] = field(default_factory=dict)
    before: Snapshot = field(default_factory=dict)
    beside: list[str] = field(default_factory=list)

    @classmethod
    def plant(cls, folder: Path, files: dict[str, str], backdate: float | None = None) -> "Canary":
        for rel, text in files.items():
            path = folder / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text.replace("{MARKER}", MARKER))
            if backdate is not None:
                os.utime(path, (backdate, backdate))
        canary = cls(folder, files)
        canary.before = snapshot(folder)
        canary.beside = sorted(os.listdir(folder.parent))
        return canary

    def assert_intact(self) -> None:
        after = snapshot(self.folder)
        assert sorted(after) == sorted(self.before), (
            f"entries created/deleted outside the root: +{sorted(set(after) - set(self.before))} "
            f"-{sorted(set(self.before) - set(after))}")
        changed = [rel for rel in after if after[rel] != self.before[rel]]
        assert not changed, f"entries changed outside the root: {changed}"
        assert sorted(os.listdir(self.folder.parent)) == self.beside, "entries appeared beside the canary"


def leaked(text: object) -> bool:
    return MARKER in str(text)


def until(deadline: float) -> bool:
    return time.monotonic() < deadline
