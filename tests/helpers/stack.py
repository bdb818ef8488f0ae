"""An in-process stack for end-to-end tests: gateway (real uvicorn), runner(s), executor, fake LLM.

Every service is the real one, talking over the real NATS and PostgreSQL of the root fixtures;
the only fake is the LLM (reached by LiteLLM through `api_base`).

The fixtures here (`fake_llm`, `strict_fake_llm`, `bare_stack`, `stack`) are made available to a suite by importing
them into its conftest (e2e, agent, channels, providers, security do); the helpers are
imported by the tests that use them. `open_stack` is the stack itself, for a suite that keeps one
per module (the browser tests).

One stack per module (a stack costs seconds to start and to drain): `module_stack` is the full stack
(one runner) shared by a module's tests; `shared_stack` is one test's view of it, isolated by its
own users (`login("alice")` logs in a user unique to the test: `stack.user_id("alice")` names it)
and tasks, with a fake model wiped of scripts and recorded requests; at the test's end its runs
are cancelled and the stack waits until no run is active. A module opts in with

    @pytest.fixture
    def stack(shared_stack: Stack) -> Stack:
        return shared_stack

and its tests that change the stack itself (settings, runners) keep `bare_stack`, their own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.db import db_rows_async
from tests.helpers.sse import sse_events
from tests.helpers.wait import wait_for
from zcbot_core.platform.config import Settings, get_settings
from zcbot_core.platform.service import close_runtime, open_runtime, serve_http
from zcbot_fakellm import FakeLLM

FAKE_KEY_ENV = "ZCBOT_FAKE_LLM_API_KEY"


def write_fake_profile(models_dir: Path, base_url: str, name: str = "fake", **extra: Any) -> None:
    models_dir.mkdir(parents=True, exist_ok=True)
    lines = ["model: openai/fake-model", f"api_base: {base_url}", f"api_key_env: {FAKE_KEY_ENV}",
             "max_context: 64000", "reliable_context: 32000", "max_output: 2048", "parallel_tools: true",
             "max_iterations: 30", "pricing: {input_per_mtok: 1.0, output_per_mtok: 2.0, cached_input_per_mtok: 0.5}"]
    lines += [f"{k}: {json.dumps(v)}" for k, v in extra.items()]
    (models_dir / f"{name}.yaml").write_text("\n".join(lines) + "\n")


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    # Strict: a request a real provider would refuse (unpaired tool calls, DeepSeek's reasoning rule,
    # unknown parameters) gets that provider's 400 here too.
    fake = FakeLLM(strict=True)
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
async def strict_fake_llm(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeLLM]:
    """A fake LLM in strict mode (refuses what providers refuse), its key in the env."""
    monkeypatch.setenv(FAKE_KEY_ENV, "sk-fake")
    fake = FakeLLM(strict=True)
    await fake.start()
    yield fake
    await fake.stop()


@dataclass
class Stack:
    settings: Settings
    base_url: str
    fake: FakeLLM
    runners: list[Any] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    closers: list[Any] = field(default_factory=list)
    user_suffix: str = ""
    """Appended to every user id `login` is given: a test's own users on a shared stack."""
    tokens: list[str] = field(default_factory=list)
    """The tokens `login` handed out (a shared stack's view cancels their runs at the test's end)."""

    def user_id(self, name: str) -> str:
        """The user id `login(name)` logs in (`name` itself on a stack of the test's own)."""
        return f"{name}{self.user_suffix}"

    def client(self, token: str | None = None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=30)

    async def login(self, user_id: str) -> str:
        async with self.client() as c:
            r = await c.post("/v1/auth/login", json={"user_id": self.user_id(user_id),
                                                     "platform_key": self.settings.platform_key})
            r.raise_for_status()
            token: str = r.json()["token"]
            self.tokens.append(token)
            return token

    async def create_task(self, token: str, name: str, **extra: Any) -> dict[str, Any]:
        async with self.client(token) as c:
            r = await c.post("/v1/tasks", json={"name": name, **extra})
            assert r.status_code == 201, r.text
            return r.json()

    async def post(self, token: str, task_id: str, content: str, **extra: Any) -> httpx.Response:
        async with self.client(token) as c:
            return await c.post(f"/v1/tasks/{task_id}/messages", json={"content": content, **extra})

    async def events(self, token: str, url: str, headers: dict[str, str] | None = None,
                     timeout: float = 30.0, stop_after: int | None = None) -> list[dict[str, Any]]:
        """Read an SSE stream until it closes; each item: {id, event, data}."""
        out: list[dict[str, Any]] = []
        async with self.client(token) as c:
            async with asyncio.timeout(timeout):
                async with c.stream("GET", url, headers=headers or {}) as r:
                    assert r.status_code == 200, await r.aread()
                    assert r.headers["x-accel-buffering"] == "no"
                    async for event in sse_events(r):
                        out.append(event)
                        if stop_after is not None and len(out) >= stop_after:
                            return out
        return out

    async def post_stream(self, token: str, task_id: str, content: str, timeout: float = 30.0,
                          **extra: Any) -> tuple[httpx.Response, list[dict[str, Any]]]:
        """POST a message asking for the event stream (`Accept: text/event-stream`): the response and,
        when it is a stream, its events until it closes."""
        out: list[dict[str, Any]] = []
        async with self.client(token) as c, asyncio.timeout(timeout):
            async with c.stream("POST", f"/v1/tasks/{task_id}/messages", json={"content": content, **extra},
                                headers={"Accept": "text/event-stream"}) as r:
                if r.headers.get("content-type", "").startswith("text/event-stream"):
                    out = [event async for event in sse_events(r)]
                else:
                    await r.aread()
        return r, out

    async def add_runner(self) -> Any:
        from zcbot_runner.service import RunnerService

        rt = await open_runtime("runner", self.settings)
        svc = RunnerService()
        await svc.start(rt)
        self.runners.append((svc, rt))
        return svc

    async def stop_runner(self, svc: Any, hand_back: bool = True) -> None:
        for i, (s, rt) in enumerate(self.runners):
            if s is svc:
                await s.drain()
                await close_runtime(rt)
                self.runners.pop(i)
                return

    async def settle(self, timeout: float = 30.0) -> None:
        """Cancel the active runs of the users this view logged in, then wait until no run of the
        stack's database is active (a shared stack hands the next test an idle runner)."""
        from zcbot_core.runstate import ACTIVE

        for token in self.tokens:
            async with self.client(token) as c:
                r = await c.get("/v1/tasks", params={"run_status": ",".join(ACTIVE), "page_size": 100})
                for task in r.json().get("items", []) if r.status_code == 200 else []:
                    await c.post(f"/v1/tasks/{task['task_id']}/cancel")

        async def idle() -> bool:
            rows = await db_rows_async(self.settings.zcbot_db_url,
                                       "select count(*) from tasks where run_status = any(%s)", list(ACTIVE))
            return rows[0][0] == 0

        await wait_for(idle, timeout, interval=0.05, what="every run of the shared stack ended")


async def start_gateway(settings: Settings, port: int) -> tuple[Any, Any]:
    from zcbot_gateway.app import create_app

    app = create_app(settings)
    task, server = await serve_http(app, "127.0.0.1", port, lifespan="on")
    for _ in range(200):
        if getattr(server, "started", False):
            break
        await asyncio.sleep(0.025)
    return task, server


@asynccontextmanager
async def open_stack(settings_env: dict[str, str], setenv: Callable[[str, str], None], tmp_path: Path,
                     fake_llm: FakeLLM) -> AsyncIterator[Stack]:
    """Gateway + executor in process, no runner; `setenv` applies the environment (monkeypatch)."""
    models = tmp_path / "models"
    write_fake_profile(models, fake_llm.base_url)
    env = {**settings_env, "ZCBOT_MODELS_DIR": str(models), "ZCBOT_DEFAULT_MODEL": "fake", FAKE_KEY_ENV: "sk-fake",
           "ZCBOT_ACK_WAIT_SECONDS": "3", "ZCBOT_SSE_HEARTBEAT_SECONDS": "1"}
    for key, value in env.items():
        setenv(key, value)
    get_settings.cache_clear()  # code that reads the process's settings agrees with this stack's
    settings = Settings()
    port = int(env["ZCBOT_HTTP_PORT"])
    stack = Stack(settings=settings, base_url=f"http://127.0.0.1:{port}", fake=fake_llm)
    # Executor (in-process, real bwrap sandboxes).
    from zcbot_executor.service import ExecutorService

    ex_rt = await open_runtime("executor", settings, use_db=False)
    executor = ExecutorService(settings)
    await executor.start(ex_rt)
    stack.env = env
    gw_task, gw_server = await start_gateway(settings, port)
    try:
        yield stack
    finally:
        gw_server.should_exit = True
        await asyncio.wait({gw_task}, timeout=15)
        for svc, rt in list(stack.runners):
            await svc.drain()
            await close_runtime(rt)
        await executor.drain()
        await close_runtime(ex_rt)
        get_settings.cache_clear()  # the next reader gets the environment restored after this stack


@pytest.fixture
async def bare_stack(settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                     fake_llm: FakeLLM) -> AsyncIterator[Stack]:
    """Gateway + executor in process, no runner (tests add in-process or subprocess runners)."""
    async with open_stack(settings_env, monkeypatch.setenv, tmp_path, fake_llm) as stack:
        yield stack


@pytest.fixture
async def stack(bare_stack: Stack) -> AsyncIterator[Stack]:
    """The full in-process stack with one runner."""
    await bare_stack.add_runner()
    yield bare_stack


@pytest.fixture(scope="module")
async def module_stack(module_settings_env: dict[str, str],
                       tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    """The full in-process stack (one runner) shared by a module's tests; its own database, bus
    prefix and fake model. Tests use it through `shared_stack`."""
    fake = FakeLLM(strict=True)
    await fake.start()
    try:
        with pytest.MonkeyPatch.context() as mp:
            async with open_stack(module_settings_env, mp.setenv, tmp_path_factory.mktemp("stack"), fake) as shared:
                await shared.add_runner()
                yield shared
    finally:
        await fake.stop()
        get_settings.cache_clear()


@pytest.fixture
async def shared_stack(module_stack: Stack) -> AsyncIterator[Stack]:
    """This test's view of the module's stack: its own users (see `Stack.user_id`), a fake model
    without earlier tests' scripts and requests; its runs are ended before the next test."""
    await module_stack.settle()
    module_stack.fake.clear_scripts()
    module_stack.fake.clear_requests()
    module_stack.fake.rejected.clear()
    view = dataclasses.replace(module_stack, user_suffix=f"-{secrets.token_hex(3)}", tokens=[])
    try:
        yield view
    finally:
        await view.settle()
