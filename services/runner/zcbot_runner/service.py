"""Runner service: pulls run requests with bounded concurrency, listens for cancels, reaps lost runs."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nats.js.api import ConsumerConfig

from zcbot_core import egress_usage
from zcbot_core.bus import BusDecodeError, CancelRequest, decode
from zcbot_core.bus.topology import file_changes_consumer_config, max_deliveries_advisory, runs_consumer_config
from zcbot_core.bus.topology_setup import stream_limits
from zcbot_core.platform.service import Runtime
from zcbot_core.platform.worker import PullWorker, TaskGroup, instance_id
from zcbot_runner import file_events, metrics
from zcbot_runner.config import RunnerSettings
from zcbot_runner.execution import RunExecutor
from zcbot_runner.reaper import Reaper, drop_exhausted, register_liveness

log = logging.getLogger(__name__)
DRAIN_GRACE_SECONDS = 20.0
PULL_POLL_SECONDS = 1.0  # how long one pull request waits on the server; bounds drain, not latency


class RunnerService:
    def __init__(self, executor_client_factory: Any = None, sandbox_schemas: list[dict[str, Any]] | None = None,
                 extend_toolbox: Any = None) -> None:
        self.runner_id = instance_id()
        self._executor_client_factory = executor_client_factory
        self._sandbox_schemas = sandbox_schemas
        self._extend_toolbox = extend_toolbox
        self._stopping = asyncio.Event()
        self._background = TaskGroup()

    async def start(self, rt: Runtime) -> None:
        self.rt = rt
        # The runtime's settings as given (the process's `RunnerSettings`), else extended with the
        # runner's knobs from the environment (a service started in-process on a shared `Settings`).
        self.settings = RunnerSettings.extend(rt.settings)
        client = self._executor_client_factory(rt) if self._executor_client_factory else _default_executor_client(rt)
        schemas = self._sandbox_schemas if self._sandbox_schemas is not None else _default_sandbox_schemas()
        extend = self._extend_toolbox if self._extend_toolbox is not None else _default_extend_toolbox(rt, self.settings)
        self.executor = RunExecutor(rt, self.settings, self.runner_id, client, schemas, extend)
        await _warm_llm_client(rt)
        await _warm_statements(rt)
        await asyncio.to_thread(_warm_builtin_skills, rt)
        self._cancel_sub = await rt.nc.subscribe(rt.topo.cancel_wildcard(), cb=self._on_cancel)
        config: ConsumerConfig = runs_consumer_config(rt.topo, stream_limits(rt.settings))
        psub = await rt.js.pull_subscribe_bind(durable=config.durable_name, stream=rt.topo.runs_stream)
        self.worker = PullWorker(psub, self._handle, self.settings.zcbot_runner_concurrency, "runner",
                                 poll_seconds=PULL_POLL_SECONDS)
        self.worker.start()
        fconfig = file_changes_consumer_config(rt.topo, stream_limits(rt.settings))
        fsub = await rt.js.pull_subscribe_bind(durable=fconfig.durable_name, stream=rt.topo.file_changes_stream)
        self.file_worker = PullWorker(fsub, lambda msg: file_events.on_report(rt.sessions, msg), 4, "file-changes",
                                      poll_seconds=PULL_POLL_SECONDS)  # background processes' changes (issue 29)
        self.file_worker.start()
        self._background.spawn(register_liveness(rt, self.runner_id, self._stopping))
        self._exhausted_sub = await rt.nc.subscribe(max_deliveries_advisory(rt.topo), cb=self._on_exhausted,
                                                    queue=rt.topo.runner_advisories_queue_group)
        # the executors' egress bytes: recorded in PostgreSQL, answered with each user's total (the cap)
        self._egress_sub = await egress_usage.serve(rt.nc, rt.topo, rt.sessions)
        self._background.spawn(Reaper(rt, self.runner_id, self._executing).loop(self._stopping))
        log.info("runner started", extra={"runner_id": self.runner_id})

    def _executing(self, task_id: str, run_id: str) -> bool:
        active = self.executor.active.get(task_id)
        return active is not None and active.run_id == run_id

    async def _on_exhausted(self, msg: Any) -> None:
        await drop_exhausted(self.rt, msg)

    async def _on_cancel(self, msg: Any) -> None:
        try:
            req = decode(msg.data, CancelRequest)
        except BusDecodeError:
            return
        self.executor.on_cancel(req)

    async def _handle(self, msg: Any) -> None:
        metrics.ACTIVE_RUNS.inc()
        try:
            await self.executor.handle(msg)
        except Exception:
            log.exception("run handling failed")
        finally:
            metrics.ACTIVE_RUNS.dec()

    async def drain(self) -> None:
        """Stop pulling, hand unfinished runs back (nak) so another runner resumes them at once."""
        self._stopping.set()
        await self.worker.stop()
        await self.file_worker.stop()
        for active in list(self.executor.active.values()):
            active.token.cancel("shutdown")
        await self.worker.wait(DRAIN_GRACE_SECONDS)
        await self._background.cancel(wait=0)
        await self._cancel_sub.unsubscribe()
        for sub in (self._exhausted_sub, self._egress_sub):
            try:
                await sub.unsubscribe()
            except Exception:
                pass
        await self.worker.close()
        await self.file_worker.wait(5.0)
        await self.file_worker.close()
        close = getattr(self.executor.extend_toolbox, "aclose", None)
        if close is not None:  # the host tools' HTTP clients
            await close()


async def _warm_llm_client(rt: Runtime) -> None:
    """LiteLLM's first call pays its cost map, lazy imports and deferred pydantic schemas
    (~200 ms, `llm.warm`): paid before pulling the first run, on this event loop, with no request."""
    from zcbot_core.llm.profiles import get_profile
    from zcbot_core.llm.warm import warm_up

    try:
        profile = get_profile(rt.settings, None)
    except Exception:  # a misconfigured default profile is reported by the run that uses it
        return
    await warm_up(profile)


def _warm_builtin_skills(rt: Runtime) -> None:
    """Parse the built-in skills once now (skills.py caches them per change of their files): the first
    run's prompt would otherwise read and parse them, ~13 ms before its first model call (issue 28)."""
    from zcbot_core.workspace.skills import SkillPaths, registry_for_user

    try:
        registry_for_user(None, SkillPaths.from_settings(rt.settings))
    except Exception:
        log.debug("built-in skills warm-up failed", exc_info=True)


async def _warm_statements(rt: Runtime) -> None:
    """The statements a run starts with, run once before the first run for ids no row has: SQLAlchemy
    compiles a statement on its first execution in a process (~10 ms for the claim, before the first
    message's first event; the budget reads before its first model call; issue 28). The claim claims
    nothing; the budget reads are rolled back. Best effort: the first run compiles them otherwise."""
    from datetime import datetime, timezone

    from zcbot_core.accounts import budgets
    from zcbot_core.runstate import sql

    try:
        async with rt.autocommit.connect() as conn:
            await conn.execute(sql.CLAIM, {"claim_task": "", "claim_run": "", "claim_owner": ""})
        async with rt.sessions() as session:
            await budgets.limits(session, "", budgets.Defaults.from_settings(rt.settings), lock=True)
            await budgets.spent(session, "", datetime.now(timezone.utc))
            await session.rollback()
    except Exception:
        log.debug("statement warm-up failed", exc_info=True)


def _default_executor_client(rt: Runtime) -> Any:
    from zcbot_core.tools.executor_client import ExecutorClient

    return ExecutorClient(rt.nc, rt.topo)


def _default_sandbox_schemas() -> list[dict[str, Any]]:
    from zcbot_core.tools.sandbox_schemas import SANDBOX_TOOL_SCHEMAS

    return list(SANDBOX_TOOL_SCHEMAS)


def _default_extend_toolbox(rt: Runtime, settings: RunnerSettings) -> Any:
    from zcbot_runner.host_tools import HostToolKit

    return HostToolKit(rt, settings)
