"""The stack of `bench.soak`'s day: `zcbot up --separate` started in its own session with its own ports,
home and secrets; one service's process killed (the supervisor restarts it); Ctrl-C to the process group,
and what of it survived."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from bench.startup import FAKE_KEY_ENV, PROFILE, wait_line
from zcbot_devstack.embedded import free_port
from zcbot_devstack.services import SERVICE_PORT_ENV

STOP_BUDGET_S = 15.0


class Up:
    """`zcbot up --separate` in its own session, with its ports, home and secrets."""

    def __init__(self, work: Path, fake_base: str, max_runs_per_user: int) -> None:
        self.home = work / "home"
        self.ports = {name: free_port() for name in SERVICE_PORT_ENV}
        models = work / "models"
        models.mkdir(exist_ok=True)
        (models / "fake.yaml").write_text(PROFILE.format(base=fake_base) + "parallel_tools: true\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ZCBOT_", "JWT_SECRET", "PLATFORM_KEY"))}
        env.update({"ZCBOT_HOME": str(self.home), "ZCBOT_MODELS_DIR": str(models), "ZCBOT_DEFAULT_MODEL": "fake",
                    FAKE_KEY_ENV: "sk-fake", "ZCBOT_MAX_RUNS_PER_USER": str(max_runs_per_user),
                    "ZCBOT_ACK_WAIT_SECONDS": "5", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                    **{SERVICE_PORT_ENV[n]: str(p) for n, p in self.ports.items()}})
        self.out = work / "up.out"
        self.proc = subprocess.Popen([sys.executable, "-m", "zcbot_devstack.cli", "up", "--separate"], env=env,
                                     stdout=self.out.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        wait_line(self.out, "zcbot is up", self.proc, 240)
        secrets = dict(line.split("=", 1) for line in (self.home / "secrets.env").read_text().splitlines() if "=" in line)
        self.platform_key = secrets["PLATFORM_KEY"]
        self.db_url = json.loads((self.home / "stack.json").read_text())["db_url"]
        self.base = f"http://127.0.0.1:{self.ports['gateway']}"

    def service_pid(self, name: str) -> int:
        """The pid of the process serving `name`'s health port."""
        port = self.ports[name]
        for conn in psutil.net_connections("tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
                return conn.pid
        raise RuntimeError(f"nothing listens on {name}'s port {port}")

    def kill_service(self, name: str, timeout: float = 60.0) -> float:
        """SIGKILL `name`'s process; seconds until the supervisor's new copy answers /readyz."""
        old = self.service_pid(name)
        os.kill(old, signal.SIGKILL)
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            try:
                pid = self.service_pid(name)
                ready = httpx.get(f"http://127.0.0.1:{self.ports[name]}/readyz", timeout=2).status_code == 200
                if pid != old and ready:
                    return time.monotonic() - t0
            except (RuntimeError, httpx.HTTPError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{name} did not come back within {timeout:g} s:\n{self.out.read_text()[-3000:]}")

    def _ours(self) -> list[psutil.Process]:
        """Every process of this stack: its session, and anything naming its home (a sandbox's bwrap,
        a background job's wrapper) even if it left the session."""
        sid, home = self.proc.pid, str(self.home)
        found = []
        for p in psutil.process_iter(["pid", "cmdline", "cwd"]):
            try:
                if p.pid == os.getpid():
                    continue
                mine = os.getsid(p.pid) == sid or home in " ".join(p.info["cmdline"] or []) \
                    or (p.info["cwd"] or "").startswith(home)
            except (ProcessLookupError, psutil.Error, OSError):
                continue
            if mine:
                found.append(p)
        return found

    def ctrl_c(self) -> tuple[float, list[str]]:
        """SIGINT to the process group; seconds until `zcbot up` exited, and what survived it."""
        t0 = time.monotonic()
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(STOP_BUDGET_S + 30)
        except subprocess.TimeoutExpired:
            pass
        took = time.monotonic() - t0
        deadline = time.monotonic() + 2.0  # children reaped by the kernel just after their parent
        left = self._ours()
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = self._ours()
        names = []
        for p in left:
            try:
                names.append(f"{p.pid} {' '.join(p.cmdline())[:160]}")
                p.kill()
            except psutil.Error:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        return took, names
