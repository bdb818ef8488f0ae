"""Version-aware file operations on a user tree (sync: callers run them in a thread).

Each keeps what it is about to replace or remove in the `VersionStore` first, then acts through
`safe_fs`, and returns the `Change`s for `events.record`.
"""

from __future__ import annotations

import hashlib
import stat

from zcbot_core import safe_fs
from zcbot_core.filehistory.events import Change
from zcbot_core.filehistory.store import CHUNK, VersionStore


def file_hash(r: safe_fs.Root, rel: str) -> tuple[str, int] | None:
    """(SHA-256, size) of the regular file `rel`, None when it is not one."""
    try:
        fh = r.open_read(rel)
    except (safe_fs.NotFound, safe_fs.Conflict, safe_fs.NotRegular, safe_fs.SymlinkRefused):
        return None
    digest, size = hashlib.sha256(), 0
    with fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def keep_before(store: VersionStore, r: safe_fs.Root, rel: str) -> str | None:
    """Keep the current content of `rel` (if a regular file) before it is replaced or removed."""
    kept = store.keep(r, rel)
    return kept.digest if kept else None


def written(r: safe_fs.Root, rel: str, prev_hash: str | None, existed: bool) -> Change:
    """The change after `rel` was (over)written."""
    now = file_hash(r, rel)
    return Change(rel, "modify" if existed else "create", now[1] if now else None, now[0] if now else None, prev_hash)


def restore(store: VersionStore, r: safe_fs.Root, rel: str, digest: str | None, *,
            owner: safe_fs.root.Owner = None) -> Change:
    """Bring `rel` back to the version `digest` (None: the file did not exist -> remove it).
    What is there now is kept first, so a restore can itself be undone."""
    st = r.lstat(rel)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise safe_fs.Conflict(f"{rel} is a folder now", rel)
    prev = keep_before(store, r, rel) if st is not None else None
    if digest is None:
        if st is not None:
            r.unlink(rel, missing_ok=True)
        return Change(rel, "delete", None, None, prev)
    size = store.restore_into(r, rel, digest, owner=owner)
    return Change(rel, "restore", size, digest, prev)
