"""The executor service: a NATS micro service answering sandbox tool calls on one sandbox host.

Subjects (all from `Topology`):
- `exec_call_subject(host)`   calls for users leased to this host;
- `exec_any_subject()`        calls for unassigned users, in the executors' queue group (the
                              taker claims the user's lease);
- `exec_cancel_subject(host)` control: `ToolCancel` kills a call's process group; an
                              `ExecutorProbe` asks whether a call is still running here (the
                              client's liveness check, answered by `ExecutorProbeReply`). It
                              stays subscribed while draining.
Handlers never block the subscription: each call runs in its own task (`bus.micro`, which also
makes the micro `$SRV.STATS` describe the calls, not their hand-off). Undecodable requests get an
error reply and the service keeps serving. SIGTERM (`drain`): stop taking calls, (with
ZCBOT_BG_STOP_WITH_EXECUTOR) kill the background processes first, let in-flight calls finish within
the grace period, kill the rest (they get an error reply), close sandboxes, release leases.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.aio.msg import Msg
from nats.micro import add_service
from nats.micro.request import Request

from zcbot_core import safe_fs
from zcbot_core.agent.tool_args import non_finite_error
from zcbot_core.bus import (
    BackgroundStop,
    BusDecodeError,
    ExecutorProbe,
    ExecutorProbeReply,
    ProcsReply,
    ProcsRequest,
    ToolCallReply,
    ToolCallRequest,
    ToolCancel,
    decode,
    encode,
    grants,
)
from zcbot_core.bus.ended_runs import EndedRuns
from zcbot_core.bus.micro import ConcurrentEndpoints
from zcbot_core.platform.config import Settings
from zcbot_core.platform.service import Runtime
from zcbot_core.platform.worker import TaskGroup
from zcbot_core.quota import MB
from zcbot_core.quota import kernel as quota_kernel
from zcbot_core.safe_fs.paths import PathRejected, normalize_rel, validate_user_id
from zcbot_core.tools.executor_client import probe_host
from zcbot_core.tools.sandbox_schemas import SANDBOX_TOOL_NAMES, effective_timeout
from zcbot_executor import metrics
from zcbot_executor.background import ProcManager, ProcRecord, web
from zcbot_executor.background.changes import absorb_call, report_changes
from zcbot_executor.background.quota_guard import QuotaGuard
from zcbot_executor.background.watch import SHUTDOWN, jobs
from zcbot_executor.config import ExecutorConfig
from zcbot_executor.egress.shared import nats_report
from zcbot_executor.file_watch import MAX_FILE_CHANGES, FileWatch
from zcbot_executor.leases import LeaseKeeper
from zcbot_executor.replies import make_reply, outcome_of
from zcbot_executor.sandbox import make_backend, policy
from zcbot_executor.sandbox.base import Sandbox, SandboxBackend, SandboxError, SandboxPool, ToolResult
from zcbot_executor.user_slots import UserSlots

log = logging.getLogger(__name__)

PREPARED_SECONDS = 10.0  # a user root / task folder checked this recently is not re-checked
SHUTDOWN_ERROR = "the executor is shutting down; the call was killed (it may have partly run)"


@dataclass
class _Inflight:
    user_id: str
    box: Sandbox | None = None
    cancelled: str | None = None  # None | "cancelled" | "shutdown"


class ExecutorService:
    def __init__(self, settings: Settings, config: ExecutorConfig | None = None,
                 backend: SandboxBackend | None = None) -> None:
        self.settings = settings
        self.config = config or ExecutorConfig.from_settings(settings)
        self.host = self.config.host
        self.backend = backend or make_backend(self.config)
        self.inflight: dict[str, _Inflight] = {}
        self.tasks = TaskGroup()  # calls in flight
        self.draining = False
        self._background: list[asyncio.Task[None]] = []
        self._prepared: dict[tuple[str, str], float] = {}
        self.file_watch = FileWatch(settings, self.config.storage_root)  # versions + changes (issue 29)

    # ---- lifecycle -------------------------------------------------------------------------------
    async def start(self, rt: Runtime) -> None:
        self.grant_key = self.settings.require_grant_key()
        self.rt = rt
        self.nc, self.topo = rt.nc, rt.topo
        self.config.storage_root.mkdir(parents=True, exist_ok=True)
        self.ended_runs = EndedRuns(rt.nc, rt.js, rt.topo)  # a grant is good only while its run has not ended
        await self.ended_runs.start()
        await self.backend.start()
        if self.backend.egress is not None:  # the byte cap counted across hosts (PostgreSQL, via a runner)
            self.backend.egress.share(nats_report(rt.nc, rt.topo, self.host))
        self.pool = SandboxPool(self.backend, self.config.idle_seconds, on_close=self._sandbox_closed,
                                on_change=metrics.SANDBOXES.set)
        self.pool.start()
        self.leases = LeaseKeeper(rt.js, rt.topo, self.host, self.config.lease_refresh_seconds, host_alive=self._host_alive,
                                  in_use=self._in_use, idle_seconds=self.config.idle_seconds)
        await self.leases.start()
        self.procs = ProcManager(self.config, self.backend)
        self.procs.watch.on_end = self._background_ended
        try:  # the kernel's quota where the storage allows it (btrfs qgroups), else the meter alone
            if self.settings.zcbot_disk_quota_image_mb and self.settings.zcbot_disk_quota_backend != "meter":
                await asyncio.to_thread(quota_kernel.mount_image, self.config.storage_root,
                                        self.settings.home / "storage.btrfs", self.settings.zcbot_disk_quota_image_mb)
            kernel_quota = await asyncio.to_thread(
                quota_kernel.select, self.settings.zcbot_disk_quota_backend, self.config.storage_root,
                self.settings.zcbot_user_disk_quota_mb * MB, self.config.owner, self.backend.name)
        except quota_kernel.KernelQuotaUnavailable as exc:
            raise SandboxError(str(exc)) from None
        self.backend.kernel_quota = kernel_quota is not None  # docker: Landlock required in its sandboxes then
        self.quota = QuotaGuard(self.config.storage_root, self.settings.zcbot_user_disk_quota_mb * MB, self.procs.watch,
                                kernel=kernel_quota)
        self.procs.watch.start()
        self.sem = asyncio.Semaphore(self.config.max_concurrency)
        self.user_slots = UserSlots(self.config.user_max_calls)  # one user's flood waits on its own slots
        self.control = await self.nc.subscribe(self.topo.exec_cancel_subject(self.host), cb=self._on_control)
        self.bg_stop = await self.nc.subscribe(self.topo.exec_background_stop_subject(), cb=self._on_background_stop)
        self.procs_sub = await self.nc.subscribe(self.topo.exec_procs_subject(), queue=self.topo.executor_queue_group,
                                                 cb=self._on_procs)  # the web's process cards (background/web.py)
        self.endpoints = ConcurrentEndpoints(self._spawn)
        self.micro = await add_service(
            self.nc, name=self.topo.executor_service_name, version="1.0.0",
            description="zcbot sandbox tool executor", metadata={"host": self.host, "backend": self.backend.name},
            stats_handler=self.endpoints.stats_handler,
        )
        await self.endpoints.add(self.micro, name="call", subject=self.topo.exec_call_subject(self.host),
                                 queue_group=self.topo.executor_host_queue_group(self.host), work=self._serve)
        await self.endpoints.add(self.micro, name="any", subject=self.topo.exec_any_subject(),
                                 queue_group=self.topo.executor_queue_group, work=self._serve)
        await self.nc.flush()
        self._background.append(asyncio.create_task(self._sweep_loop(), name="proc-sweeper"))
        self._background.append(asyncio.create_task(self.quota.run(), name="disk-quota"))
        log.info("executor serving", extra={"host": self.host, "backend": self.backend.name,
                                            "storage_root": str(self.config.storage_root)})

    async def drain(self) -> None:
        self.draining = True
        try:
            await self.micro.stop()
        except Exception:
            log.exception("stopping the micro service failed")
        await self._stop_background()  # first: they end at once, whatever the calls in flight do
        pending: set[asyncio.Task[Any]] = set()
        if self.tasks:
            log.info("draining in-flight calls", extra={"calls": len(self.tasks), "grace": self.config.drain_grace_seconds})
            pending = await self.tasks.wait(self.config.drain_grace_seconds)
        if pending:
            log.info("killing the calls still in flight", extra={"calls": len(pending)})
            for call_id, entry in list(self.inflight.items()):
                entry.cancelled = "shutdown"
                if entry.box is not None:
                    await entry.box.cancel(call_id)
            await asyncio.wait(pending, timeout=5.0)
        await self._stop_background()  # one a call in flight launched meanwhile
        await self.pool.close_all()
        await self.leases.stop(release=True)
        for task in self._background:
            task.cancel()
        await self.procs.watch.stop()  # the records stay: the next start enforces them again
        await self.ended_runs.stop()
        for sub in (self.control, self.bg_stop, self.procs_sub):
            try:
                await sub.unsubscribe()
            except Exception:
                pass
        self.quota.close()
        await self.backend.close()
        log.info("executor drained", extra={"host": self.host})

    async def _stop_background(self) -> None:
        """With ZCBOT_BG_STOP_WITH_EXECUTOR: kill this host's background processes, recorded as
        stopped by shutdown (their file changes are reported while the bus is still up)."""
        if not self.config.bg_stop_with_executor:
            return  # they outlive this executor; the next start here adopts them
        await self.procs.watch.stop()  # no time-limit pass racing the kills
        killed = await self.procs.watch.stop_all(SHUTDOWN, announce=lambda n: log.info(
            "stopping %s…", jobs(n), extra={"announce": True}))
        if killed:
            log.info("background jobs stopped", extra={"proc_ids": killed})

    # ---- handlers ----------------------------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        self.tasks.spawn(coro)

    async def _respond(self, request: Request | Msg, reply: ToolCallReply | ExecutorProbeReply) -> None:
        try:
            await request.respond(encode(reply))
        except Exception as exc:  # the requester is gone or the connection closed
            log.info("could not send reply", extra={"call_id": reply.call_id, "error": str(exc)})

    async def _serve(self, request: Request) -> str | None:
        """One tool call, start to reply. Returns None, or the error text of a call that failed as a
        request (bad, refused while draining, killed by shutdown, internal): the endpoint stats."""
        started = time.perf_counter()
        try:
            req = decode(request.data, ToolCallRequest)
        except BusDecodeError as exc:
            metrics.TOOL_CALLS.labels(tool="?", outcome="rejected").inc()
            log.warning("undecodable tool call", extra={"error": str(exc)})
            reply = self._error("", f"bad request: {exc}")
            await self._respond(request, reply)
            return reply.error
        if self.draining:
            reply = self._error(req.call_id, "executor is shutting down; retry the call")
            await self._respond(request, reply)
            return reply.error
        refused = grants.refusal(self.grant_key, req.grant, req.run_id, req.user_id, req.task_id) or \
            await self.ended_runs.refusal(req.run_id)  # every call of a run, background launches and checks too
        if refused is not None:  # a bare user id (or another user's run) is no authority to run a tool
            metrics.TOOL_CALLS.labels(tool="?", outcome="rejected").inc()
            log.warning("tool call refused", extra={"call_id": req.call_id, "user_id": req.user_id,
                                                    "run_id": req.run_id, "reason": refused})
            reply = self._error(req.call_id, f"refused: {refused}")
            await self._respond(request, reply)
            return reply.error
        entry = _Inflight(req.user_id)
        self.inflight[req.call_id] = entry
        failure: str | None = None
        try:
            result = await self._execute(req, entry)
        except Exception as exc:
            log.exception("tool call failed", extra={"call_id": req.call_id, "tool": req.tool})
            result = ToolResult(False, error=f"internal executor error: {exc.__class__.__name__}: {exc}")
            failure = result.error
        finally:
            self.inflight.pop(req.call_id, None)
        if entry.cancelled and not (result.ok and result.meta.get("background")):  # a started bg process stays started
            result.ok = False
            result.meta["cancelled"] = True
            result.error = SHUTDOWN_ERROR if entry.cancelled == "shutdown" else \
                "cancelled; the command and all its processes were killed"
            if entry.cancelled == "shutdown":
                failure = SHUTDOWN_ERROR
        tool = req.tool if req.tool in SANDBOX_TOOL_NAMES else "?"
        metrics.TOOL_CALLS.labels(tool=tool, outcome=outcome_of(result)).inc()
        metrics.TOOL_SECONDS.labels(tool=tool).observe(time.perf_counter() - started)
        await self._respond(request, make_reply(req.call_id, result, self.host))
        return failure

    def _error(self, call_id: str, message: str) -> ToolCallReply:
        return ToolCallReply(call_id=call_id, ok=False, output="", error=message, meta={"executor_error": True}, host=self.host)

    async def _on_control(self, msg: Msg) -> None:
        try:
            obj = decode(msg.data, (ToolCancel, ExecutorProbe))
        except BusDecodeError as exc:
            if msg.reply:
                await self._respond(msg, self._error("", f"bad request: {exc}"))
            return
        if isinstance(obj, ToolCancel):
            entry = self.inflight.get(obj.call_id)
            if entry is not None and not entry.cancelled:
                entry.cancelled = "cancelled"
                log.info("cancelling call", extra={"call_id": obj.call_id, "user_id": entry.user_id})
                if entry.box is not None:
                    await entry.box.cancel(obj.call_id)
            if msg.reply:
                await self._respond(msg, ToolCallReply(call_id=obj.call_id, ok=True, output="",
                                                       meta={"cancelled": entry is not None}, host=self.host))
        elif msg.reply:
            running = bool(obj.call_id) and obj.call_id in self.inflight
            await self._respond(msg, ExecutorProbeReply(call_id=obj.call_id, host=self.host, running=running,
                                                        draining=self.draining))

    async def _on_background_stop(self, msg: Msg) -> None:
        """A run was cancelled or a task deleted (any gateway): kill the processes launched here."""
        try:
            stop = decode(msg.data, BackgroundStop)
            validate_user_id(stop.user_id)
        except (BusDecodeError, PathRejected) as exc:
            log.warning("bad background stop", extra={"error": str(exc)})
            return
        refusal = grants.refusal(self.grant_key, stop.grant, stop.run_id, stop.user_id, stop.task_id)
        if refusal is not None:  # a bus identity acting for a user it holds no grant of
            log.warning("background stop refused", extra={"user_id": stop.user_id, "task_id": stop.task_id,
                                                          "error": refusal})
            return
        self._spawn(self.procs.stop_task(stop.user_id, stop.task_id, stop.reason))

    async def _on_procs(self, msg: Msg) -> None:
        """List or kill a user's background processes for the web (zcbot_executor/background/web.py)."""
        try:
            req = decode(msg.data, ProcsRequest)
        except BusDecodeError as exc:
            reply = ProcsReply(ok=False, error=f"bad_request: {exc}")
        else:
            reply = await web.handle(self.procs, self.config.storage_root, self.grant_key, req)
        if msg.reply:
            await self.nc.publish(msg.reply, encode(reply))

    # ---- execution ---------------------------------------------------------------------------------
    async def _execute(self, req: ToolCallRequest, entry: _Inflight) -> ToolResult:
        if req.tool not in SANDBOX_TOOL_NAMES:
            return ToolResult(False, error=f"unknown sandbox tool {req.tool!r}; available: {', '.join(sorted(SANDBOX_TOOL_NAMES))}")
        if not isinstance(req.args, dict):
            return ToolResult(False, error="bad request: args must be an object")
        # The runner refuses NaN/Infinity already (tool_args.parse_args); a call straight off the bus
        # is checked the same way, before any tool reads a number from it.
        non_finite = non_finite_error(req.args)
        if non_finite is not None:
            return ToolResult(False, error=non_finite)
        if not math.isfinite(req.timeout):
            return ToolResult(False, error="bad request: the call's timeout must be a finite number")
        try:
            validate_user_id(req.user_id)
            cwd_rel = normalize_rel(req.cwd or "")
        except PathRejected as exc:
            return ToolResult(False, error=f"bad request: {exc}")
        user_root = self.config.storage_root / req.user_id
        key = (req.user_id, cwd_rel)
        if time.monotonic() - self._prepared.get(key, -1e9) > PREPARED_SECONDS:
            try:
                await asyncio.to_thread(self._prepare_root, user_root, cwd_rel)
            except (OSError, PathRejected) as exc:  # PathRejected: safe_fs refusals (a symlink on the way)
                return ToolResult(False, error=f"working folder {req.cwd!r} is not usable: {exc}")
            if len(self._prepared) > 50_000:
                self._prepared.clear()
            self._prepared[key] = time.monotonic()
        await self.leases.claim(req.user_id)
        async with self.user_slots.hold(req.user_id), self.sem:
            if entry.cancelled:
                return ToolResult(False)
            if req.tool == "check_process":
                return await self.procs.check(user_root, req.task_id, req.args)
            refusal = await self.quota.refusal(req.tool, req.args, req.user_id, user_root, cwd_rel)
            if refusal is not None:
                return ToolResult(False, error=refusal, meta={"disk_quota": True})
            if req.tool in ("shell", "run_python") and req.args.get("background"):
                # The before-scan now, the after-scan when the process ends (`_background_ended`).
                watched = await asyncio.to_thread(self.file_watch.before, req.user_id, user_root, cwd_rel, req.tool, req.args)
                return await self.procs.start(req.user_id, user_root, req.task_id, cwd_rel, req.tool, req.args,
                                              run_id=req.run_id, watch=watched.to_json() if watched else None)
            timeout = effective_timeout(req.tool, req.args, req.timeout)
            cwd = policy.WORKSPACE + (f"/{cwd_rel}" if cwd_rel else "")
            # The OOM counter is read around calls that run user processes only (a read stays cheap).
            ooms = self._oom_kills(req.user_id) if req.tool in ("shell", "run_python") else None
            try:
                box = await self.pool.get(req.user_id, user_root)
                entry.box = box
                if entry.cancelled:
                    return ToolResult(False)
                self.quota.started(req.call_id, req.user_id, lambda: box.cancel(req.call_id))
                watched = await asyncio.to_thread(self.file_watch.before, req.user_id, user_root, cwd_rel, req.tool, req.args)
                result = await box.call(req.call_id, req.tool, req.args, cwd, timeout)
                if watched is not None:
                    changes = await asyncio.to_thread(self.file_watch.after, req.user_id, watched, result.ok)
                    if changes and self.procs.watch.entries:  # recorded once: not again by a background job's scan
                        await asyncio.to_thread(absorb_call, self.procs, req.user_id, changes)
                    if changes:  # capped so the reply fits on the bus; the rest is counted
                        result.meta["file_changes"] = changes[:MAX_FILE_CHANGES]
                        if len(changes) > MAX_FILE_CHANGES:
                            result.meta["file_changes_more"] = len(changes) - MAX_FILE_CHANGES
                result = await self.quota.finished(req.call_id, req.tool, req.user_id, user_root, result)
                return self._oom_note(req.user_id, ooms, result)
            except SandboxError as exc:
                self.quota.running.pop(req.call_id, None)
                await self.pool.discard(req.user_id)
                return self._oom_note(req.user_id, ooms, ToolResult(
                    False, error=f"sandbox failure: {exc}; a fresh sandbox starts with the next call"))

    async def _background_ended(self, record: ProcRecord) -> None:
        await report_changes(self.file_watch, self.procs, self.rt.js, self.topo, record)

    def _oom_kills(self, user_id: str) -> int | None:
        groups = self.backend.cgroups
        return groups.oom_kills(user_id) if groups is not None else None

    def _oom_note(self, user_id: str, before: int | None, result: ToolResult) -> ToolResult:
        """A process killed by the kernel for the user's memory total: say so (it looks like a bare
        SIGKILL from inside)."""
        after = self._oom_kills(user_id)
        if before is None or after is None or after <= before:
            return result
        total = self.backend.cgroups.memory_mb()
        note = (f"out of memory: a process was killed because all of this user's sandbox processes together "
                f"exceeded their {total} MB memory limit (ZCBOT_USER_MEMORY_MB); use less memory at once, or "
                "stop background processes you no longer need")
        result.ok = False
        result.error = f"{result.error}; {note}" if result.error else note
        result.meta["oom_killed"] = True
        return result

    def _prepare_root(self, user_root: Path, cwd_rel: str) -> None:
        owner = self.config.owner
        if self.quota.kernel is not None:  # a subvolume under its qgroup limit before anything runs in it
            self.quota.kernel.ensure(user_root.name, user_root)
        with safe_fs.Root.open(user_root, create=True, owner=owner) as root:  # SafeFsError: a symlink
            root.chown("", owner)
            if cwd_rel:
                root.makedirs(cwd_rel, owner=owner)

    async def _sandbox_closed(self, user_id: str) -> None:
        if not self.draining:
            await self.leases.release(user_id)

    def _in_use(self, user_id: str) -> bool:
        return user_id in self.pool.sandboxes or any(e.user_id == user_id for e in self.inflight.values())

    async def _host_alive(self, host: str) -> bool | None:
        return await probe_host(self.nc, self.topo, host, timeout=1.0)

    async def _sweep_loop(self) -> None:
        retention = self.config.proc_retention_days * 86400
        while True:
            try:
                removed = await self.procs.sweep(retention)
                if removed:
                    log.info("swept background proc folders", extra={"removed": removed})
            except Exception:
                log.exception("proc sweep failed")
            await asyncio.sleep(self.config.sweep_interval_seconds)
