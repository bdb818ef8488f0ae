"""What the embedded servers share: free ports, the parent-death signal, the stop sequence, the base
class (port choice, process handle, context manager). See the package docstring for the why."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self

from zcbot_core.errors import ZcbotError

_PR_SET_PDEATHSIG = 1
LOOPBACK = "127.0.0.1"


class EmbeddedServerError(ZcbotError, RuntimeError):
    """An embedded server failed to start (the message carries the tail of its log)."""

    code = "embedded_server"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that was free a moment ago (the usual bind-to-0 trick; callers retry on races)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """True when a server could bind host:port now (nothing listens; TIME_WAIT leftovers don't count,
    as servers bind with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def tcp_open(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


_libc: ctypes.CDLL | None = None


def _load_libc() -> ctypes.CDLL | None:
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def death_signal_preexec(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A `preexec_fn` arming PR_SET_PDEATHSIG(sig) in the child, or None where it cannot work.

    None off Linux and off the main thread (see the module docstring). The child also checks that
    its parent did not die between fork and prctl. It runs after Popen's setuid (`user=`), which
    matters: a credential change clears the death signal.
    """
    libc = _load_libc()
    if libc is None or threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()

    def _arm() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), int(sig))

    return _arm


def log_tail(path: Path, offset: int = 0, limit: int = 4000) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return ""
    return data[-limit:].decode(errors="replace")


def terminate(proc: subprocess.Popen[bytes], first: int, timeout: float, second: int | None = None) -> None:
    """Send `first`, wait `timeout`; then `second` (if any) and wait a bit more; then SIGKILL."""
    if proc.poll() is not None:
        return
    for sig, wait in ((first, timeout), (second, min(timeout, 5.0))):
        if sig is None:
            continue
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()


class EmbeddedServer:
    """Shared lifecycle: port choice, process handle, context manager."""

    kind = "server"

    def __init__(self, data_dir: Path | str, port: int = 0) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.requested_port = int(port)
        self.port: int = int(port)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> Self:  # pragma: no cover - overridden
        raise NotImplementedError

    def stop(self, timeout: float = 20.0) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self) -> Self:
        if not self.running:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def _candidate_ports(self, attempts: int) -> list[int]:
        """The requested port (which must be free), or a few fresh free ports to try in turn."""
        if self.requested_port:
            if not port_is_free(self.requested_port):
                raise EmbeddedServerError(f"{self.kind}: port {self.requested_port} is already in use")
            return [self.requested_port]
        return [free_port() for _ in range(attempts)]
