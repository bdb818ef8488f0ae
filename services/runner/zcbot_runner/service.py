"""Runner service: pulls run requests with bounded concurrency, listens for cancels, reaps lost runs."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from typing import Any

from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import ConsumerConfig

from zcbot_core.bus import BusDecodeError, CancelRequest, decode
from zcbot_core.bus.topology import max_deliveries_advisory, runs_consumer_config
from zcbot_core.service import Runtime, stream_limits
from zcbot_runner import metrics
from zcbot_runner.execution import RunExecutor
from zcbot_runner.reaper import Reaper, drop_exhausted, register_liveness

log = logging.getLogger(__name__)
DRAIN_GRACE_SECONDS = 20.0


def new_runner_id() -> str:
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class RunnerService:
    def __init__(self, executor_client_factory: Any = None, sandbox_schemas: list[dict[str, Any]] | None = None,
                 extend_toolbox: Any = None) -> None:
        self.runner_id = new_runner_id()
        self._executor_client_factory = executor_client_factory
        self._sandbox_schemas = sandbox_schemas
        self._extend_toolbox = extend_toolbox
        self._tasks: set[asyncio.Task[None]] = set()
        self._pull_task: asyncio.Task[None] | None = None
        self._stop_pulling = asyncio.Event()
        self._background: list[asyncio.Task[None]] = []

    async def start(self, rt: Runtime) -> None:
        self.rt = rt
        client = self._executor_client_factory(rt) if self._executor_client_factory else _default_executor_client(rt)
        schemas = self._sandbox_schemas if self._sandbox_schemas is not None else _default_sandbox_schemas()
        extend = self._extend_toolbox if self._extend_toolbox is not None else _default_extend_toolbox(rt)
        self.executor = RunExecutor(rt, self.runner_id, client, schemas, extend)
        await _warm_llm_client(rt)
        self.slots = asyncio.Semaphore(rt.settings.zcbot_runner_concurrency)
        self._cancel_sub = await rt.nc.subscribe(rt.topo.cancel_wildcard(), cb=self._on_cancel)
        config: ConsumerConfig = runs_consumer_config(rt.topo, stream_limits(rt.settings))
        self.psub = await rt.js.pull_subscribe_bind(durable=config.durable_name, stream=rt.topo.runs_stream)
        self._pull_task = asyncio.create_task(self._pull_loop())
        self._background.append(asyncio.create_task(register_liveness(rt, self.runner_id, self._stop_pulling)))
        self._exhausted_sub = await rt.nc.subscribe(max_deliveries_advisory(rt.topo), cb=self._on_exhausted,
                                                    queue=rt.topo.runner_advisories_queue_group)
        self._background.append(asyncio.create_task(Reaper(rt, self.runner_id, self._executing).loop(self._stop_pulling)))
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

    async def _pull_loop(self) -> None:
        while not self._stop_pulling.is_set():
            free = self.slots._value  # noqa: SLF001 - how many runs this process can still take
            if free <= 0:
                await asyncio.sleep(0.05)
                continue
            try:
                msgs = await self.psub.fetch(batch=min(free, 50), timeout=1.0)
            except (NatsTimeoutError, asyncio.TimeoutError):
                continue
            except Exception as exc:
                if self._stop_pulling.is_set():
                    break
                log.warning("fetch failed", extra={"error": repr(exc)})
                await asyncio.sleep(0.5)
                continue
            for msg in msgs:
                if self._stop_pulling.is_set():
                    await msg.nak()
                    continue
                await self.slots.acquire()
                task = asyncio.create_task(self._handle(msg))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _handle(self, msg: Any) -> None:
        metrics.ACTIVE_RUNS.inc()
        try:
            await self.executor.handle(msg)
        except Exception:
            log.exception("run handling failed")
        finally:
            metrics.ACTIVE_RUNS.dec()
            self.slots.release()

    async def drain(self) -> None:
        """Stop pulling, hand unfinished runs back (nak) so another runner resumes them at once."""
        self._stop_pulling.set()
        if self._pull_task is not None:
            await asyncio.wait({self._pull_task}, timeout=3)
        for active in list(self.executor.active.values()):
            active.token.cancel("shutdown")
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=DRAIN_GRACE_SECONDS)
        for task in self._background:
            task.cancel()
        await self._cancel_sub.unsubscribe()
        try:
            await self._exhausted_sub.unsubscribe()
        except Exception:
            pass
        try:
            await self.psub.unsubscribe()
        except Exception:  # already closed by a reconnect
            pass


async def _warm_llm_client(rt: Runtime) -> None:
    """LiteLLM's first call loads tokenizers and the cost map: done before pulling the first run."""
    from zcbot_core.llm.client import warm_up
    from zcbot_core.llm.profiles import get_profile

    try:
        profile = get_profile(rt.settings, None)
    except Exception:  # a misconfigured default profile is reported by the run that uses it
        return
    await asyncio.to_thread(warm_up, profile)


def _default_executor_client(rt: Runtime) -> Any:
    from zcbot_core.tools.executor_client import ExecutorClient

    return ExecutorClient(rt.nc, rt.topo)


def _default_sandbox_schemas() -> list[dict[str, Any]]:
    from zcbot_core.tools.sandbox_schemas import SANDBOX_TOOL_SCHEMAS

    return list(SANDBOX_TOOL_SCHEMAS)


def _default_extend_toolbox(rt: Runtime) -> Any:
    from zcbot_runner.host_tools import extend_run

    return extend_run
