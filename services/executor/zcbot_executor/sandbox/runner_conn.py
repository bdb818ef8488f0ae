"""The executor's side of a warm tool runner: one child process, line JSON both ways, many calls.

Shared by the bwrap and unsafe backends (`WarmSandbox`). The runner's replies are untrusted (code
in the sandbox can write to the runner's stdout): oversized or malformed lines are dropped and
fields are coerced. A call whose runner does not answer within its timeout plus a margin means
the runner is stuck (say, a pathological regex in grep): the sandbox is killed and restarted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from zcbot_executor.sandbox import cgroups
from zcbot_executor.sandbox.base import Sandbox, SandboxError, ToolResult

log = logging.getLogger(__name__)

MAX_LINE = 16 * 1024 * 1024
STUCK_MARGIN = 5.0
STDERR_LOG_LINES = 20


class WarmSandbox(Sandbox):
    def __init__(self, user_id: str, user_root: Path, proc: asyncio.subprocess.Process, label: str) -> None:
        super().__init__(user_id, user_root)
        self.proc = proc
        self.label = label
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.create_task(self._read_loop(), name=f"runner-reader-{user_id}")
        self._stderr = asyncio.create_task(self._stderr_loop(), name=f"runner-stderr-{user_id}")
        self._dead = False
        self._write_lock = asyncio.Lock()

    @classmethod
    async def spawn(cls, user_id: str, user_root: Path, argv: list[str], env: dict[str, str], label: str,
                    pass_fds: tuple[int, ...] = (), cgroup_procs: list[str] | None = None) -> "WarmSandbox":
        """`cgroup_procs`: the child joins these cgroups before it execs (no fork escapes them)."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *cgroups.join_argv(cgroup_procs or [], argv), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env=env, start_new_session=True, limit=MAX_LINE, pass_fds=pass_fds,
            )
        except OSError as exc:
            raise SandboxError(f"could not start the {label} sandbox: {exc}") from exc
        return cls(user_id, user_root, proc, label)

    @property
    def alive(self) -> bool:
        return not self._dead and self.proc.returncode is None

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        data = json.dumps(msg, ensure_ascii=False).encode("utf-8") + b"\n"
        async with self._write_lock:
            self.proc.stdin.write(data)
            await self.proc.stdin.drain()

    async def call(self, call_id: str, tool: str, args: dict[str, Any], cwd: str, timeout: float) -> ToolResult:
        if not self.alive:
            raise SandboxError("sandbox is not running")
        if call_id in self._pending:
            return ToolResult(False, error=f"call {call_id} is already running")
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = fut
        self.active += 1
        try:
            try:
                await self._send({"id": call_id, "op": "call", "tool": tool, "args": args, "cwd": cwd, "timeout": timeout})
            except (TypeError, ValueError):
                return ToolResult(False, error="bad request: the arguments are not plain JSON values")
            except (ConnectionError, RuntimeError, OSError) as exc:
                raise SandboxError(f"sandbox runner is gone: {exc}") from exc
            try:
                msg = await asyncio.wait_for(asyncio.shield(fut), timeout + STUCK_MARGIN)
            except asyncio.TimeoutError:
                log.warning("runner stuck; killing sandbox", extra={"user_id": self.user_id, "tool": tool})
                await self.close()
                return ToolResult(False, error=f"{tool} did not finish within {timeout:g} s; the sandbox was restarted")
            return ToolResult.from_runner(msg)
        finally:
            self.active -= 1
            self._pending.pop(call_id, None)
            self.last_used = time.monotonic()

    async def cancel(self, call_id: str) -> None:
        if call_id in self._pending and self.alive:
            try:
                await self._send({"id": call_id, "op": "cancel"})
            except (ConnectionError, RuntimeError, OSError):
                pass

    async def ping(self, timeout: float = 5.0) -> bool:
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        key = f"ping-{id(fut)}"
        self._pending[key] = fut
        try:
            await self._send({"id": key, "op": "ping"})
            await asyncio.wait_for(fut, timeout)
            return True
        except (asyncio.TimeoutError, ConnectionError, OSError, SandboxError):
            return False
        finally:
            self._pending.pop(key, None)

    async def _read_loop(self) -> None:
        assert self.proc.stdout is not None
        try:
            while True:
                try:
                    line = await self.proc.stdout.readline()
                except ValueError:  # a line over MAX_LINE: not from our runner
                    log.warning("oversized runner line dropped", extra={"user_id": self.user_id})
                    continue
                except (asyncio.LimitOverrunError, ConnectionError):
                    break
                if not line:
                    break
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(msg, dict):
                    continue
                fut = self._pending.get(str(msg.get("id")))
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        finally:
            self._dead = True
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(SandboxError("the sandbox stopped during the call"))
                    fut.exception()

    async def _stderr_loop(self) -> None:
        """bwrap/runner errors. Sandbox code can write here too, so only the first lines are logged."""
        assert self.proc.stderr is not None
        logged = 0
        while True:
            try:
                line = await self.proc.stderr.readline()
            except (ValueError, asyncio.LimitOverrunError):
                continue
            if not line:
                return
            logged += 1
            if logged <= STDERR_LOG_LINES:
                log.warning("sandbox stderr", extra={"user_id": self.user_id, "line": line[:500].decode(errors="replace")})

    async def close(self, grace: float = 1.0) -> None:
        self._dead = True
        if self.proc.returncode is None:
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
                await asyncio.wait_for(self.proc.wait(), grace)
            except (asyncio.TimeoutError, OSError, RuntimeError):
                pass
        if self.proc.returncode is None:
            try:  # bwrap --die-with-parent takes the whole sandbox with it
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                await asyncio.wait_for(self.proc.wait(), 5.0)
            except asyncio.TimeoutError:
                log.error("sandbox process did not exit", extra={"user_id": self.user_id})
        for task in (self._reader, self._stderr):
            if not task.done():
                task.cancel()
