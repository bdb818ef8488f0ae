"""A small filesystem of the fault suite's own (issue 42): an ext4 image on a loop device, mounted on
a directory of the test, filled on demand to leave no free block, and freed again.

`SmallDisk(image, mountpoint, megabytes)`: `mount()` makes the image and mounts it (`mount -o loop`,
which detaches the loop device at unmount); `fill()` writes a filler file until the filesystem
refuses (ENOSPC), `free()` removes it; `close()` unmounts (lazily when something still holds it open)
and deletes the image. Nothing but the image and the mount point is touched; the fixture that makes a
disk closes it in every case (also after a failure), and the test fails if the mount is left behind.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

CHUNK = 1 << 20


class SmallDisk:
    def __init__(self, image: Path, mountpoint: Path, megabytes: int) -> None:
        self.image = Path(image)
        self.mountpoint = Path(mountpoint)
        self.megabytes = megabytes
        self.mounted = False
        self.filler = self.mountpoint / ".zcbot-filler"

    def mount(self) -> "SmallDisk":
        self.image.parent.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with self.image.open("wb") as fh:
            fh.truncate(self.megabytes * CHUNK)
        # No reserved blocks: the filler takes the last one, as a full disk of another tenant would.
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(self.image)], check=True, capture_output=True,
                       timeout=60)
        subprocess.run(["mount", "-o", "loop", str(self.image), str(self.mountpoint)], check=True,
                       capture_output=True, timeout=30)
        self.mounted = True
        return self

    def free_bytes(self) -> int:
        st = os.statvfs(self.mountpoint)
        return st.f_bavail * st.f_frsize

    def fill(self) -> int:
        """Write the filler until the filesystem is full; the bytes written."""
        written = 0
        block = b"\0" * CHUNK
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            size = CHUNK
            while size:
                try:
                    written += os.write(fd, block[:size])
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    size //= 2  # the last blocks, down to a byte
            os.fsync(fd)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def is_mounted(self) -> bool:
        return os.path.ismount(self.mountpoint)

    def close(self) -> None:
        if self.mounted or self.is_mounted():
            self.free()
            result = subprocess.run(["umount", str(self.mountpoint)], capture_output=True, timeout=60)
            if result.returncode != 0 and self.is_mounted():
                subprocess.run(["umount", "-l", str(self.mountpoint)], check=True, capture_output=True, timeout=60)
            self.mounted = False
        self.image.unlink(missing_ok=True)
