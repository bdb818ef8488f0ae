"""The gateway's one hook API: background work that lives as long as the app (the SSE hub, the
channels' HTTP client) registers here instead of importing `app` or editing its lists by hand.

`add_startup_hook(app, fn)` runs `await fn(app)` once the runtime is open (registration order);
`add_shutdown_hook(app, fn)` runs it after `rt.stopping` is set, before the runtime closes
(reverse order, each bounded by `SHUTDOWN_HOOK_TIMEOUT`, a failing hook logged and skipped).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from fastapi import FastAPI

log = logging.getLogger(__name__)

Hook = Callable[[FastAPI], Awaitable[None]]
SHUTDOWN_HOOK_TIMEOUT = 10.0


def init_hooks(app: FastAPI) -> None:
    app.state.on_startup = []
    app.state.on_shutdown = []


def add_startup_hook(app: FastAPI, fn: Hook) -> None:
    """Run `await fn(app)` once the runtime is open (in registration order)."""
    app.state.on_startup.append(fn)


def add_shutdown_hook(app: FastAPI, fn: Hook) -> None:
    """Run `await fn(app)` after `rt.stopping` is set, before the runtime closes (reverse order)."""
    if fn not in app.state.on_shutdown:
        app.state.on_shutdown.append(fn)


async def run_startup_hooks(app: FastAPI) -> None:
    for fn in list(app.state.on_startup):
        await fn(app)


async def run_shutdown_hooks(app: FastAPI) -> None:
    for fn in reversed(app.state.on_shutdown):
        try:
            await asyncio.wait_for(fn(app), SHUTDOWN_HOOK_TIMEOUT)
        except Exception:
            log.exception("shutdown hook failed", extra={"hook": getattr(fn, "__qualname__", repr(fn))})
