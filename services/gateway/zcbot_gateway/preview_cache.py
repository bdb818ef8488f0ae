"""The file-preview cache: converted PDFs named by the source's SHA-256, in a folder of the
gateway's own, bounded in total size (ZCBOT_PREVIEW_CACHE_MB) with least-recently-used eviction.

The folder is no user's tree (previews.CACHE_DIR: the gateway's temp folder), so plain path calls
are right here, not safe_fs; because it sits in the shared temp directory it is used only when it
is a real directory of this uid that nobody else can write (else someone could plant entries).
"Last used" is each entry's mtime, set explicitly at every store and hit (atime is unreliable
under relatime/noatime, and the kernel's own timestamps are only jiffy-precise). There is no
index: after each store the folder is scanned and the oldest-used entries removed until the rest
fits — a conversion takes seconds, the scan of a few thousand entries milliseconds — so several
gateway processes on a host can share the folder and the bound without coordinating. Entries are
handed out as open files: one evicted (even by another process) while its response is still
being sent is read whole from its fd.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path
from typing import BinaryIO

STALE_PART_SECONDS = 3600.0  # a `.part` this old belongs to a conversion that died mid-copy


class PreviewCache:
    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.folder = folder
        self.max_bytes = max(0, max_bytes)  # 0: nothing is kept beyond the response being sent

    def ready(self) -> bool:
        """Create the folder (0700) if missing; False when it is not ours alone to use."""
        self.folder.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(self.folder)
        return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022

    def _entry(self, digest: str) -> Path:
        return self.folder / f"{digest}.pdf"

    def open(self, digest: str) -> BinaryIO | None:
        """The cached PDF, opened and marked as just used; None when it is not cached."""
        try:
            fh = open(self._entry(digest), "rb")  # noqa: SIM115 - the response closes it
        except FileNotFoundError:
            return None
        now = time.time_ns()
        try:
            os.utime(fh.fileno(), ns=(now, now))
        except OSError:  # evicted by another process between the open and here: still ours to read
            pass
        return fh

    def store(self, digest: str, produced: Path | BinaryIO) -> BinaryIO:
        """Copy a converted PDF in (a path of ours, or a file the caller opened safely), open it, then
        evict down to the bound. One larger than the whole bound is not kept (nor does it push the
        others out): its open file serves the response."""
        part = self.folder / f"{digest}.{os.getpid()}.part"
        if isinstance(produced, Path):
            shutil.copyfile(produced, part)
        else:  # the converter's folder, opened through safe_fs -> the gateway's own cache
            with open(part, "wb") as out:
                shutil.copyfileobj(produced, out)
        now = time.time_ns()
        os.utime(part, ns=(now, now))
        os.replace(part, self._entry(digest))
        fh = open(self._entry(digest), "rb")  # noqa: SIM115 - the response closes it
        if os.fstat(fh.fileno()).st_size > self.max_bytes:
            _unlink(self._entry(digest))
        else:
            self.evict()
        return fh

    def evict(self) -> list[str]:
        """Remove the least recently used entries until the rest fit; the removed digests."""
        entries: list[tuple[int, str, int]] = []
        now = time.time()
        with os.scandir(self.folder) as it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:  # another process removed it meanwhile
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                if e.name.endswith(".part"):
                    if now - st.st_mtime > STALE_PART_SECONDS:
                        _unlink(self.folder / e.name)
                elif e.name.endswith(".pdf"):
                    entries.append((st.st_mtime_ns, e.name, st.st_size))
        total = sum(size for _, _, size in entries)
        removed = []
        for _, name, size in sorted(entries):  # oldest use first
            if total <= self.max_bytes:
                break
            _unlink(self.folder / name)
            total -= size
            removed.append(name.removesuffix(".pdf"))
        return removed


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:  # another gateway process evicted it first
        pass
