"""A background process's files in the user's tree (the layout is the wrapper's: inside/proc_wrapper.py).

`<user_root>/.zcbot_procs/<task_key>/<proc_id>/` holds `proc.json`, `output.log`, `heartbeat`,
`kill`, `end.json` and `exit_code` (the only terminal signal). They are the user's, so forgeable:
they say what a process reports of itself, and any executor host can read them; what this host
enforces is decided from its private record (record.py) and the process itself (watch.py). Every
operation resolves beneath the user root's fd and never follows a symlink (zcbot_core.safe_fs).
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import time
from pathlib import Path
from typing import Any

from zcbot_core import safe_fs
from zcbot_executor.sandbox import policy

log = logging.getLogger(__name__)

PROCS_DIR = ".zcbot_procs"
STALE_SECONDS = 15.0  # heartbeat older than this (and no exit_code): the process is lost
PROC_ID = re.compile(r"^p[0-9a-f]{8,32}$")
TAIL_BYTES = 64 * 1024
END_STATES = {"time limit": "timed out", "killed": "killed", "lost": "lost", "shutdown": "stopped by shutdown"}


def task_key(task_id: str) -> str:
    """The task's folder name under PROCS_DIR."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", task_id)[:128] or "task"


def _split(path: Path) -> tuple[Path, str]:
    """(user root, path relative to it) of `<user_root>/.zcbot_procs/...`."""
    for parent in path.parents:
        if parent.name == PROCS_DIR:
            return parent.parent, path.relative_to(parent.parent).as_posix()
    return path.parent, path.name


def read_text(path: Path) -> str | None:
    return policy.safe_read(*_split(path))


def lstat(path: Path) -> os.stat_result | None:
    root, rel = _split(path)
    try:
        with safe_fs.Root.open(root) as user:
            return user.lstat(rel)
    except safe_fs.SafeFsError:
        return None


def exists(path: Path) -> bool:
    return lstat(path) is not None


def is_dir(path: Path) -> bool:
    st = lstat(path)
    return st is not None and stat.S_ISDIR(st.st_mode)


def read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(read_text(path) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def write_json(path: Path, obj: dict[str, Any], owner: tuple[int, int] | None = None) -> None:
    policy.safe_write(*_split(path), json.dumps(obj), owner)


def touch(path: Path) -> None:
    policy.safe_touch(*_split(path))


def tail(path: Path, lines: int) -> str:
    root, rel = _split(path)
    try:
        with safe_fs.Root.open(root) as user:
            data = user.tail(rel, TAIL_BYTES).decode("utf-8", errors="replace")
    except safe_fs.SafeFsError:
        return ""
    if lines <= 0:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def proc_status(proc_dir: Path, now: float | None = None) -> dict[str, Any]:
    """What a process's files say of it: proc_id, task_id, kind, started_at, host, status
    (running, lost, exited, timed out, killed, stopped by shutdown) and, when ended, exit_code, ended_at."""
    now = time.time() if now is None else now
    spec = read_json(proc_dir / "proc.json")
    code = read_text(proc_dir / "exit_code")
    info: dict[str, Any] = {"proc_id": proc_dir.name, "task_id": proc_dir.parent.name, "kind": spec.get("kind"),
                            "started_at": spec.get("started_at"), "host": spec.get("host")}
    if code is not None:
        end = read_json(proc_dir / "end.json")
        try:
            info["exit_code"] = int(code.strip())
        except ValueError:
            info["exit_code"] = None
        info["status"] = END_STATES.get(end.get("reason", "exited"), "exited")
        info["ended_at"] = end.get("ended_at")
        return info
    beat_st = lstat(proc_dir / "heartbeat")
    if beat_st is not None:
        beat = beat_st.st_mtime
    else:
        beat = float(spec.get("started_at") or 0) if isinstance(spec.get("started_at"), (int, float)) else 0.0
    info["status"] = "running" if now - beat < STALE_SECONDS else "lost"
    return info


def past_limit(proc_dir: Path, now: float) -> bool:
    spec = read_json(proc_dir / "proc.json")
    try:
        return now > float(spec["started_at"]) + float(spec["time_limit"]) + STALE_SECONDS
    except (KeyError, TypeError, ValueError):
        return True


def finish(proc_dir: Path, reason: str = "lost", code: int = -1) -> None:
    """Make a process whose wrapper is gone terminal (its exit_code is then ours). A proc folder
    swapped for a symlink meanwhile is left alone (safe_fs refuses it; nothing is written).

    `exit_code` appearing is the terminal signal, so a first end writes `end.json` before it; over an
    existing (forged) `exit_code` the code goes first, so a reader never pairs our reason with the
    forged code (for a moment it may see our code with the old reason)."""
    end = {"exit_code": code, "reason": reason, "ended_at": time.time()}
    try:
        if exists(proc_dir / "exit_code"):
            policy.safe_write(*_split(proc_dir / "exit_code"), f"{code}\n")
            write_json(proc_dir / "end.json", end)
        else:
            write_json(proc_dir / "end.json", end)
            policy.safe_write(*_split(proc_dir / "exit_code"), f"{code}\n")
    except safe_fs.SafeFsError as exc:
        log.warning("could not mark a proc as ended", extra={"proc_id": proc_dir.name, "error": str(exc)})


def listdir(root: safe_fs.Root, rel: str) -> list[tuple[str, os.stat_result]]:
    try:
        return root.listdir(rel)
    except safe_fs.SafeFsError:
        return []


def user_procs(user_root: Path) -> list[Path]:
    """Every proc folder in a user's tree."""
    base = user_root / PROCS_DIR
    try:
        with safe_fs.Root.open(user_root) as user:
            return [base / task / proc for task, st in user.listdir(PROCS_DIR) if stat.S_ISDIR(st.st_mode)
                    for proc, pst in listdir(user, f"{PROCS_DIR}/{task}")
                    if stat.S_ISDIR(pst.st_mode) and PROC_ID.match(proc)]
    except safe_fs.SafeFsError:
        return []


def find(user_root: Path, proc_id: str, task_id: str) -> Path | None:
    """The folder of `proc_id` in the user's tree (its task's first, then any task's)."""
    if not PROC_ID.match(proc_id):
        return None
    direct = user_root / PROCS_DIR / task_key(task_id) / proc_id
    if task_id and is_dir(direct):
        return direct
    for path in user_procs(user_root):
        if path.name == proc_id:
            return path
    return None


def prepare(user_root: Path, rel_dir: str, tool: str, body: str, owner: tuple[int, int] | None) -> Path:
    """A new proc folder with its script (run_python) and an empty log."""
    with safe_fs.Root.open(user_root) as user:
        user.makedirs(rel_dir, owner=owner)
        if tool == "run_python":
            user.write_bytes(f"{rel_dir}/script.py", body, owner=owner)
        user.write_bytes(f"{rel_dir}/output.log", b"", owner=owner)
    return user_root / rel_dir


def rmtree(user_root: Path, rel: str) -> None:
    try:
        with safe_fs.Root.open(user_root) as user:
            user.rmtree(rel)
    except safe_fs.SafeFsError:
        log.warning("could not remove a proc folder", extra={"path": rel})
