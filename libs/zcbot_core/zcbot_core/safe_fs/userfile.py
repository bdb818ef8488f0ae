"""`UserFile`: a file in a user tree named by (trusted root, relative path), for code that hands a
file around before reading it (channels push and conversation replies). It has the few `Path`
methods those callers use, each going through `Root` (no symlink followed, regular files only),
and deliberately no `__fspath__`: it cannot be passed to `open()` by mistake.
"""

from __future__ import annotations

import os
import posixpath
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from zcbot_core.safe_fs.errors import NotRegular
from zcbot_core.safe_fs.root import Root, norm


@dataclass(frozen=True)
class UserFile:
    root: Path
    rel: str

    @classmethod
    def regular(cls, root: Path, rel: str) -> "UserFile":
        """The regular file `rel` under `root` (SafeFsError when missing, a symlink or not a file)."""
        rel = norm(rel)
        with Root.open(root) as r:
            st = r.lstat(rel)
        if st is None or not stat.S_ISREG(st.st_mode):
            raise NotRegular(f"{rel or 'your root folder'} is not a file", rel)
        return cls(root, rel)

    @property
    def name(self) -> str:
        return posixpath.basename(self.rel)

    def relative_to(self, rel_dir: str) -> str:
        """The path below the folder `rel_dir` (itself relative to the root)."""
        return self.rel[len(rel_dir) + 1:] if rel_dir and self.rel.startswith(rel_dir + "/") else self.rel

    def stat(self) -> os.stat_result:
        with Root.open(self.root) as r, r.open_read(self.rel) as fh:
            return os.fstat(fh.fileno())

    def open(self, mode: str = "rb") -> BinaryIO:
        """The file opened for reading (binary only)."""
        if mode != "rb":
            raise ValueError("a UserFile is opened read-only, binary")
        with Root.open(self.root) as r:
            return r.open_read(self.rel)

    def read_bytes(self, limit: int | None = None) -> bytes:
        with Root.open(self.root) as r:
            return r.read_bytes(self.rel, limit)

    def __str__(self) -> str:
        return self.rel
