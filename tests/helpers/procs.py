"""Real service processes for integration and fault tests.

`ServiceProcess` runs `python -m zcbot_devstack.cli <name>` (or any command) in its own process group
with output captured to a file, so a test can wait for health, SIGTERM it (graceful drain),
SIGKILL it (crash), and read what it logged. Used through the `start_service` fixture.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

from zcbot_devstack.embedded import death_signal_preexec
from zcbot_devstack.services import SERVICE_PORT_ENV


class ServiceNotHealthy(AssertionError):
    """The service did not answer /healthz in time (the message carries its log tail)."""


def healthz_ok(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=timeout) as resp:
            return resp.status == 200
    except (OSError, ValueError):
        return False


class ServiceProcess:
    """One service child process. `env` is the complete environment of the child."""

    def __init__(
        self,
        name: str,
        env: Mapping[str, str],
        log_path: Path,
        cmd: Sequence[str] | None = None,
    ) -> None:
        self.name = name
        self.env = {**env, "PYTHONUNBUFFERED": "1"}
        self.log_path = Path(log_path)
        self.cmd = list(cmd) if cmd else [sys.executable, "-m", "zcbot_devstack.cli", name]
        self.proc: subprocess.Popen[bytes] | None = None

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> Self:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.cmd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,
                preexec_fn=death_signal_preexec(signal.SIGKILL),
                close_fds=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    @property
    def port(self) -> int | None:
        """The health port this service was given through its env (None for unknown names)."""
        key = SERVICE_PORT_ENV.get(self.name)
        return int(self.env[key]) if key and key in self.env else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def wait_healthy(self, port: int | None = None, timeout: float = 30.0) -> None:
        """Block until GET /healthz answers 200; raise ServiceNotHealthy (with the log) otherwise."""
        port = port or self.port
        assert port, f"no health port known for {self.name}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                raise ServiceNotHealthy(f"{self.name} exited with {self.returncode}:\n{self.log_tail()}")
            if healthz_ok(port):
                return
            time.sleep(0.05)
        raise ServiceNotHealthy(f"{self.name} not healthy on :{port} after {timeout}s:\n{self.log_tail()}")

    async def wait_healthy_async(self, port: int | None = None, timeout: float = 30.0) -> None:
        """`wait_healthy` for async tests: does not block the running event loop."""
        await asyncio.to_thread(self.wait_healthy, port, timeout)

    def terminate(self, timeout: float = 20.0) -> int | None:
        """SIGTERM the group (graceful drain), wait up to `timeout`, then SIGKILL; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self._signal_group(signal.SIGKILL)
        return self.proc.wait()

    def kill9(self) -> int | None:
        """SIGKILL the whole group at once (a crash, no drain); returns the exit code (-9)."""
        if self.proc is None:
            return None
        self._signal_group(signal.SIGKILL)
        return self.proc.wait()

    def _signal_group(self, sig: int) -> None:
        assert self.proc is not None
        if self.proc.returncode is None:  # unreaped: its pid is still our group id
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
        else:
            from zcbot_devstack.stack import group_leftovers

            for pid in group_leftovers(self.proc.pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)

    # ---- output --------------------------------------------------------------------------
    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_text()[-chars:]

    def __repr__(self) -> str:
        return f"ServiceProcess({self.name!r}, pid={self.proc.pid if self.proc else None}, rc={self.returncode})"
