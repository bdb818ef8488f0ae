"""`TempFile`: an O_EXCL temp file held open beside its final name, renamed into place by
`commit` (relative to the folder's fd, so the rename cannot be redirected) or removed."""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from zcbot_core.safe_fs.errors import Conflict, SafeFsError, from_oserror


class TempFile:
    """A temp file beside its final name; removed unless committed."""

    def __init__(self, dfd: int, name: str, fh: BinaryIO, dir_rel: str) -> None:
        self.dfd, self.name, self.file, self.dir_rel = dfd, name, fh, dir_rel
        self.committed = False

    def write(self, data: bytes, *, durable: bool = False) -> None:
        try:
            self.file.write(data)
            self.file.flush()
            if durable:
                os.fsync(self.file.fileno())
        except OSError as exc:
            raise from_oserror(exc, self.dir_rel, "write in") from None

    def commit(self, name: str) -> None:
        """rename over `name` in the same folder (a folder there is a Conflict)."""
        shown = f"{self.dir_rel}/{name}" if self.dir_rel else name
        if not name or "/" in name or name in (".", ".."):
            raise SafeFsError(f"{name!r} is not a file name", shown)
        self.file.close()
        try:
            st = os.stat(name, dir_fd=self.dfd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                raise Conflict(f"a folder named {name!r} already exists here", shown)
        except FileNotFoundError:
            pass
        try:
            os.rename(self.name, name, src_dir_fd=self.dfd, dst_dir_fd=self.dfd)
        except OSError as exc:
            raise from_oserror(exc, shown, "write") from None
        self.committed = True

    def discard(self) -> None:
        if not self.file.closed:
            self.file.close()
        if not self.committed:
            try:
                os.unlink(self.name, dir_fd=self.dfd)
            except OSError:
                pass
        if self.dfd >= 0:
            os.close(self.dfd)
            self.dfd = -1

    def __enter__(self) -> "TempFile":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.discard()
