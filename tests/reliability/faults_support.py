"""Shared pieces of the fault tests (`test_faults_*.py`, ISSUE 12 item 1; docs/reliability.md).

- `harness` (fixture): builds the environment of a stack (fake LLM profile, short `ack_wait`,
  1 s SSE heartbeats) and starts each component either IN PROCESS (gateway / runner / executor on
  this test's event loop) or as a REAL PROCESS (`start_service`) that a test may kill -9, SIGTERM
  and start again. Tests may point the stack at a NATS or PostgreSQL of their own first
  (`harness.apply(ZCBOT_NATS_URL=...)`).
- `SseFollower`: an SSE client that behaves like a browser's EventSource: when the connection
  drops or ends without the run's `done`, it reconnects with `Last-Event-ID`.
- `assert_consistent`: the invariants every fault must leave intact — no task left in
  queued/running/cancelling, message idx contiguous (0..n-1), no duplicated message, every tool
  call answered exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.stack import FAKE_KEY_ENV, Stack, start_gateway, write_fake_profile
from tests.helpers.procs import ServiceProcess
from zcbot_core.config import Settings, get_settings
from zcbot_core.service import Runtime, close_runtime, open_runtime
from zcbot_fakellm import FakeLLM
from tests.helpers.db import db_rows
from tests.helpers.sse import sse_events
from tests.helpers.stack import fake_llm  # noqa: F401  (the fixture, shared)

ACK_WAIT_SECONDS = "3"


# ---- database checks -----------------------------------------------------------------------


def task_status(url: str, task_id: str) -> tuple[str, str | None, str | None]:
    return db_rows(url, "select run_status, run_owner, run_error from tasks where task_id=:t", t=task_id)[0]  # type: ignore[return-value]


def roles(url: str, task_id: str) -> list[str]:
    return [r[0] for r in db_rows(url, "select payload->>'role' from messages where task_id=:t order by idx", t=task_id)]


def assert_consistent(url: str) -> None:
    """The invariants after any fault, over every task of the database."""
    stuck = db_rows(url, "select task_id, run_status from tasks where run_status in ('waiting','queued','running','cancelling')")
    assert not stuck, f"tasks left active: {stuck}"
    rows = db_rows(url, "select task_id, idx, kind, payload::text from messages order by task_id, idx")
    by_task: dict[str, list[tuple[int, str, dict[str, Any]]]] = {}
    for task_id, idx, kind, payload in rows:
        by_task.setdefault(task_id, []).append((idx, kind, json.loads(payload)))
    for task_id, msgs in by_task.items():
        assert [m[0] for m in msgs] == list(range(len(msgs))), f"idx not contiguous in {task_id}: {[m[0] for m in msgs]}"
        for (_, _, a), (_, _, b) in zip(msgs, msgs[1:]):
            assert a != b, f"duplicated message in {task_id}: {a}"
        answered: dict[str, int] = {}
        asked: list[str] = []
        for _, _, p in msgs:
            if p.get("role") == "tool":
                answered[p.get("tool_call_id")] = answered.get(p.get("tool_call_id"), 0) + 1
            for tc in p.get("tool_calls") or []:
                asked.append(tc["id"])
        assert len(asked) == len(set(asked)), f"tool call ids repeated in {task_id}: {asked}"
        assert all(n == 1 for n in answered.values()), f"tool call answered twice in {task_id}: {answered}"
        assert set(answered) == set(asked), f"unanswered/unknown tool calls in {task_id}: {asked} vs {answered}"


# ---- SSE -----------------------------------------------------------------------------------


@dataclass
class SseFollower:
    """Follow one run's events like EventSource: reconnect with Last-Event-ID until its `done`."""

    base_url: str
    token: str
    task_id: str
    run_id: str
    events: list[dict[str, Any]] = field(default_factory=list)
    connections: int = 0
    errors: list[str] = field(default_factory=list)
    reconnect_delay: float = 0.2

    @property
    def last_id(self) -> int | None:
        ids = [e["id"] for e in self.events if "id" in e]
        return ids[-1] if ids else None

    @property
    def done(self) -> dict[str, Any] | None:
        for e in self.events:
            if e["event"] == "done":
                return e
        return None

    def names(self) -> list[str]:
        return [e["event"] for e in self.events]

    async def run(self, timeout: float = 60.0) -> list[dict[str, Any]]:
        url = f"/v1/tasks/{self.task_id}/events?run_id={self.run_id}"
        async with asyncio.timeout(timeout):
            while self.done is None:
                headers = {"Authorization": f"Bearer {self.token}"}
                if self.last_id is not None:
                    headers["Last-Event-ID"] = str(self.last_id)
                try:
                    await self._read(url, headers)
                except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                    self.errors.append(f"{exc.__class__.__name__}: {exc}")
                if self.done is None:
                    await asyncio.sleep(self.reconnect_delay)
        return self.events

    async def _read(self, url: str, headers: dict[str, str]) -> None:
        async with httpx.AsyncClient(base_url=self.base_url, timeout=httpx.Timeout(30, connect=2)) as client:
            async with client.stream("GET", url, headers=headers) as resp:
                resp.raise_for_status()
                self.connections += 1
                async for event in sse_events(resp):
                    self.events.append(event)
                    if event["event"] == "done":
                        return


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
