"""`zcbot up`'s fork server: one process imports the libraries every service shares, then forks each
service from itself, so their pages are shared copy-on-write (issue 28: five interpreters each
importing pydantic, SQLAlchemy, FastAPI, NATS, and the runner LiteLLM, were ~470 MiB of duplicates).

The supervisor (`stack.Stack`) starts the server as a child in its own process group, with the
environment every service may hold (no secret: `zygote_env`), and asks it for each service over a
SOCK_SEQPACKET socket, handing it the write end of the service's output pipe and the read end of a
pipe carrying the service's environment. The server forks at once and never reads that environment:
the child reads it, so the server (and every later sibling) holds no service's secrets.

The child: own process group (as `Popen(process_group=0)`), `PR_SET_PDEATHSIG` SIGKILL towards the
server (which has it towards the supervisor), stdin /dev/null, stdout+stderr on the pipe, every other
descriptor closed, `os.environ` = what the preloaded imports set by default + its environment; then it
unwinds out of the server's loop and runs `zcbot <name>` as a fresh `python -m zcbot_devstack.cli <name>`
would. The server reaps its children and reports each exit (`os.waitstatus_to_exitcode`, so a signal is
negative as in `Popen.returncode`); `forked.ForkedProcess` is the supervisor's handle. When the
supervisor's socket closes, the server SIGKILLs what is left and exits.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import signal
import socket

# Imported before forking: what the services share (zcbot_core and the third-party stacks, including
# what uvicorn and SQLAlchemy import when they start). The services' own packages are not, so each
# keeps only its own metrics in its registry. A module that fails to import is skipped (the service
# importing it then fails as it would without the server).
PRELOAD_ALL = (
    "zcbot_devstack.cli", "zcbot_core.platform.service", "zcbot_core.bus", "zcbot_core.db.engine", "zcbot_core.accounts.auth",
    "zcbot_core.runstate.submit", "zcbot_core.runstate.claim", "zcbot_core.runstate.transitions",
    "zcbot_core.workspace.memory", "zcbot_core.workspace.shortcuts", "zcbot_core.schedules", "zcbot_core.workspace.tasks", "zcbot_core.safe_fs",
    "zcbot_core.channels.conversation", "zcbot_core.platform.worker", "zcbot_core.quota", "zcbot_core.accounts.usage",
    "uvicorn", "uvicorn.protocols.http.httptools_impl", "uvicorn.protocols.websockets.websockets_sansio_impl",
    "uvicorn.loops.uvloop", "fastapi", "httpx", "httpcore", "h11", "aiohttp", "psycopg",
    "sqlalchemy.dialects.postgresql.psycopg", "pydantic.v1", "cryptography", "jwt", "yaml", "croniter",
)
PRELOAD_RUNNER = ("zcbot_core.llm.client", "zcbot_core.agent.loop")
CTL_FD_ENV = "ZCBOT_FORKSERVER_FD"
PRELOAD_ENV = "ZCBOT_FORKSERVER_PRELOAD"  # comma-separated (not argv: `ps` shows the command line)
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15


def preload_modules(names: list[str]) -> tuple[str, ...]:
    """The modules to import before forking the services `names` (LiteLLM only with the runner)."""
    return PRELOAD_ALL + (PRELOAD_RUNNER if "runner" in names else ())


def _arm_death_signal_and_name(parent: int, service: str) -> None:
    """SIGKILL when the server dies; `zcbot-<service>` as the process name (ps -o comm, top, psutil's
    name(): the command line stays the server's, which every service shares)."""
    from zcbot_devstack.embedded.process import _load_libc

    libc = _load_libc()
    if libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        libc.prctl(_PR_SET_NAME, f"zcbot-{service}"[:15].encode(), 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def _become_service(ctl: socket.socket, service: str, out_fd: int, env_fd: int, import_env: dict[str, str]) -> None:
    """In the forked child: detach from the server's state, take the service's descriptors and env."""
    os.setpgid(0, 0)
    _arm_death_signal_and_name(os.getppid(), service)
    with os.fdopen(env_fd, "rb") as fh:
        env = json.loads(fh.read())
    ctl.close()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024)
    os.environ.clear()
    os.environ.update({**import_env, **env})
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _reap(ctl: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        with contextlib.suppress(OSError):
            ctl.send(f"exit {pid} {os.waitstatus_to_exitcode(status)}".encode())


def serve(ctl: socket.socket, preload: list[str]) -> str | None:
    """The server's loop. Returns None when the supervisor is gone; in a forked child, the name of the
    service to run (the child has left the loop)."""
    before = dict(os.environ)
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - the service that needs it reports it, as without us
            print(f"fork server: not preloading {name}: {exc.__class__.__name__}: {exc}", flush=True)
    # What the imports set by default (e.g. zcbot_core.llm.client's LiteLLM switches): a fresh
    # interpreter running the service would have them too, under its own environment.
    import_env = {k: v for k, v in os.environ.items() if before.get(k) != v}
    gc.collect()
    gc.freeze()  # the shared objects leave the collector's lists: collections in children do not touch them
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([ctl], [], [], 0.2)
        _reap(ctl, children)
        if not ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(ctl, 4096, 2)
        except OSError:
            data, fds = b"", []
        if not data:
            break
        tag, service = data.decode().split()[1:3]
        if len(fds) != 2:
            ctl.send(f"failed {tag} expected two descriptors".encode())
            continue
        pid = os.fork()
        if pid == 0:
            _become_service(ctl, service, fds[0], fds[1], import_env)
            return service
        for fd in fds:
            os.close(fd)
        children.add(pid)
        ctl.send(f"pid {tag} {pid}".encode())
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    return None
