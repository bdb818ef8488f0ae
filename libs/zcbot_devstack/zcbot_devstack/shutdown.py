"""How `zcbot up` stops (issue 34): everything the stack started has stopped within `STOP_BUDGET`
of the signal, and it says what it is waiting for.

1. Every running service is told to stop (SIGTERM to its process group; a hosted one drains). The
   executor kills its background jobs first (`zcbot up` runs it with ZCBOT_BG_STOP_WITH_EXECUTOR:
   they end with the stack, recorded as stopped by shutdown, docs/decisions.md) and gives calls in
   flight a short grace (ZCBOT_EXECUTOR_DRAIN_GRACE_SECONDS, 4 s unless set).
2. Until `stop_timeout` (10 s), a line every few seconds names the services still draining; a second
   signal ends the wait.
3. What still runs is killed (a process's whole group; a hosted service's tasks), then the
   background jobs a killed executor could not stop, from its records (`zcbot_executor.background.stop_left_behind`),
   then whatever else this process started (`Launcher.close`), then PostgreSQL and NATS.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from zcbot_devstack.bootstrap import service_env
from zcbot_devstack.embedded import EmbeddedNats, EmbeddedPostgres
from zcbot_devstack.launch import Child, Launcher


class StoppingService(Protocol):
    """What the stop needs of one supervised service."""

    name: str
    proc: Child | None
    readers: list[threading.Thread]  # the threads copying its output

    @property
    def alive(self) -> bool: ...


class Stack(Protocol):
    """What the stop needs of a stack (`zcbot_devstack.stack.Stack`): its services, the
    launcher that started them, its embedded servers and its voice. A protocol, so the stack
    imports this module and not the other way round."""

    launcher: Launcher
    pg: EmbeddedPostgres | None
    nats: EmbeddedNats | None
    env: dict[str, str]
    stop_timeout: float
    force: bool

    @property
    def services(self) -> Sequence[StoppingService]: ...

    def say(self, text: str) -> None: ...

STOP_BUDGET = 15.0  # seconds from the signal until nothing the stack started runs
KILL_WAIT = 2.0  # how long killed services get to be gone
FIRST_WORD = 2.0  # the first "waiting for ..." line, this long after the signal
WORD_EVERY = 3.0  # then one every this many seconds


def stop_stack(stack: Stack) -> None:
    began = time.monotonic()
    stop_services(stack)
    stop_left_behind(stack)
    stack.launcher.close(keep=[server.pid for server in (stack.pg, stack.nats) if server is not None and server.pid])

    def left() -> float:  # each embedded server's share of what is left of the budget
        return max(1.0, min(5.0, (began + STOP_BUDGET - 1.0 - time.monotonic()) / 2))

    if stack.pg is not None:
        stack.say("stopping PostgreSQL")
        stack.pg.stop(timeout=left())
    if stack.nats is not None:
        stack.say("stopping NATS")
        stack.nats.stop(timeout=left())
    stack.say("stopped")


def stop_services(stack: Stack) -> None:
    """Steps 1-3 for the services: told to stop, awaited (saying which) until `stop_timeout` or a
    second signal, then killed."""
    began = time.monotonic()
    running = [s for s in stack.services if s.proc is not None]
    if any(s.alive for s in running):
        stack.say(f"stopping {', '.join(s.name for s in running if s.alive)}…")
    for svc in running:
        assert svc.proc is not None
        if svc.alive:
            stack.launcher.signal(svc.proc, signal.SIGTERM)
    deadline = began + stack.stop_timeout
    word_at = began + FIRST_WORD
    while any(s.alive for s in running) and not stack.force and (now := time.monotonic()) < deadline:
        if now >= word_at:
            waiting = ", ".join(s.name for s in running if s.alive)
            stack.say(f"waiting for {waiting} to stop ({deadline - now:.0f}s left; Ctrl-C again to stop now)")
            word_at = now + WORD_EVERY
        time.sleep(0.05)
    for svc in running:
        assert svc.proc is not None
        if svc.alive:
            stack.say(f"stopping {svc.name} now" if stack.force else
                      f"{svc.name} did not stop within {stack.stop_timeout:g}s; killing it")
        stack.launcher.signal(svc.proc, signal.SIGKILL)  # also whatever it left behind in its group
    killed_by = time.monotonic() + KILL_WAIT
    for svc in running:
        assert svc.proc is not None
        with contextlib.suppress(subprocess.TimeoutExpired):  # a hosted task stuck in a blocking call
            svc.proc.wait(max(0.0, killed_by - time.monotonic()))
        for reader in svc.readers:
            reader.join(timeout=max(0.1, killed_by - time.monotonic()))


def stop_left_behind(stack: Stack) -> None:
    """Background jobs the stack's executor recorded and did not stop (killed mid-drain, or crashed):
    killed from its records, recorded as stopped by shutdown."""
    if stack.launcher.mode == "process" or "executor" not in {s.name for s in stack.services} or not stack.env:
        return  # stand-in services (tests), or no executor of this stack ever ran
    from zcbot_core.platform.config import load_settings
    from zcbot_executor.background import stop_left_behind as stop_recorded
    from zcbot_executor.background.watch import jobs
    from zcbot_executor.config import ExecutorConfig, ExecutorSettings

    try:
        settings = load_settings(ExecutorSettings, environ=service_env("executor", stack.env))
        asyncio.run(stop_recorded(ExecutorConfig.from_settings(settings),
                                  lambda n: stack.say(f"stopping {jobs(n)} left by the executor…")))
    except Exception as exc:  # the rest of the shutdown goes on
        stack.say(f"could not stop the background jobs left by the executor: {exc}")
