"""Folders on disk that no task references (issue 40, seed 003 §7.8 "FS 有 DB 无").

A folder under a user root is referenced when a task (live or soft-deleted: a deleted task can be
restored with its folder) or a scheduled job names it as its working dir. The scan lists, per user
root, the folders that are neither referenced nor on the way to a referenced one (the folders
between the root and a nested task folder are kept; their other sub-folders are looked at), and
whole user roots whose user no longer exists. Hidden names (`.skills`, `.zcbot_procs`, `.zcbot_tmp`,
the storage root's `.versions`) are the system's and never listed; plain files are not listed.

Listing changes nothing. Deleting takes one folder at a time with an explicit confirmation, and
re-checks under the user's folder lock (the one task creates take) that it is still unreferenced:
a folder a live task started using since the listing (shared, or a new task made there) is refused.
Everything on the user trees goes through `zcbot_core.safe_fs` (symlinks never followed).

Shared by `zcbot admin orphans` and `/v1/admin/orphans`.
"""

from __future__ import annotations

import asyncio
import stat
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core import safe_fs
from zcbot_core.db.models import ScheduledJob, Task, User
from zcbot_core.errors import ZcbotError
from zcbot_core.safe_fs import paths
from zcbot_core.workspace.folders import lock_user_folders

SIZE_MAX_ENTRIES = 20_000  # per folder: past this its size is `partial`
USER_ROOT = ""  # the path of a whole user root (its user is gone)

TEXTS = {
    "confirm": {"zh": "删除孤立文件夹需要明确确认（confirm=true）。",
                "en": "deleting an orphan folder needs an explicit confirmation (confirm=true)"},
    "gone": {"zh": "{path} 不存在或不是文件夹。", "en": "{path} does not exist or is not a folder"},
    "in_use": {"zh": "{path} 正被任务或定时任务使用（{ref}），不是孤立文件夹，未删除。",
               "en": "{path} is in use by a task or scheduled job ({ref}); not an orphan, nothing deleted"},
    "user_exists": {"zh": "用户 {user} 仍然存在，不能整体删除其根目录。",
                    "en": "user {user} still exists; their root cannot be deleted as a whole"},
}


def _say(key: str, lang: str, **values: object) -> str:
    return TEXTS[key]["en" if lang == "en" else "zh"].format(**values)


class OrphanRefused(ZcbotError):
    code, http_status = "orphan_refused", 409


class OrphanConfirmationRequired(ZcbotError):
    code, http_status = "confirmation_required", 400


class OrphanNotFound(ZcbotError):
    code, http_status = "not_found", 404


@dataclass
class Orphan:
    user_id: str
    path: str  # relative to the user root; "" for a whole user root whose user is gone
    kind: str  # folder | user_root
    bytes: int
    files: int
    modified: str | None  # the newest mtime seen (ISO, UTC)
    partial: bool  # the size walk stopped at SIZE_MAX_ENTRIES

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


async def references(session: AsyncSession, user_id: str | None = None) -> dict[str, set[str]]:
    """user -> the working dirs its tasks (deleted ones too) and scheduled jobs name."""
    out: dict[str, set[str]] = defaultdict(set)
    for model in (Task, ScheduledJob):
        stmt = select(model.user_id, model.working_dir).distinct()
        if user_id is not None:
            stmt = stmt.where(model.user_id == user_id)
        for user, wd in (await session.execute(stmt)).all():
            if wd:
                out[user].add(wd)
    return out


def _blocking_ref(path: str, refs: set[str]) -> str | None:
    """The referenced working dir that `path` is, lies in, or leads to (None: unreferenced)."""
    if path == USER_ROOT:
        return next(iter(sorted(refs)), None)
    for ref in sorted(refs):
        if ref == path or paths.is_prefix_nested(path, ref):
            return ref
    return None


def _size(r: safe_fs.Root, rel: str) -> tuple[int, int, float, bool]:
    total = files = 0
    newest = 0.0
    try:
        entries = r.walk_files(rel, skip_hidden=False, dirs=True)
    except safe_fs.SafeFsError:
        return 0, 0, 0.0, True
    for n, (_p, st) in enumerate(entries):
        if n >= SIZE_MAX_ENTRIES:
            return total, files, newest, True
        newest = max(newest, st.st_mtime)
        if stat.S_ISREG(st.st_mode):
            total, files = total + st.st_size, files + 1
    return total, files, newest, False


def _orphan(r: safe_fs.Root, user: str, rel: str, kind: str) -> Orphan:
    total, files, newest, partial = _size(r, rel)
    st = r.lstat(rel)
    newest = max(newest, st.st_mtime if st is not None else 0.0)
    when = datetime.fromtimestamp(newest, UTC).isoformat() if newest else None
    return Orphan(user, rel, kind, total, files, when, partial)


def scan_user(storage_root: Path, user_id: str, refs: set[str]) -> list[Orphan]:
    """The unreferenced folders of one user root (blocking: run it in a thread)."""
    root_path = paths.user_root(storage_root, user_id)
    if not root_path.is_dir():
        return []
    out: list[Orphan] = []
    with safe_fs.Root.open(root_path) as r:
        pending = [""]
        while pending:
            rel = pending.pop()
            for name, st in sorted(r.listdir(rel)):
                if name.startswith(".") or not stat.S_ISDIR(st.st_mode):
                    continue
                child = f"{rel}/{name}" if rel else name
                if child in refs:
                    continue  # a task folder: what is inside is the task's
                if any(paths.is_prefix_nested(child, ref) for ref in refs):
                    pending.append(child)  # on the way to a nested task folder: look inside
                    continue
                out.append(_orphan(r, user_id, child, "folder"))
    return sorted(out, key=lambda o: o.path)


def _user_dirs(storage_root: Path) -> list[str]:
    if not storage_root.is_dir():
        return []
    with safe_fs.Root.open(storage_root) as r:
        names = [n for n, st in r.listdir("") if stat.S_ISDIR(st.st_mode) and not n.startswith(".")]
    valid = []
    for name in sorted(names):
        try:
            valid.append(paths.validate_user_id(name))
        except paths.PathRejected:
            continue
    return valid


def _gone_user_root(storage_root: Path, user_id: str) -> Orphan:
    with safe_fs.Root.open(storage_root) as r:
        return _orphan(r, user_id, user_id, "user_root")


async def find_orphans(sessions: async_sessionmaker[AsyncSession], storage_root: Path,
                       user_id: str | None = None) -> list[Orphan]:
    """Every orphan folder (of one user when `user_id` is given), users in id order."""
    async with sessions() as s:
        refs = await references(s, user_id)
        users = set((await s.scalars(select(User.user_id))).all())
    dirs = await asyncio.to_thread(_user_dirs, storage_root)
    out: list[Orphan] = []
    for user in dirs:
        if user_id is not None and user != user_id:
            continue
        if user not in users and not refs.get(user):
            gone = await asyncio.to_thread(_gone_user_root, storage_root, user)
            gone.path = USER_ROOT
            out.append(gone)
            continue
        out.extend(await asyncio.to_thread(scan_user, storage_root, user, refs.get(user, set())))
    return out


async def delete_orphan(sessions: async_sessionmaker[AsyncSession], storage_root: Path, user_id: str, path: str,
                        *, confirm: bool, lang: str = "zh") -> Orphan:
    """Delete one orphan folder (`path` "" : a whole root of a user that no longer exists) after
    checking again, under the user's folder lock, that nothing references it; what was deleted."""
    if not confirm:
        raise OrphanConfirmationRequired(_say("confirm", lang))
    paths.validate_user_id(user_id)
    rel = paths.normalize_rel(path) if path else USER_ROOT
    shown = f"{user_id}/{rel}" if rel else user_id
    async with sessions() as s, s.begin():
        await lock_user_folders(s, user_id)  # no task can be created or restored here meanwhile
        refs = (await references(s, user_id)).get(user_id, set())
        ref = _blocking_ref(rel, refs)
        if ref is not None:
            raise OrphanRefused(_say("in_use", lang, path=shown, ref=ref))
        if rel == USER_ROOT and await s.scalar(select(User.user_id).where(User.user_id == user_id)) is not None:
            raise OrphanRefused(_say("user_exists", lang, user=user_id))
        return await asyncio.to_thread(_remove, storage_root, user_id, rel, shown, lang)


def _remove(storage_root: Path, user_id: str, rel: str, shown: str, lang: str) -> Orphan:
    with safe_fs.Root.open(storage_root) as top:
        target = f"{user_id}/{rel}" if rel else user_id
        if not top.is_dir(target):
            raise OrphanNotFound(_say("gone", lang, path=shown))
        found = _orphan(top, user_id, target, "user_root" if rel == USER_ROOT else "folder")
        found.path = rel
        top.rmtree(target, missing_ok=True)
    return found
