"""How `zcbot up` starts a service, and signals and cleans up after it.

- `hosted` (the default for the real services): a task in this process (`hosted.ServicesHost`).
- `forked` (`zcbot up --separate`): a process of its own, forked by the fork server (`forkserver`).
- `process`: a process of its own started from its command (a test's stand-in commands; and the
  fallback when the fork server fails).
A process leads its own process group: a signal goes to the group, and what a dead one left in it is
killed. A hosted service is told to drain (`terminate`) or cancelled (`kill`) instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from zcbot_devstack.embedded import death_signal_preexec
from zcbot_devstack.forked import ForkedProcess, ForkServer
from zcbot_devstack.forkserver import preload_modules
from zcbot_devstack.groups import group_leftovers, signal_group
from zcbot_devstack.hosted import HostedService, ServicesHost

Mode = Literal["hosted", "forked", "process"]
Child = subprocess.Popen[bytes] | ForkedProcess | HostedService
# What the services' environment sets that a Python interpreter reads when it starts or imports (the
# fork server's interpreter is theirs; the hosting process sets them for itself).
INTERPRETER_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1"}


class Launcher:
    def __init__(self, mode: Mode, command: Callable[[str], list[str]], names: Sequence[str],
                 say: Callable[[str], None], emit: Callable[[str, str], None], level: str) -> None:
        self.mode = mode
        self.command = command
        self.names = list(names)
        self.say = say
        self.host = ServicesHost(emit, level) if mode == "hosted" else None
        self.forkserver: ForkServer | None = None

    def prepare(self, env: Mapping[str, str]) -> None:
        """Before the database is prepared: the services' imports overlap it."""
        if self.mode == "forked":
            self.forkserver = ForkServer(preload_modules(self.names), {**env, **INTERPRETER_ENV}, self.say)
            self.forkserver.start()
        elif self.host is not None:
            for key, value in INTERPRETER_ENV.items():
                os.environ.setdefault(key, value)  # raw: as the services' interpreter would have it
            self.host.preload(self.names)

    def start(self, name: str, env: dict[str, str]) -> Child:
        if self.host is not None:
            return self.host.start(name, env)
        if self.forkserver is not None:
            try:
                return self.forkserver.spawn(name, env)
            except (RuntimeError, OSError) as exc:  # a service is still better started on its own
                self.say(f"{exc}; starting the services as processes of their own from now on")
                self.forkserver.stop()
                self.forkserver = None
        return subprocess.Popen(
            self.command(name),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,
            preexec_fn=death_signal_preexec(signal.SIGKILL),
            close_fds=True,
        )

    @staticmethod
    def signal(child: Child, sig: int) -> None:
        """SIGTERM: drain and stop; SIGKILL: end it now (a process: its whole group)."""
        if isinstance(child, HostedService):
            (child.kill if sig == signal.SIGKILL else child.terminate)()
        else:
            signal_group(child, sig)

    @staticmethod
    def kill_leftovers(child: Child) -> None:
        """What a service that exited left behind (a process's group; nothing for a hosted one)."""
        if isinstance(child, HostedService):
            return
        for pid in group_leftovers(child.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def close(self, keep: Sequence[int]) -> None:
        """After the services: stop the fork server, or the host's loop and whatever the hosted
        services left running (descendants of this process other than `keep`: the embedded servers)."""
        if self.forkserver is not None:
            self.forkserver.stop()
        if self.host is not None:
            self.host.close(timeout=2.0)
            import psutil

            keep_tree = set(keep)
            for pid in keep:
                with contextlib.suppress(psutil.Error):
                    keep_tree.update(p.pid for p in psutil.Process(pid).children(recursive=True))
            for proc in psutil.Process().children(recursive=True):
                if proc.pid not in keep_tree:
                    with contextlib.suppress(psutil.Error):
                        proc.kill()
