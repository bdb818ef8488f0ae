"""Retrying one idempotent JetStream operation through a leader election or a lost connection.

The one home of the backoff loop the bus callers share (the topology declaration, the run request's
publish, the gateway's history reads): a deadline, a delay doubling up to a cap, a line per retry,
and the last error raised once the next wait would end past the deadline. Only the operation knows
which of its errors a retry can help with, so the caller says so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
Retryable = Callable[[BaseException], bool] | tuple[type[BaseException], ...]


def _retryable(exc: BaseException, retryable: Retryable) -> bool:
    return isinstance(exc, retryable) if isinstance(retryable, tuple) else retryable(exc)


async def retry_until(op: Callable[[float], Awaitable[T]], *, retryable: Retryable, deadline_seconds: float,
                      first_delay: float, max_delay: float, what: str, logger: logging.Logger = log,
                      level: int = logging.WARNING, extra: Mapping[str, Any] | None = None) -> T:
    """`op(remaining)`'s result, `op` called again after an error `retryable` accepts until the next
    wait would end past `deadline_seconds` from now; then, or on any other error, that error is raised.

    `remaining`: seconds left before the deadline, for an op that bounds its own wait by it.
    `what`, `logger`, `level`, `extra`: the retry line ("<what> failed (<error type>); retrying in
    <delay> s"), in the caller's logger so it is filtered with the caller's other lines.
    Only `Exception`s are retried: a cancellation always goes through at once.
    """
    loop = asyncio.get_running_loop()
    deadline, delay = loop.time() + deadline_seconds, first_delay
    while True:
        try:
            return await op(deadline - loop.time())
        except Exception as exc:
            if not _retryable(exc, retryable) or loop.time() + delay >= deadline:
                raise
            logger.log(level, "%s failed (%s); retrying in %.1f s", what, type(exc).__name__, delay,
                       extra={**(extra or {}), "error": repr(exc)})
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay)
