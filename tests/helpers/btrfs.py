"""A small loop-mounted btrfs filesystem for tests of the kernel disk quota (quota/kernel.py).

Needs root, `mkfs.btrfs` (btrfs-progs) and a free loop device; `unavailable()` names what is
missing so a test can skip with the reason (CI here is root with btrfs, so they run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "not root: mounting a loop btrfs image needs root"
    if shutil.which("mkfs.btrfs") is None or shutil.which("btrfs") is None:
        return "btrfs-progs is not installed"
    if "btrfs" not in Path("/proc/filesystems").read_text():
        subprocess.run(["modprobe", "btrfs"], capture_output=True)
        if "btrfs" not in Path("/proc/filesystems").read_text():
            return "the kernel has no btrfs"
    return None


@contextmanager
def loop_btrfs(where: Path, size_mb: int = 1024) -> Iterator[Path]:
    """A sparse image under `where`, formatted and loop-mounted at `where/mnt`; unmounted after."""
    image, mnt = where / "btrfs.img", where / "mnt"
    where.mkdir(parents=True, exist_ok=True)
    with open(image, "wb") as fh:
        fh.truncate(size_mb * 1024 * 1024)
    subprocess.run(["mkfs.btrfs", "-q", str(image)], check=True, capture_output=True)
    mnt.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True, capture_output=True)
    try:
        yield mnt
    finally:
        subprocess.run(["sync", "-f", str(mnt)], capture_output=True)
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)  # a straggler holds it: detach
        image.unlink(missing_ok=True)
