"""`zcbot up`'s services in its own process: the default on one machine (issue 28, docs/decisions.md).

Why one process: the five services are one Python program's libraries five times over. Forked from
a fork server they still copied 24-54 MiB each of its pages on first write (reference counts, 3.11's
in-place bytecode specialisation, allocations into its free slots), and the server and `zcbot up`
were two more interpreters: 549 MiB PSS idle against 350. Hosted here they share one heap.
What it does not weaken: on one machine every service runs as the same user, and that user can read
every identity's secrets under ZCBOT_HOME (secrets.env, nats-credentials.json, the database's files)
whichever process holds them. The sandboxes are the boundary against the model, and they are the same
(the executor builds each sandbox's environment itself; nothing of this process's environment
passes). Deployments (deploy/, compose) keep one service per container with only its own secrets;
`zcbot up --separate` keeps one process per service here too.

Each service keeps what it had as a process: its own settings read from its own environment (not
this process's: `load_settings(environ=...)`), its own NATS identity and connection, database pool,
health/metrics port and `/readyz`. They run as tasks of one asyncio loop (uvloop) in a thread of
their own, since the main thread is the supervisor's (signals, readiness polls). A service's log
lines carry its name (`logs.current_service`) and reach the supervisor's printer with its prefix.
Each service owns the tasks it creates (`scopes`): a `SystemExit` in any of them ends that service
alone, and when a service ends its tasks are cancelled with it (issue 34).

`HostedService` is the supervisor's handle, with the `subprocess.Popen` surface `stack.Stack` uses
(`pid`, `returncode`, `poll`, `wait`, `stdout` None) plus `terminate` (what SIGTERM was: drain and
stop) and `kill` (cancel its tasks). Return codes: 0 after a stop, 1 after a failure (logged with its
traceback), 2 for a bad configuration, a `SystemExit`'s code (uvicorn's 3 for a port it cannot bind),
-9 for a kill, as a process's would be.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType

from zcbot_core.db.engine import share_engines
from zcbot_core.platform.config import ConfigError, load_settings
from zcbot_core.platform.logs import JsonFormatter, current_service, quiet_noisy_loggers, secret_values
from zcbot_core.platform.service import own_process_heap
from zcbot_devstack.scopes import ServiceScope, exit_code_of, scope_context, task_factory
from zcbot_devstack.services import BY_NAME

log = logging.getLogger(__name__)

Emit = Callable[[str, str], None]  # (service name, rendered line): the supervisor's printer
SUPERVISOR = "zcbot"


class _PrefixHandler(logging.Handler):
    """Every log record of the process, as the JSON line a service prints, to `emit` under the name
    of the service it comes from (its context), or the supervisor's."""

    def __init__(self, emit: Emit) -> None:
        super().__init__()
        self.emit_line = emit
        self.json = JsonFormatter(SUPERVISOR, secrets=[])
        self.setFormatter(self.json)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:  # as logging.Handler.emit: a bad record must not kill its caller
            self.handleError(record)
            return
        self.emit_line(current_service.get() or SUPERVISOR, line)


def _no_library_handlers() -> None:
    """LiteLLM gives its loggers a stderr handler of its own: their records reach the root's handler
    anyway (they propagate), so that one would print each line a second time, without a prefix."""
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        logger = logging.getLogger(name)
        if logger.propagate:
            logger.handlers[:] = []


class HostedService:
    """One hosted service: the `subprocess.Popen` surface the supervisor uses."""

    stdout = None  # its output reaches the printer through the log handler

    def __init__(self, name: str, host: ServicesHost) -> None:
        self.name = name
        self.pid = os.getpid()
        self.returncode: int | None = None
        self._host = host
        self._done = threading.Condition()
        self.stop_event: asyncio.Event | None = None
        self.scope = ServiceScope(name)  # its tasks (`scope.main` runs the service)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._done:
            while self.returncode is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(f"hosted {self.name}", timeout or 0.0)
                self._done.wait(left)
        return self.returncode

    def terminate(self) -> None:
        """Drain and stop, as on SIGTERM."""
        if self.stop_event is not None:
            self._host.call(self.stop_event.set)

    def kill(self) -> None:
        """Cancel the service's tasks, as SIGKILL would end its process."""
        self._host.call(self.scope.kill)

    def finish(self, code: int) -> None:
        with self._done:
            self.returncode = code
            self._done.notify_all()


class ServicesHost:
    """The loop thread the services run in, started with the first service."""

    def __init__(self, emit: Emit, level: str = "INFO", modules: Mapping[str, str] | None = None) -> None:
        self.emit = emit
        self.level = level
        # Each service's entry module (`SETTINGS`, `serve(settings, stop)`): the real services' by default.
        self.modules = dict(modules) if modules is not None else {name: spec.module for name, spec in BY_NAME.items()}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._handler: _PrefixHandler | None = None
        self._envs: dict[str, dict[str, str]] = {}  # each service's, as last started (for redaction)
        self._lock = threading.Lock()

    def preload(self, names: Iterable[str]) -> threading.Thread:
        """Import the services' entry modules in the background (while the database is prepared)."""
        def work() -> None:
            for name in names:
                with contextlib.suppress(Exception):  # the service's start reports it, with its name
                    importlib.import_module(self.modules[name])

        thread = threading.Thread(target=work, name="preload-services", daemon=True)
        thread.start()
        return thread

    def call(self, fn: Callable[[], object]) -> None:
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop already closed: nothing left to tell
                self._loop.call_soon_threadsafe(fn)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                try:
                    import uvloop

                    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
                except ImportError:  # non-Linux dev machines
                    loop = asyncio.new_event_loop()
                loop.set_task_factory(task_factory)  # every task belongs to the service that made it
                self._handler = _PrefixHandler(self.emit)
                root = logging.getLogger()
                root.handlers[:] = [self._handler]
                root.setLevel(self.level.upper())
                quiet_noisy_loggers()
                own_process_heap()  # each service's start freezes what it built, as in its own process
                share_engines()  # one database pool for the services (issue 43)
                self._thread = threading.Thread(target=loop.run_forever, name="services", daemon=True)
                self._thread.start()
                self._loop = loop
            return self._loop

    def start(self, name: str, env: Mapping[str, str]) -> HostedService:
        """Start service `name` with environment `env` (read for its settings only)."""
        handle = HostedService(name, self)
        env = dict(env)
        try:
            module = importlib.import_module(self.modules[name])
            settings = load_settings(module.SETTINGS, environ=env)
        except ConfigError as exc:
            self.emit(name, f"zcbot {name}: {exc}")
            handle.finish(2)
            return handle
        _no_library_handlers()
        loop = self._ensure_loop()
        assert self._handler is not None
        self._envs[name] = env
        self._handler.json.secrets = secret_values(*self._envs.values())  # its secrets are redacted too
        started = threading.Event()

        def schedule() -> None:
            handle.stop_event = asyncio.Event()
            context = scope_context(handle.scope)
            context.run(current_service.set, name)
            handle.scope.main = loop.create_task(self._run(handle, module, settings), context=context)
            started.set()

        loop.call_soon_threadsafe(schedule)
        started.wait()
        return handle

    async def _run(self, handle: HostedService, module: ModuleType, settings: object) -> None:
        assert handle.stop_event is not None
        scope = handle.scope
        code = 0
        try:
            try:
                await module.serve(settings, handle.stop_event)
            except asyncio.CancelledError:  # killed, or one of its tasks exited (`scope.exited`)
                code = -9
            except ConfigError as exc:
                self.emit(handle.name, f"zcbot {handle.name}: {exc}")
                code = 2
            except (SystemExit, KeyboardInterrupt) as exc:  # uvicorn exits on a port it cannot bind
                code = exit_code_of(exc)
            except BaseException:  # any failure ends this service (and it is restarted), never the others
                log.exception("%s failed", handle.name)
                code = 1
            if scope.exit_code is not None:
                code = scope.exit_code
            leftovers = scope.cancel_all()  # a process's tasks end with it: none outlives its service
            if leftovers:
                await asyncio.wait(leftovers, timeout=2.0)
        finally:  # also when a kill cancels the wait above
            handle.finish(code)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the loop once every service has ended; cancel what is left."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        def cancel_all() -> None:
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.call_later(0.5, loop.stop)

        self.call(cancel_all)
        thread.join(timeout)
        if not thread.is_alive():
            loop.close()
        logging.getLogger().handlers[:] = []
