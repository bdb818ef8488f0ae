"""The tools a run can call: sandbox tools RPC'd to an executor, host tools run here."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from zcbot_core.bus import ToolCallRequest
from zcbot_core.tools.results import ToolOutcome
from zcbot_runner import metrics

HostHandler = Callable[[dict[str, Any]], Awaitable[ToolOutcome]]
DEFAULT_TOOL_TIMEOUT = {"shell": 60.0, "run_python": 120.0}
FS_TOOL_TIMEOUT = 30.0
MAX_TOOL_TIMEOUT = 600.0


@dataclass
class HostTool:
    schema: dict[str, Any]
    handler: HostHandler


class RunnerToolBox:
    def __init__(self, *, executor: Any, sandbox_schemas: list[dict[str, Any]], user_id: str, task_id: str,
                 run_id: str, cwd: str, grant: str = "") -> None:
        self.executor = executor
        self.sandbox_schemas = sandbox_schemas
        self.sandbox_names = {s["function"]["name"] for s in sandbox_schemas}
        self.host: dict[str, HostTool] = {}
        self.user_id = user_id
        self.task_id = task_id
        self.run_id = run_id
        self.cwd = cwd
        self.grant = grant  # the run's grant: the executor refuses calls without it (bus/grants.py)
        # Records the executor's `file_changes` as data_events (set by execution.py; issue 29).
        self.record_files: Callable[[list[dict[str, Any]]], Awaitable[None]] | None = None
        self.after_hooks: list[Callable[[str, dict[str, Any], ToolOutcome, float], Awaitable[ToolOutcome]]] = []

    def add_host_tool(self, tool: HostTool) -> None:
        self.host[tool.schema["function"]["name"]] = tool

    def schemas(self) -> list[dict[str, Any]]:
        return [*self.sandbox_schemas, *(t.schema for t in self.host.values())]

    @staticmethod
    def timeout_for(name: str, args: dict[str, Any]) -> float:
        requested = args.get("timeout")
        default = DEFAULT_TOOL_TIMEOUT.get(name, FS_TOOL_TIMEOUT)
        if isinstance(requested, (int, float)) and requested > 0:
            return float(min(requested, MAX_TOOL_TIMEOUT))
        return default

    async def execute(self, name: str, args: dict[str, Any], call_id: str) -> ToolOutcome:
        started = time.time()
        if name in self.host:
            outcome = await self.host[name].handler(args)
        elif name in self.sandbox_names:
            rpc_started = time.monotonic()
            reply = await self.executor.call(ToolCallRequest(
                call_id=call_id or uuid.uuid4().hex, user_id=self.user_id, task_id=self.task_id, run_id=self.run_id,
                tool=name, args=args, cwd=self.cwd, timeout=self.timeout_for(name, args), grant=self.grant,
            ))
            metrics.TOOL_RPC_SECONDS.labels(tool=name).observe(time.monotonic() - rpc_started)
            text = reply.output if reply.ok else f"ERROR: {reply.error or reply.output}"
            if not reply.ok and reply.output and reply.error:
                text = f"ERROR: {reply.error}\n{reply.output}"
            outcome = ToolOutcome.make(reply.ok, text, truncated=bool(reply.meta.get("truncated")))
            changes = reply.meta.get("file_changes")
            if changes and isinstance(changes, list) and self.record_files is not None:
                await self.record_files(changes)
        else:
            known = ", ".join(sorted({*self.sandbox_names, *self.host}))
            outcome = ToolOutcome.failure(f"unknown tool `{name}`; available tools: {known}")
        for hook in self.after_hooks:
            outcome = await hook(name, args, outcome, started)
        return outcome
