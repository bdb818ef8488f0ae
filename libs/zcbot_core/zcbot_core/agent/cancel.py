"""Cancellation that preempts whatever the run is waiting on (an LLM stream, a tool call).

`CancelToken.race(coro)` runs the awaitable as a task and cancels it the moment the token fires,
so a silent thinking model or a long tool call does not delay the cancel until its next chunk.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from zcbot_core.errors import ZcbotError

T = TypeVar("T")


class RunCancelled(ZcbotError):
    code = "run_cancelled"
    http_status = 409

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CancelToken:
    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.reason = "user"

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self, reason: str = "user") -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    def check(self) -> None:
        if self._event.is_set():
            raise RunCancelled(self.reason)

    async def race(self, awaitable: Awaitable[T]) -> T:
        if self._event.is_set():
            if asyncio.iscoroutine(awaitable):
                awaitable.close()  # never started: close it so it is not reported as un-awaited
            raise RunCancelled(self.reason)
        work = asyncio.ensure_future(awaitable)
        waiter = asyncio.ensure_future(self._event.wait())
        try:
            done, _ = await asyncio.wait({work, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            work.cancel()
            raise
        finally:
            waiter.cancel()
        if work in done:
            return work.result()
        work.cancel()
        try:
            await work
        except (asyncio.CancelledError, Exception):
            pass
        raise RunCancelled(self.reason)
