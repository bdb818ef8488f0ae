"""Shared pieces of the fault tests (`test_faults_*.py`, ISSUE 12 item 1; docs/reliability.md).

- `harness` (fixture): builds the environment of a stack (fake LLM profile, short `ack_wait`,
  1 s SSE heartbeats) and starts each component either IN PROCESS (gateway / runner / executor on
  this test's event loop) or as a REAL PROCESS (`start_service`) that a test may kill -9, SIGTERM
  and start again. Tests may point the stack at a NATS or PostgreSQL of their own first
  (`harness.apply(ZCBOT_NATS_URL=...)`).
- `SseFollower` (tests/helpers/sse.py): an SSE client that behaves like a browser's EventSource: when the connection
  drops or ends without the run's `done`, it reconnects with `Last-Event-ID`.
- `assert_consistent` (tests/helpers/db.py): the invariants every fault must leave intact — no task left in
  queued/running/cancelling, message idx contiguous (0..n-1), no duplicated message, every tool
  call answered exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.db import assert_consistent, db_rows, roles, task_status  # noqa: F401  (the suite imports them from here)
from tests.helpers.procs import ServiceProcess
from tests.helpers.sse import SseFollower
from tests.helpers.stack import (
    FAKE_KEY_ENV,
    Stack,
    fake_llm,  # noqa: F401  (the fixture, shared)
    start_gateway,
    write_fake_profile,
)
from zcbot_core.platform.config import Settings, get_settings
from zcbot_core.platform.service import Runtime, close_runtime, open_runtime
from zcbot_fakellm import FakeLLM

ACK_WAIT_SECONDS = "3"


# ---- the harness ---------------------------------------------------------------------------


@dataclass
class _InProcess:
    name: str
    stop: Callable[[], Awaitable[None]]
    service: Any = None  # RunnerService / ExecutorService (None for the gateway)


class Harness:
    """Starts the stack's components in process or as real processes (see the module docstring)."""

    def __init__(self, env: dict[str, str], fake: FakeLLM, start_service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.env = env
        self.fake = fake
        self._start_service = start_service
        self._monkeypatch = monkeypatch
        self.in_process: list[_InProcess] = []
        self.procs: list[ServiceProcess] = []
        self.settings = self.apply()

    def apply(self, **overrides: str) -> Settings:
        """Set env keys (for in-process parts, which read os.environ, and for later processes)."""
        self.env.update(overrides)
        for key, value in self.env.items():
            self._monkeypatch.setenv(key, value)
        get_settings.cache_clear()
        self.settings = Settings()
        return self.settings

    @property
    def db_url(self) -> str:
        return self.env["ZCBOT_DB_URL"]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.env['ZCBOT_HTTP_PORT']}"

    def stack(self) -> Stack:
        """The e2e `Stack` helper (login/create_task/post/events) bound to this stack's gateway."""
        return Stack(settings=self.settings, base_url=self.base_url, fake=self.fake, env=self.env)

    def follower(self, token: str, task_id: str, run_id: str) -> SseFollower:
        return SseFollower(self.base_url, token, task_id, run_id)

    # ---- real processes --------------------------------------------------------------------
    def process(self, name: str, **env: str) -> ServiceProcess:
        """Start `zcbot <name>` as a child process (not waiting for health)."""
        svc = self._start_service(name, {**self.env, **env}, wait=False)
        self.procs.append(svc)
        return svc

    # ---- in process ------------------------------------------------------------------------
    async def gateway(self) -> _InProcess:
        task, server = await start_gateway(self.settings, int(self.env["ZCBOT_HTTP_PORT"]))

        async def stop() -> None:
            server.should_exit = True  # type: ignore[attr-defined]
            await asyncio.wait({task}, timeout=15)

        return self._keep(_InProcess("gateway", stop))

    async def runner(self) -> _InProcess:
        from zcbot_runner.service import RunnerService

        rt = await open_runtime("runner", self.settings)
        svc = RunnerService()
        await svc.start(rt)

        async def stop() -> None:
            await svc.drain()
            await close_runtime(rt)

        return self._keep(_InProcess("runner", stop, svc))

    async def executor(self) -> _InProcess:
        from zcbot_executor.service import ExecutorService

        rt: Runtime = await open_runtime("executor", self.settings, use_db=False)
        svc = ExecutorService(self.settings)
        await svc.start(rt)

        async def stop() -> None:
            await svc.drain()
            await close_runtime(rt)

        return self._keep(_InProcess("executor", stop, svc))

    def _keep(self, part: _InProcess) -> _InProcess:
        self.in_process.append(part)
        return part

    async def stop(self, part: _InProcess) -> None:
        if part in self.in_process:
            self.in_process.remove(part)
            await part.stop()

    async def aclose(self) -> None:
        for part in reversed(list(self.in_process)):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.stop(part), 30)


@pytest.fixture
async def harness(settings_env: dict[str, str], tmp_path: Path, fake_llm: FakeLLM, start_service: Any,
                  monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    models = tmp_path / "models"
    write_fake_profile(models, fake_llm.base_url)
    env = {**settings_env, "ZCBOT_MODELS_DIR": str(models), "ZCBOT_DEFAULT_MODEL": "fake", FAKE_KEY_ENV: "sk-fake",
           "ZCBOT_ACK_WAIT_SECONDS": ACK_WAIT_SECONDS, "ZCBOT_SSE_HEARTBEAT_SECONDS": "1"}
    h = Harness(env, fake_llm, start_service, monkeypatch)
    try:
        yield h
    finally:
        await h.aclose()
        get_settings.cache_clear()
