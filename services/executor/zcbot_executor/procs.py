"""Background processes (seed 003 §8.12): `shell`/`run_python` with background=true, and check_process.

Each runs in a sandbox of its own, launched detached from the executor (see sandbox/launch.py),
under a time limit (default 7200 s) with a capped log. State is files only, in
`<user_root>/.zcbot_procs/<task_id>/<proc_id>/` (layout in proc_wrapper.py); `exit_code` appearing
is the only terminal signal. A process is "running" while its wrapper's heartbeat is fresh, so any
executor host can answer check_process. The launching host keeps the pid privately
(`<state_dir>/procs/<proc_id>.json`) for a hard kill when the wrapper does not react to `kill`.
A sweeper removes terminal proc folders older than the retention (7 days).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from zcbot_core.tools.sandbox_schemas import DEFAULT_BACKGROUND_LIMIT, MAX_BACKGROUND_LIMIT
from zcbot_executor.config import ExecutorConfig
from zcbot_executor.sandbox import policy
from zcbot_executor.sandbox.base import BackgroundSpec, SandboxBackend, ToolResult

log = logging.getLogger(__name__)

PROCS_DIR = ".zcbot_procs"
STALE_SECONDS = 15.0  # heartbeat older than this (and no exit_code): the process is lost
_PROC_ID = re.compile(r"^p[0-9a-f]{8,32}$")
_TAIL_BYTES = 64 * 1024


def _read(path: Path) -> str | None:
    return policy.safe_read(path)


def proc_status(proc_dir: Path, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    spec = _json(proc_dir / "proc.json")
    code = _read(proc_dir / "exit_code")
    info: dict[str, Any] = {"proc_id": proc_dir.name, "task_id": proc_dir.parent.name, "kind": spec.get("kind"),
                            "started_at": spec.get("started_at"), "host": spec.get("host")}
    if code is not None:
        end = _json(proc_dir / "end.json")
        try:
            info["exit_code"] = int(code.strip())
        except ValueError:
            info["exit_code"] = None
        reason = end.get("reason", "exited")
        info["status"] = {"time limit": "timed out", "killed": "killed", "lost": "lost"}.get(reason, "exited")
        info["ended_at"] = end.get("ended_at")
        return info
    try:
        beat = (proc_dir / "heartbeat").lstat().st_mtime
    except OSError:
        beat = float(spec.get("started_at") or 0) if isinstance(spec.get("started_at"), (int, float)) else 0.0
    info["status"] = "running" if now - beat < STALE_SECONDS else "lost"
    return info


def _json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(_read(path) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _tail(path: Path, lines: int) -> str:
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ""
        os.lseek(fd, max(0, st.st_size - _TAIL_BYTES), os.SEEK_SET)
        data = os.read(fd, _TAIL_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)
    if lines <= 0:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def _write_json(path: Path, obj: dict[str, Any], owner: tuple[int, int] | None = None) -> None:
    policy.safe_write(path, json.dumps(obj), owner)


class ProcManager:
    def __init__(self, config: ExecutorConfig, backend: SandboxBackend) -> None:
        self.config = config
        self.backend = backend
        self.private_dir = config.state_dir / "procs"
        self._locks: dict[str, asyncio.Lock] = {}

    def _user_procs(self, user_root: Path) -> list[Path]:
        base = user_root / PROCS_DIR
        if not base.is_dir():
            return []
        if base.is_symlink() or not policy.inside(user_root, base):
            return []
        return [p for task in base.iterdir() if task.is_dir() and not task.is_symlink()
                for p in task.iterdir() if p.is_dir() and not p.is_symlink() and _PROC_ID.match(p.name)]

    def running(self, user_root: Path) -> list[Path]:
        return [p for p in self._user_procs(user_root) if proc_status(p)["status"] == "running"]

    async def start(self, user_id: str, user_root: Path, task_id: str, cwd_rel: str, tool: str,
                    args: dict[str, Any]) -> ToolResult:
        body = args.get("command") if tool == "shell" else args.get("code")
        field = "command" if tool == "shell" else "code"
        if not isinstance(body, str) or not body.strip():
            return ToolResult(False, error=f"argument '{field}' must be a non-empty string")
        limit = args.get("timeout")
        if not isinstance(limit, (int, float)) or isinstance(limit, bool) or limit <= 0:
            limit = self.config.bg_time_limit or DEFAULT_BACKGROUND_LIMIT
        limit = float(min(limit, self.config.bg_time_limit_max or MAX_BACKGROUND_LIMIT))
        async with self._locks.setdefault(user_id, asyncio.Lock()):
            running = await asyncio.to_thread(self.running, user_root)
            if len(running) >= self.config.max_bg_procs:
                ids = ", ".join(p.name for p in running)
                return ToolResult(False, error=(
                    f"too many background processes: {len(running)} running (limit {self.config.max_bg_procs}): {ids}. "
                    "Wait for one to finish or stop one with check_process(action='kill')."))
            proc_id = "p" + secrets.token_hex(6)
            task_key = re.sub(r"[^A-Za-z0-9_-]", "_", task_id)[:128] or "task"
            rel_dir = f"{PROCS_DIR}/{task_key}/{proc_id}"
            owner = self.config.owner
            proc_dir = await asyncio.to_thread(policy.make_dirs_owned, user_root, rel_dir, owner)
            spec = {"proc_id": proc_id, "task_id": task_id, "user_id": user_id, "kind": tool,
                    "command": body if tool == "shell" else None, "cwd": f"{policy.WORKSPACE}/{cwd_rel}".rstrip("/"),
                    "time_limit": limit, "log_cap": self.config.bg_log_cap_mb * 1024 * 1024,
                    "started_at": time.time(), "host": self.config.host}
            if tool == "run_python":
                policy.safe_write(proc_dir / "script.py", body, owner)
            _write_json(proc_dir / "proc.json", spec, owner)
            policy.safe_write(proc_dir / "output.log", b"", owner)
            bg = BackgroundSpec(proc_id, user_id, user_root, f"{policy.WORKSPACE}/{rel_dir}")
            try:
                private = await self.backend.start_background(bg)
            except Exception as exc:
                log.exception("background launch failed", extra={"user_id": user_id})
                shutil.rmtree(proc_dir, ignore_errors=True)
                return ToolResult(False, error=f"could not start the background process: {exc}")
            self.private_dir.mkdir(parents=True, exist_ok=True)
            _write_json(self.private_dir / f"{proc_id}.json", {**private, "user_root": str(user_root), "dir": rel_dir})
        text = (f"started background process {proc_id} ({tool}); time limit {limit:g} s. Output goes to "
                f"/workspace/{rel_dir}/output.log. Use check_process(proc_id='{proc_id}') for its status and output, "
                "or action='kill' to stop it.")
        return ToolResult(True, text, meta={"proc_id": proc_id, "background": True, "time_limit": limit})

    def _find(self, user_root: Path, proc_id: str, task_id: str) -> Path | None:
        base = user_root / PROCS_DIR
        task_key = re.sub(r"[^A-Za-z0-9_-]", "_", task_id)[:128]
        direct = base / task_key / proc_id
        if direct.is_dir() and not direct.is_symlink() and policy.inside(user_root, direct):
            return direct
        for path in self._user_procs(user_root):
            if path.name == proc_id:
                return path
        return None

    async def check(self, user_root: Path, task_id: str, args: dict[str, Any]) -> ToolResult:
        proc_id = args.get("proc_id")
        if not isinstance(proc_id, str) or not _PROC_ID.match(proc_id):
            return ToolResult(False, error="argument 'proc_id' must be a proc id like 'p1a2b3c4d5e6' (from the background start)")
        action = args.get("action") or "status"
        if action not in ("status", "kill"):
            return ToolResult(False, error="argument 'action' must be 'status' or 'kill'")
        tail_lines = args.get("tail_lines", 50)
        if not isinstance(tail_lines, int) or isinstance(tail_lines, bool):
            tail_lines = 50
        proc_dir = await asyncio.to_thread(self._find, user_root, proc_id, task_id)
        if proc_dir is None:
            return ToolResult(False, error=f"no background process {proc_id} (it may have been cleaned up after 7 days)")
        info = await asyncio.to_thread(proc_status, proc_dir)
        if action == "kill" and info["status"] == "running":
            info = await self._kill(user_root, proc_dir)
        elif info["status"] == "lost" and "exit_code" not in info:
            _finish_lost(proc_dir)
        tail = await asyncio.to_thread(_tail, proc_dir / "output.log", min(tail_lines, 500))
        lines = [f"proc {proc_id}: {info['status']}"]
        if info.get("exit_code") is not None:
            lines[0] += f" (exit code {info['exit_code']})"
        started, ended = info.get("started_at"), info.get("ended_at") or time.time()
        if isinstance(started, (int, float)) and isinstance(ended, (int, float)):
            lines.append(f"runtime: {ended - started:.1f} s")
        lines.append(f"output (last {tail_lines} lines):\n{tail}" if tail else "output: (none yet)")
        return ToolResult(True, "\n".join(lines), meta={k: v for k, v in info.items() if v is not None})

    async def _kill(self, user_root: Path, proc_dir: Path) -> dict[str, Any]:
        policy.safe_touch(proc_dir / "kill")
        for _ in range(30):  # the wrapper polls every 0.2 s
            await asyncio.sleep(0.1)
            if (proc_dir / "exit_code").exists():
                return proc_status(proc_dir)
        private_path = self.private_dir / f"{proc_dir.name}.json"
        private = json.loads(_read(private_path) or "{}")
        bg = BackgroundSpec(proc_dir.name, "", user_root, "")
        if private and await self.backend.kill_background(bg, private):
            await asyncio.sleep(0.2)
        if not (proc_dir / "exit_code").exists():
            _finish_lost(proc_dir, reason="killed", code=137)
        return proc_status(proc_dir)


def _finish_lost(proc_dir: Path, reason: str = "lost", code: int = -1) -> None:
    """Make a process whose wrapper is gone terminal (its exit_code is then ours)."""
    _write_json(proc_dir / "end.json", {"exit_code": code, "reason": reason, "ended_at": time.time()})
    policy.safe_write(proc_dir / "exit_code", f"{code}\n")


def sweep_procs(storage_root: Path, retention_seconds: float, private_dir: Path | None = None) -> int:
    """Remove terminal proc folders whose exit_code is older than the retention; returns how many."""
    removed = 0
    cutoff = time.time() - retention_seconds
    if not storage_root.is_dir():
        return 0
    for user in storage_root.iterdir():
        base = user / PROCS_DIR
        if not base.is_dir() or base.is_symlink():
            continue
        for task in list(base.iterdir()):
            if not task.is_dir() or task.is_symlink():
                continue
            for proc in list(task.iterdir()):
                marker = proc / "exit_code"
                try:
                    if proc.is_symlink() or marker.lstat().st_mtime > cutoff:
                        continue
                except OSError:  # no exit_code: not terminal
                    continue
                shutil.rmtree(proc, ignore_errors=True)
                if private_dir is not None:
                    (private_dir / f"{proc.name}.json").unlink(missing_ok=True)
                removed += 1
            try:
                task.rmdir()  # only when empty
            except OSError:
                pass
    return removed
