"""The one exception family of `zcbot_core.safe_fs`.

Every refusal is a `PathRejected`, so a `ZcbotError` (the gateway answers 400, or `http_status`:
404 missing, 409 in the way / exists, 413 too large), and the runner and executor turn it into a tool error; an `OSError`
from the kernel never escapes the module as such, so no caller can turn it into a 500.
"""

from __future__ import annotations

import errno

from zcbot_core.safe_fs.paths import FileInTheWay, PathRejected


class SafeFsError(PathRejected):
    """A root-side file operation refused or failed; `str()` is the message for the user/model."""

    code = "file_refused"

    def __init__(self, message: str, rel: str = "", errno_: int | None = None) -> None:
        super().__init__(message)
        self.rel = rel
        self.errno = errno_

    @property
    def status(self) -> int:
        """The HTTP status (older name of `http_status`)."""
        return self.http_status


class NotFound(SafeFsError):
    code, http_status = "file_not_found", 404


class Conflict(SafeFsError, FileInTheWay):
    """Something already exists where the operation needs a free name or a folder (409)."""

    code, http_status = "file_conflict", 409


class SymlinkRefused(SafeFsError):
    """A symlink (or an escape from the root) is on the way: it is never followed."""

    code = "symlink_refused"


class NotRegular(SafeFsError):
    """Reads and writes are for regular files only (no FIFO, socket, device, folder)."""

    code = "not_regular_file"


class TooLarge(SafeFsError):
    code, http_status = "file_too_large", 413


def from_oserror(exc: OSError, rel: str, action: str) -> SafeFsError:
    """Map a kernel error on `rel` to the family (message names the user's path, never a host path)."""
    shown = rel or "your root folder"
    code = exc.errno
    if code in (errno.ELOOP, errno.EXDEV):
        return SymlinkRefused(f"{shown}: a symlink is on the way; it is not followed", rel, code)
    if code == errno.ENOENT:
        return NotFound(f"{shown}: no such file or folder", rel, code)
    if code == errno.ENOTDIR:
        return Conflict(f"{shown}: a file (not a folder) is on the way", rel, code)
    if code == errno.EEXIST:
        return Conflict(f"{shown} already exists", rel, code)
    if code == errno.EISDIR:
        return Conflict(f"{shown} is a folder", rel, code)
    if code == errno.ENOTEMPTY:
        return SafeFsError(f"{shown}: folder is not empty", rel, code)
    if code in (errno.ENXIO, errno.ENODEV, errno.ETXTBSY):
        return NotRegular(f"{shown} is not a regular file", rel, code)
    if code == errno.ENAMETOOLONG:
        return SafeFsError(f"{shown}: name too long", rel, code)
    if code in (errno.EFBIG, errno.ENOSPC, errno.EDQUOT):
        return TooLarge(f"cannot {action} {shown}: {exc.strerror}", rel, code)
    return SafeFsError(f"cannot {action} {shown}: {exc.strerror or exc}", rel, code)
