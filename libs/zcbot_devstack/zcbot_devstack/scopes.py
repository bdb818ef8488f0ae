"""Structured concurrency for the services `zcbot up` hosts in one event loop (`hosted`, issue 34).

A hosted service owns every task created while it runs: its own, its libraries' (uvicorn's server,
the NATS client's reader and pinger, the executor's sweepers), and theirs in turn. The loop's task
factory (`task_factory`) files each new task under the `ServiceScope` in the creating context
(`_SCOPE`, a context variable the service's main task starts with and every task it spawns
inherits), so what a process would have lost when it exited goes when the service ends:
- `SystemExit` or `KeyboardInterrupt` in any of its tasks (uvicorn exits when it cannot bind its
  port) ends that service alone, with the exit code its process would have had. Left alone, asyncio
  re-raises them out of the loop, which stopped every hosted service at once while the supervisor
  still believed them up.
- When its main task ends (stopped, failed, killed), the tasks it spawned are cancelled, so a
  restarted copy never runs beside its predecessor's leftovers.
"""

from __future__ import annotations

import asyncio
import contextvars
import signal
from collections.abc import Coroutine
from typing import Any

_SCOPE: contextvars.ContextVar[ServiceScope | None] = contextvars.ContextVar("zcbot_service_scope", default=None)
KILL_GRACE_SECONDS = 1.0  # a killed service's main task gets this long to unwind before all its tasks are cancelled


class ServiceExited(Exception):
    """Raised in place of a hosted task's `SystemExit`/`KeyboardInterrupt`: an ordinary exception, so
    the loop (shared with the other services) goes on; its service ends with `code`."""

    def __init__(self, code: int) -> None:
        super().__init__(f"the service exited with code {code}")
        self.code = code


def exit_code_of(exc: BaseException) -> int:
    """The code a process ends with on this exception reaching its top: `sys.exit(n)` -> n,
    `sys.exit()` -> 0, `sys.exit("text")` -> 1, Ctrl-C -> killed by SIGINT."""
    if isinstance(exc, KeyboardInterrupt):
        return -signal.SIGINT
    if isinstance(exc, SystemExit):
        if exc.code is None:
            return 0
        return exc.code if isinstance(exc.code, int) else 1
    return 1


class ServiceScope:
    """One hosted service's tasks and how it ended."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.tasks: set[asyncio.Task[Any]] = set()
        self.main: asyncio.Task[Any] | None = None
        self.exit_code: int | None = None  # set when one of its tasks "exited the process"

    def add(self, task: asyncio.Task[Any]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def exited(self, code: int) -> None:
        """A task of the service raised SystemExit/KeyboardInterrupt: the service ends with `code`."""
        if self.exit_code is None:
            self.exit_code = code
        if self.main is not None and not self.main.done():
            self.main.cancel()

    def kill(self) -> None:
        """As SIGKILL: cancel the main task now, and everything of the service if it has not ended soon."""
        if self.main is not None:
            self.main.cancel()
            self.main.get_loop().call_later(KILL_GRACE_SECONDS, self.cancel_all)

    def cancel_all(self) -> list[asyncio.Task[Any]]:
        """Cancel every task of the service but the current one; returns them."""
        current = asyncio.current_task()
        leftovers = [task for task in self.tasks if task is not current and not task.done()]
        for task in leftovers:
            task.cancel()
        return leftovers

    async def guard(self, coro: Coroutine[Any, Any, Any]) -> Any:
        try:
            return await coro
        except (SystemExit, KeyboardInterrupt) as exc:  # its process would have ended here
            self.exited(exit_code_of(exc))
            task = asyncio.current_task()
            if task is not None:  # whoever awaits it sees the error; nobody need: no "never retrieved" noise
                task.add_done_callback(lambda t: t.cancelled() or t.exception())
            raise ServiceExited(exit_code_of(exc)) from exc


def scope_context(scope: ServiceScope) -> contextvars.Context:
    """A context for a service's main task: `task_factory` files it, and all it spawns, under `scope`."""
    context = contextvars.copy_context()
    context.run(_SCOPE.set, scope)
    return context


def task_factory(loop: asyncio.AbstractEventLoop, coro: Any,
                 context: contextvars.Context | None = None) -> asyncio.Task[Any]:
    """The hosting loop's task factory: a task created in a service's context belongs to its scope."""
    scope = _SCOPE.get() if context is None else context.get(_SCOPE)
    inner = coro
    if scope is not None and asyncio.iscoroutine(coro):
        coro = scope.guard(coro)
    task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, context=context)
    if scope is not None:
        scope.add(task)
        if coro is not inner:  # cancelled before its first step: the wrapped coroutine never ran (no warning)
            task.add_done_callback(lambda _task: inner.close())
    return task
