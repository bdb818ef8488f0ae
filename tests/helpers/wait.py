"""Polling with a deadline: the one `wait_for` of the test suites."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


async def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.1,
                   what: str = "condition") -> Any:
    """Poll `predicate` (sync or async) until it returns something truthy; return that value.

    Raises AssertionError naming `what` once `timeout` seconds have passed, so every wait is bounded."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if loop.time() >= deadline:
            raise AssertionError(f"{what} not reached within {timeout:g} s")
        await asyncio.sleep(interval)
