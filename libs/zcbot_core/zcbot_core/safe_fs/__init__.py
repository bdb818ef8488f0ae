"""The one module for every root-side file operation on a user-writable tree (docs/security.md,
layer 2). Code running as root (or as the service user) in the gateway, runner, executor and
channels touches a user's folder only through a `Root` from here:

    with safe_fs.Root.open(user_root) as root:
        text = root.read_text("memory/core.md", limit=64 * 1024)
        root.write_bytes(".skills/x/SKILL.md", data, owner=owner, mkdirs=True)

Resolution is by directory fd and never follows a symlink nor leaves the root (`openat2` with
RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, or an O_NOFOLLOW | O_DIRECTORY walk
where the kernel lacks it). The path rules it builds on (names, working dirs) are
`safe_fs.paths`. Every refusal is a `SafeFsError` (a `paths.PathRejected`): 400 at the
gateway (404/409/413 by `status`), a tool error in the runner and executor.
"""

from zcbot_core.safe_fs.errors import Conflict, NotFound, NotRegular, SafeFsError, SymlinkRefused, TooLarge
from zcbot_core.safe_fs.resolve import RENAME_EXCHANGE, RENAME_NOREPLACE, renameat2
from zcbot_core.safe_fs.root import Root, norm
from zcbot_core.safe_fs.temp import TempFile
from zcbot_core.safe_fs.userfile import UserFile

__all__ = ["Root", "TempFile", "UserFile", "norm", "SafeFsError", "NotFound", "Conflict", "SymlinkRefused", "NotRegular",
           "TooLarge", "renameat2", "RENAME_EXCHANGE", "RENAME_NOREPLACE"]
