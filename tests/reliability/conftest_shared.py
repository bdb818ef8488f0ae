"""Helpers shared by the reliability tests (load, fuzz, escapes, auth matrix).

Not a conftest (another suite owns `tests/reliability/conftest.py`): test modules import what they
use, e.g. `from tests.reliability.conftest_shared import settings_env  # noqa: F401`.

- `settings_env` (fixture override): the root fixture's env plus per-test extras, given either by
  a module attribute `EXTRA_ENV = {...}` or by `@pytest.mark.parametrize("settings_env", [{...}],
  indirect=True)`. The in-process stack (`tests.helpers.stack.bare_stack`) exports the result to
  os.environ before building `Settings`, so executor-only knobs (ZCBOT_SANDBOX_TMP_MB, ...) work too.
(The shared `bearer`, `wait_for` and the database helpers live in tests/helpers/.)
- `LLMGate(fake)`: holds every chat completion of the fake LLM until `open()` — runs stay active
  for as long as a test needs, so caps and 429s can be asserted exactly instead of racing a timer.
- `service_errors(caplog)`: ERROR+ records logged by zcbot loggers (services run in process).
- `running_app(settings)`: a gateway app with its lifespan entered, behind an ASGI httpx client.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from zcbot_core.platform.config import Settings
from zcbot_core.runstate import ACTIVE as ACTIVE_RUN_STATUSES  # noqa: F401  (re-exported to the load tests)

ZCBOT_LOGGERS = ("zcbot_core", "zcbot_gateway", "zcbot_runner", "zcbot_executor", "zcbot_scheduler",
                 "zcbot_channels", "zcbot")


@pytest.fixture
def settings_env(settings_env: dict[str, str], request: pytest.FixtureRequest) -> dict[str, str]:
    extra = dict(getattr(request.module, "EXTRA_ENV", {}) or {})
    extra.update(getattr(request, "param", None) or {})
    return {**settings_env, **extra}


class LLMGate:
    """Hold the fake LLM's chat completions until `open()` (in-process FakeLLM only)."""

    def __init__(self, fake: Any) -> None:
        self.fake = fake
        self.event = asyncio.Event()
        self.waiting = 0
        self._orig = fake._chat_completions

        async def gated(req: Any, conn: Any) -> bool:
            self.waiting += 1
            try:
                await self.event.wait()
            finally:
                self.waiting -= 1
            return await self._orig(req, conn)

        fake._chat_completions = gated

    def open(self) -> None:
        self.event.set()

    def restore(self) -> None:
        self.event.set()
        self.fake._chat_completions = self._orig


def service_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """ERROR and worse records from the services' loggers (as `logger: message` lines)."""
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records
            if r.levelno >= logging.ERROR and r.name.startswith(ZCBOT_LOGGERS)]


async def gather_limited(factories: Iterable[Callable[[], Awaitable[Any]]], limit: int = 32) -> list[Any]:
    """Run coroutine factories concurrently, at most `limit` at a time, results in order."""
    sem = asyncio.Semaphore(limit)

    async def one(factory: Callable[[], Awaitable[Any]]) -> Any:
        async with sem:
            return await factory()

    return list(await asyncio.gather(*(one(f) for f in factories)))


@asynccontextmanager
async def running_app(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The real gateway app (lifespan entered: NATS + DB) behind an in-process ASGI client."""
    from zcbot_gateway.app import create_app

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test", timeout=30) as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


