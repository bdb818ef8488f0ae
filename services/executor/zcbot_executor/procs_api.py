"""The web's view of a user's background processes (`ProcsRequest` on `exec_procs_subject`): list
them, kill one. The gateway asks (GET /v1/procs, POST /v1/procs/{id}/kill) with a grant for the user
(only the gateway holds the key), so no other bus identity can list or stop someone's processes.

Only that user's folder is read (`<user_root>/.zcbot_procs`, through `procs.py`, i.e. safe_fs), so
another user's proc id is simply not found. Any executor host can answer: the folders are the
user's, and a kill goes through the wrapper's kill file (plus the launching host's own kill when it
is this host), as check_process(action='kill') does.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from zcbot_core.bus import ProcsReply, ProcsRequest, grants
from zcbot_core.bus.messages import PROCS_GRANT_RUN
from zcbot_core.safe_fs.paths import PathRejected, validate_user_id
from zcbot_executor.procs import _PROC_ID, ProcManager, _json, proc_status

MAX_COMMAND = 2000
MAX_LISTED = 500
STATES = {"timed out": "timed_out", "stopped by shutdown": "shutdown"}  # the web's names for proc_status's


def describe(manager: ProcManager, proc_dir: Path, now: float) -> dict[str, Any]:
    """One process as the web shows it."""
    info = proc_status(proc_dir, now)
    spec = _json(proc_dir / "proc.json")
    command = spec.get("command") if isinstance(spec.get("command"), str) else None
    if command is None:
        command = "python script.py" if info.get("kind") == "run_python" else ""
    started = info.get("started_at") if isinstance(info.get("started_at"), (int, float)) else None
    ended = info.get("ended_at") if isinstance(info.get("ended_at"), (int, float)) else None
    record = manager.watch.entries.get(proc_dir.name)
    return {
        "proc_id": proc_dir.name, "task_id": info.get("task_id"), "kind": info.get("kind"),
        "command": command[:MAX_COMMAND], "state": STATES.get(info["status"], info["status"]),
        "started_at": started, "ended_at": ended,
        "elapsed_seconds": round(max(0.0, (ended or now) - started), 1) if started else None,
        "exit_code": info.get("exit_code"),
        "keep": bool(record.get("keep")) if isinstance(record, dict) else None,
    }


def _list(manager: ProcManager, user_root: Path, task_id: str) -> list[dict[str, Any]]:
    now = time.time()
    dirs = [d for d in manager._user_procs(user_root) if not task_id or d.parent.name == task_id]
    out = [describe(manager, d, now) for d in dirs[:MAX_LISTED]]
    out.sort(key=lambda p: -(p["started_at"] or 0))  # newest first
    return out


async def handle(manager: ProcManager, storage_root: Path, grant_key: str, req: ProcsRequest) -> ProcsReply:
    try:
        validate_user_id(req.user_id)
    except PathRejected as exc:
        return ProcsReply(ok=False, error=f"bad_request: {exc}")
    if grants.refusal(grant_key, req.grant, PROCS_GRANT_RUN, req.user_id, "") is not None:
        return ProcsReply(ok=False, error="refused")
    user_root = storage_root / req.user_id
    if req.action == "list":
        return ProcsReply(ok=True, procs=await asyncio.to_thread(_list, manager, user_root, req.task_id))
    if req.action != "kill":
        return ProcsReply(ok=False, error="bad_request: action must be list or kill")
    if not _PROC_ID.match(req.proc_id):
        return ProcsReply(ok=False, error="not_found")
    proc_dir = await asyncio.to_thread(manager._find, user_root, req.proc_id, "")
    if proc_dir is None:
        return ProcsReply(ok=False, error="not_found")
    info = await asyncio.to_thread(proc_status, proc_dir)
    here = proc_dir.name in manager.watch.entries
    if here or info["status"] in ("running", "lost"):
        await manager._kill(user_root, proc_dir, wait=info["status"] == "running")
    return ProcsReply(ok=True, procs=[await asyncio.to_thread(describe, manager, proc_dir, time.time())])
