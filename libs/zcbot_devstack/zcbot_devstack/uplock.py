"""One `zcbot up` per ZCBOT_HOME: an flock on `ZCBOT_HOME/up.lock`, which holds the pid of the stack
that has it. A second `zcbot up` is told where the running one is (its URL from `stack.json`, its
pid); a start refused before anything ran (busy ports) takes back the lock file and the home folder
it created, so a new home is not left with an empty `up.lock`."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO

from zcbot_devstack.state import read_state

LOCK_FILE = "up.lock"


class AlreadyRunning(Exception):
    """Another `zcbot up` holds this home's lock (the message says where it runs)."""


class UpLock:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.path = home / LOCK_FILE
        self.fh: IO[str] | None = None
        self._made_home = False
        self._made_file = False

    def acquire(self) -> None:
        self._made_home = not self.home.exists()
        self.home.mkdir(parents=True, exist_ok=True)
        self._made_file = not self.path.exists()
        fh = open(self.path, "a+")  # noqa: SIM115 - held for the stack's lifetime; "a+": the holder's pid stays
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip()
            fh.close()
            raise AlreadyRunning(self._where(holder)) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self.fh = fh

    def _where(self, holder: str) -> str:
        state = read_state(self.home)
        where = f"another `zcbot up` is already running with ZCBOT_HOME={self.home}"
        if state:
            return (f"{where}: {state.get('gateway_url')} (pid {state.get('pid')}); open that URL, or stop it "
                    f"(Ctrl-C in its terminal, or `kill {state.get('pid')}`) before starting another")
        pid = f"pid {holder}, " if holder.isdigit() else ""
        return f"{where} ({pid}still starting); wait for it or stop it before starting another"

    def release(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None

    def abandon(self) -> None:
        """A start refused before anything ran: release, and remove the lock file and home it made."""
        if self._made_file:
            with contextlib.suppress(OSError):
                self.path.unlink()
        self.release()
        if self._made_home:
            with contextlib.suppress(OSError):
                self.home.rmdir()  # only when empty: nothing else was made there
