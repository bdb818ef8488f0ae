"""The supervisor's side of the fork server (`forkserver`): start it, ask it for a service, and a
handle on each forked service that `stack.Stack` uses as it uses a `subprocess.Popen`
(`pid`, `stdout`, `returncode`, `poll`, `wait`). The services are the server's children, so their
exits come from the server; if the server dies, its children die with it (their death signal) and
every handle reports -SIGKILL; the next `spawn` starts a new server.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO

from zcbot_devstack.bootstrap import EXECUTOR_WITHOUT, RUNNER_ONLY, RUNNER_WITHOUT
from zcbot_devstack.embedded import death_signal_preexec
from zcbot_devstack.forkserver import CTL_FD_ENV, PRELOAD_ENV

# The server holds no secret (a service's memory would inherit it): these, and any name that says key,
# secret, password, token or credential, stay out of its environment.
_WITHHELD = {*EXECUTOR_WITHOUT, *RUNNER_WITHOUT, *RUNNER_ONLY, "ZCBOT_DB_URL"}
_SENSITIVE = ("KEY", "SECRET", "PASSWORD", "TOKEN", "CREDENTIAL", "NKEY")


def zygote_env(env: Mapping[str, str]) -> dict[str, str]:
    """What the fork server may hold of the stack's environment (what libraries read at import)."""
    return {k: v for k, v in env.items()
            if k not in _WITHHELD and not any(word in k.upper() for word in _SENSITIVE)}


class ForkedProcess:
    """A service forked by the server: the `subprocess.Popen` surface `stack.Stack` uses."""

    def __init__(self, pid: int, stdout: IO[bytes], server: ForkServer) -> None:
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None
        self._server = server

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._server.changed:
            while self.returncode is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(f"service pid {self.pid}", timeout or 0.0)
                self._server.changed.wait(left)
        return self.returncode


class ForkServer:
    def __init__(self, preload: Sequence[str], env: Mapping[str, str], log: Callable[[str], None]) -> None:
        self.preload = list(preload)
        self.env = zygote_env(env)
        self.log = log  # the server's own output lines (a preload that failed)
        self.changed = threading.Condition()
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctl: socket.socket | None = None
        self._children: dict[int, ForkedProcess] = {}
        self._pending: dict[str, int | str] = {}
        self._tag = 0
        self._send_lock = threading.Lock()

    def start(self) -> None:
        """Start the server (it imports while the caller goes on; a spawn request waits for that)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "zcbot_devstack.forkserver_main"],
            env={**self.env, CTL_FD_ENV: str(theirs.fileno()), PRELOAD_ENV: ",".join(self.preload)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(theirs.fileno(),),
            process_group=0,
            preexec_fn=death_signal_preexec(signal.SIGKILL),
        )
        theirs.close()
        self._ctl = ours
        threading.Thread(target=self._listen, args=(ours,), name="forkserver", daemon=True).start()
        threading.Thread(target=self._pump, args=(self._proc,), name="forkserver-out", daemon=True).start()

    def _pump(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            self.log(raw.decode(errors="replace").rstrip("\n"))
        proc.stdout.close()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and self._ctl is not None

    def spawn(self, name: str, env: Mapping[str, str], timeout: float = 120.0) -> ForkedProcess:
        """Fork the service `name` with environment `env`; its output is the handle's `stdout`."""
        if not self.running:
            self.stop()
            self.start()
        assert self._ctl is not None
        out_r, out_w = os.pipe()
        env_r, env_w = os.pipe()
        with self.changed:
            self._tag += 1
            tag = str(self._tag)
        try:
            with self._send_lock:
                socket.send_fds(self._ctl, [f"spawn {tag} {name}".encode()], [out_w, env_r])
        finally:
            os.close(out_w)
            os.close(env_r)
        with os.fdopen(env_w, "wb") as fh:  # the child reads it; a pipe's buffer holds a stack's env
            fh.write(json.dumps(dict(env)).encode())
        stdout = os.fdopen(out_r, "rb")
        deadline = time.monotonic() + timeout
        with self.changed:
            while tag not in self._pending:
                if time.monotonic() > deadline or self._ctl is None:
                    stdout.close()
                    raise RuntimeError(f"the fork server did not start {name}")
                self.changed.wait(0.5)
            answer = self._pending.pop(tag)
            if isinstance(answer, str):
                stdout.close()
                raise RuntimeError(f"the fork server could not start {name}: {answer}")
            proc = ForkedProcess(answer, stdout, self)
            self._children[answer] = proc
            return proc

    def _listen(self, ctl: socket.socket) -> None:
        while True:
            try:
                data = ctl.recv(4096)
            except OSError:
                data = b""
            if not data:
                break
            kind, key, rest = (data.decode().split(maxsplit=2) + [""])[:3]
            with self.changed:
                if kind == "pid":
                    self._pending[key] = int(rest)
                elif kind == "failed":
                    self._pending[key] = rest
                elif kind == "exit":
                    child = self._children.pop(int(key), None)
                    if child is not None:
                        child.returncode = int(rest)
                self.changed.notify_all()
        with self.changed:  # the server is gone, and with it (death signal) every service it forked
            if self._ctl is ctl:
                self._ctl = None
            for child in self._children.values():
                child.returncode = -signal.SIGKILL
            self._children.clear()
            self.changed.notify_all()

    def stop(self, timeout: float = 10.0) -> None:
        """Close the socket (the server kills what it still has and exits), then wait for it."""
        ctl, self._ctl = self._ctl, None
        if ctl is not None:
            with contextlib.suppress(OSError):
                ctl.shutdown(socket.SHUT_RDWR)  # wakes the listening thread
            ctl.close()
        if self._proc is not None:
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
