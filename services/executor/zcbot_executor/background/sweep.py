"""Removing ended background processes after the retention (ZCBOT_PROC_RETENTION_DAYS, 7 days).

Processes this host launched are decided only from its private record (record.py) and the process
itself, never from a file in the user's tree: a live one (its cgroup leaf or pid) is never touched;
a dead one gets `ended_at` in its record the first time the sweep sees it, and its folder and record
go once that is older than the retention. A backdated `exit_code` written by the sandbox used to make
this sweep delete the record of a live process, and with it every limit on it after a restart
(issue 36). Folders with no record here (another host's, or the user's own making) are the user's
data only: they go on their `exit_code`'s age, and no record is touched.

Every step in a user root resolves beneath its fd and never follows a symlink (safe_fs): a task
folder swapped for a symlink while the sweep runs makes that step fail, nothing else.
"""

from __future__ import annotations

import stat
import time
from pathlib import Path

from zcbot_core import safe_fs
from zcbot_executor.background import files
from zcbot_executor.background.files import PROC_ID, PROCS_DIR
from zcbot_executor.background.record import ProcRecord
from zcbot_executor.background.watch import BackgroundWatch


def sweep_procs(storage_root: Path, retention_seconds: float, watch: BackgroundWatch | None = None) -> int:
    """Remove ended background processes older than the retention; returns how many (blocking)."""
    cutoff = time.time() - retention_seconds
    removed, recorded = _sweep_records(watch, cutoff) if watch is not None else (0, set())
    try:
        storage = safe_fs.Root.open(storage_root)
    except safe_fs.SafeFsError:
        return removed
    with storage:
        users = [name for name, st in storage.listdir() if stat.S_ISDIR(st.st_mode)]
    for name in users:
        try:
            user = safe_fs.Root.open(storage_root / name)
        except safe_fs.SafeFsError:
            continue
        with user:
            removed += _sweep_user(user, cutoff, recorded)
    return removed


def _sweep_records(watch: BackgroundWatch, cutoff: float) -> tuple[int, set[str]]:
    """(records removed, ids of every record kept or removed here: the user sweep leaves those alone)."""
    removed = 0
    recorded: set[str] = set()
    if not watch.private_dir.is_dir():
        return 0, recorded
    for path in watch.private_dir.glob("p*.json"):  # host state, not a user tree
        proc_id = path.stem
        if not PROC_ID.match(proc_id):
            continue
        recorded.add(proc_id)
        record = ProcRecord.load(path)
        if record is None:
            continue  # unreadable: kept (and its folder), never guessed from the user's files
        if proc_id in watch.entries or record.watch or watch.alive(record):
            continue  # live, or its file changes not reported yet
        if record.ended_at is None:
            record.ended_at = time.time()  # first seen dead now: the retention starts here
            record.save(watch.private_dir)
            continue
        if record.ended_at > cutoff:
            continue
        if record.dir.startswith(f"{PROCS_DIR}/"):
            files.rmtree(record.user_root, record.dir)
        path.unlink(missing_ok=True)
        removed += 1
    return removed, recorded


def _sweep_user(user: safe_fs.Root, cutoff: float, recorded: set[str]) -> int:
    removed = 0
    for task, st in files.listdir(user, PROCS_DIR):
        if not stat.S_ISDIR(st.st_mode):
            continue
        task_rel = f"{PROCS_DIR}/{task}"
        for proc, pst in files.listdir(user, task_rel):
            if not stat.S_ISDIR(pst.st_mode) or proc in recorded:
                continue  # a process of this host's: its record decides (`_sweep_records`)
            try:
                marker = user.lstat(f"{task_rel}/{proc}/exit_code")
            except safe_fs.SafeFsError:
                continue
            if marker is None or marker.st_mtime > cutoff:
                continue  # no exit_code: not terminal
            try:
                user.rmtree(f"{task_rel}/{proc}")
            except safe_fs.SafeFsError:
                continue
            removed += 1
        try:
            user.rmdir(task_rel)  # only when empty
        except safe_fs.SafeFsError:
            pass
    return removed
