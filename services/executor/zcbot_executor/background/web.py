"""The web's view of a user's background processes (`ProcsRequest` on `exec_procs_subject`): list
them, kill one. The gateway asks (GET /v1/procs, POST /v1/procs/{id}/kill) with a grant for the user
(only the gateway holds the key), so no other bus identity can list or stop someone's processes.

Only that user's folder is read (`<user_root>/.zcbot_procs`, through the manager's `list`/`find`, i.e. safe_fs), so
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
from zcbot_executor.background import files
from zcbot_executor.background.manager import ProcManager

MAX_COMMAND = 2000
MAX_LISTED = 500
STATES = {"timed out": "timed_out", "stopped by shutdown": "shutdown"}  # the web's names for proc_status's


def describe(manager: ProcManager, proc_dir: Path, now: float) -> dict[str, Any]:
    """One process as the web shows it (blocking)."""
    info = files.proc_status(proc_dir, now)
    spec = files.read_json(proc_dir / "proc.json")
    command = spec.get("command") if isinstance(spec.get("command"), str) else None
    if command is None:
        command = "python script.py" if info.get("kind") == "run_python" else ""
    started = info.get("started_at") if isinstance(info.get("started_at"), (int, float)) else None
    ended = info.get("ended_at") if isinstance(info.get("ended_at"), (int, float)) else None
    return {
        "proc_id": proc_dir.name, "task_id": info.get("task_id"), "kind": info.get("kind"),
        "command": command[:MAX_COMMAND], "state": STATES.get(info["status"], info["status"]),
        "started_at": started, "ended_at": ended,
        "elapsed_seconds": round(max(0.0, (ended or now) - started), 1) if started else None,
        "exit_code": info.get("exit_code"),
        "keep": manager.keeps(proc_dir.name),
    }


def _describe_all(manager: ProcManager, dirs: list[Path]) -> list[dict[str, Any]]:
    now = time.time()
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
        dirs = await manager.list(user_root, req.task_id)
        return ProcsReply(ok=True, procs=await asyncio.to_thread(_describe_all, manager, dirs))
    if req.action != "kill":
        return ProcsReply(ok=False, error="bad_request: action must be list or kill")
    proc_dir = await manager.find(user_root, req.proc_id)
    if proc_dir is None:
        return ProcsReply(ok=False, error="not_found")
    await manager.kill(proc_dir)
    return ProcsReply(ok=True, procs=[await asyncio.to_thread(describe, manager, proc_dir, time.time())])
