"""Service plumbing every zcbot service shares (one home; it was hand-written per service).

- `instance_id()`: host-pid-random, the name a replica gives itself (run owner, lease owner).
- `TaskGroup`: background tasks kept alive until done, waited for or cancelled at drain.
- `wait_or_stop` / `periodic`: "do this every N seconds until told to stop".
- `PullWorker`: a JetStream pull consumer with bounded in-flight handlers and a drain.

Why the pull worker asks for one message per pull request: a request for a batch of N is answered as
soon as N messages are there or when it expires, and nats.py's `fetch(N)` returns only then, so a
message that arrived while the runner was waiting for a batch of 50 sat in the client until the
request's 1 s expiry (issue 21: runs posted < 0.5 s after the previous one waited up to 0.9 s,
Poisson-arrival bench p99 514 ms). A request for one message is answered the moment one is ready.
A backlog (the message's `num_pending` says more are waiting) is then taken in one request for
what is there (`_backlog`), so a burst still starts its runs together (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from nats.errors import TimeoutError as NatsTimeoutError

log = logging.getLogger(__name__)


def instance_id() -> str:
    """Unique per process and start: `<host>-<pid>-<6 hex>` (host cut to 40 characters)."""
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class TaskGroup:
    """Background tasks of a service: each one is kept referenced until it ends (asyncio holds only
    weak references), and drain can wait for them with a grace period and cancel the rest."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def __len__(self) -> int:
        return len(self._tasks)

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def tasks(self) -> set[asyncio.Task[Any]]:
        return set(self._tasks)

    async def wait(self, timeout: float | None) -> set[asyncio.Task[Any]]:
        """Wait up to `timeout` for every task; returns those still running."""
        if not self._tasks:
            return set()
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
        return pending

    async def cancel(self, wait: float | None = None) -> None:
        """Cancel every task and wait (up to `wait` seconds, None: until they end) for them to finish."""
        running = set(self._tasks)
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=wait)

    async def close(self, grace: float, cancel_wait: float = 2.0) -> None:
        """Drain: give the tasks `grace` seconds, then cancel what is left."""
        pending = await self.wait(grace)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=cancel_wait)


async def wait_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep `seconds` unless `stop` is set first; True when stopping."""
    try:
        await asyncio.wait_for(stop.wait(), timeout=max(seconds, 0.0))
    except asyncio.TimeoutError:
        return False
    return True


async def periodic(stop: asyncio.Event, interval: float | Callable[[], float], body: Callable[[], Awaitable[Any]],
                   what: str, first_now: bool = True) -> None:
    """Run `body` now (`first_now=False`: after one interval) and then every `interval` seconds until
    `stop` is set. A failing round is logged and the next one runs on time (a loop that died on one
    database error would stop for good)."""
    if not first_now and await wait_or_stop(stop, interval() if callable(interval) else interval):
        return
    while not stop.is_set():
        try:
            await body()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s failed", what)
        seconds = interval() if callable(interval) else interval
        if await wait_or_stop(stop, seconds):
            return


Handler = Callable[[Any], Awaitable[None]]
BACKLOG_BATCH = 50
# The backlog request's bound: it is answered from messages already there, so this is only reached
# when a late status from an expired request makes nats.py wait on (the 0.9 s hold, now this short).
BACKLOG_WAIT_SECONDS = 0.05


class PullWorker:
    """Takes messages from a bound pull subscription and runs `handler(msg)` for each in its own task,
    at most `max_in_flight` at once. The handler acks (or naks) its message; an exception it raises is
    logged. A ready message is taken the moment a handler slot is free (see the module docstring).

    Drain: `stop()` ends pulling (a message fetched meanwhile is `nak`ed, so another replica takes it
    at once), then `wait(grace)` for the handlers or `cancel()` them; `close()` unsubscribes."""

    def __init__(self, psub: Any, handler: Handler, max_in_flight: int, name: str, poll_seconds: float = 1.0) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self.psub = psub
        self.handler = handler
        self.max_in_flight = max_in_flight
        self.name = name
        self.poll_seconds = poll_seconds
        self.handlers = TaskGroup()
        self._messages: dict[asyncio.Task[Any], Any] = {}
        self._stop = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._loop: asyncio.Task[None] | None = None

    @property
    def in_flight(self) -> int:
        return len(self._messages)

    @property
    def free(self) -> int:
        return self.max_in_flight - len(self._messages)

    def start(self) -> None:
        self._loop = asyncio.create_task(self._pull(), name=f"{self.name}-pull")

    async def _pull(self) -> None:
        while not self._stop.is_set():
            if self.free <= 0:
                self._room.clear()
                await self._room.wait()  # set when a handler ends, or by stop()
                continue
            try:
                msgs = await self.psub.fetch(batch=1, timeout=self.poll_seconds)
                msgs += await self._backlog(msgs[-1] if msgs else None)
            except (NatsTimeoutError, asyncio.TimeoutError):
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._stop.is_set():
                    return
                log.warning("%s fetch failed", self.name, extra={"error": repr(exc)})
                await wait_or_stop(self._stop, 0.5)
                continue
            for msg in msgs:
                if self._stop.is_set():
                    await _quietly(msg.nak())
                    continue
                self._dispatch(msg)

    async def _backlog(self, last: Any) -> list[Any]:
        """Messages already waiting behind `last` (its `num_pending`), taken in one request while
        there is room: one pull per message cost the runner ~40 % more CPU per run under a burst
        (the runs then start one by one instead of together). Only a known backlog is asked for,
        so the request is answered at once from what is there and never waits for more."""
        waiting = int(last.metadata.num_pending or 0) if last is not None and last.metadata else 0
        want = min(waiting, self.free - 1, BACKLOG_BATCH)
        if want <= 0:
            return []
        try:
            return list(await self.psub.fetch(batch=want, timeout=BACKLOG_WAIT_SECONDS))
        except (NatsTimeoutError, asyncio.TimeoutError):  # another replica took them first
            return []
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # `last` is dispatched all the same; the next pull takes the rest
            log.warning("%s backlog fetch failed", self.name, extra={"error": repr(exc)})
            return []

    def _dispatch(self, msg: Any) -> None:
        task = self.handlers.spawn(self._run(msg), name=f"{self.name}-handler")
        self._messages[task] = msg
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._messages.pop(task, None)
        self._room.set()

    async def _run(self, msg: Any) -> None:
        try:
            await self.handler(msg)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s handler failed", self.name)

    async def stop(self, timeout: float | None = None) -> None:
        """Stop pulling: returns once the pull loop has ended, within one poll (its pending request is
        left to expire, so a message the server sends meanwhile is naked, not stranded in the client
        until its ack wait), or after `timeout` seconds by cancelling the loop."""
        self._stop.set()
        self._room.set()
        if self._loop is not None:
            bound = self.poll_seconds + 2.0 if timeout is None else timeout
            await asyncio.wait({self._loop}, timeout=bound)
            if not self._loop.done():
                self._loop.cancel()
                await asyncio.wait({self._loop})

    async def wait(self, grace: float) -> list[Any]:
        """Wait up to `grace` seconds for the handlers; returns the messages of those still running."""
        pending = await self.handlers.wait(grace)
        return [self._messages[task] for task in pending if task in self._messages]

    async def cancel(self) -> list[Any]:
        """Cancel the running handlers and wait for them; returns their messages (to `nak`)."""
        unfinished = dict(self._messages)
        await self.handlers.cancel()
        return list(unfinished.values())

    async def close(self) -> None:
        await _quietly(self.psub.unsubscribe())  # already gone after a reconnect: nothing to do


async def _quietly(aw: Awaitable[Any]) -> None:
    try:
        await aw
    except Exception:
        pass
