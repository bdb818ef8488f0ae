"""`zcbot up`'s services hosted in its own process (hosted.ServicesHost, issue 28): each service reads
its own environment, logs under its own name with every service's secrets redacted, and ends with the
exit code a process of its own would have; one failing leaves the others running and starts again.
Structured concurrency (issue 34): a `SystemExit` in any task of a service (uvicorn's, on a health
port it cannot bind) ends that service alone, the supervisor restarts it, and the tasks a service
spawned end with it, never running beside its restarted copy."""

from __future__ import annotations

import asyncio
import io
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from uvicorn.config import STARTUP_FAILURE

from tests.devstack import hosted_probe
from tests.helpers.wait import wait_for
from zcbot_core.platform.config import Settings, load_settings
from zcbot_devstack.hosted import ServicesHost
from zcbot_devstack.output import render_line
from zcbot_devstack.shutdown import stop_services
from zcbot_devstack.stack import Stack, default_service_cmd

PROBE = "tests.devstack.hosted_probe"
SECRET_A, SECRET_B = "alpha-secret-value-123", "bravo-secret-value-456"


class Lines:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, name: str, line: str) -> None:
        """As `zcbot up`'s printer: the host hands over a log record's JSON line, rendered here."""
        with self.lock:
            self.items.append((name, render_line(line)))

    def of(self, name: str) -> list[str]:
        with self.lock:
            return [line for who, line in self.items if who == name]

    def wait_for(self, name: str, text: str, timeout: float = 10.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [line for line in self.of(name) if text in line]
            if found:
                return found[0]
            time.sleep(0.02)
        raise AssertionError(f"{text!r} not logged by {name}: {self.items}")


@pytest.fixture
def host() -> tuple[ServicesHost, Lines]:
    lines = Lines()
    services = ServicesHost(lines, modules={"alpha": PROBE, "bravo": PROBE})
    yield services, lines
    services.close()


def test_each_service_reads_its_own_environment_and_logs_under_its_name(host: tuple[ServicesHost, Lines]) -> None:
    services, lines = host
    before = dict(os.environ)
    alpha = services.start("alpha", {"ZCBOT_NATS_USER": "alice", "JWT_SECRET": SECRET_A})
    bravo = services.start("bravo", {"ZCBOT_NATS_USER": "bob", "JWT_SECRET": SECRET_B})
    assert "user=alice" in lines.wait_for("alpha", "probe started")
    assert "user=bob" in lines.wait_for("bravo", "probe started")
    lines.wait_for("alpha", "from a worker thread")
    # Each one's secret is redacted in every line, whichever service logged it.
    assert "my secret is [redacted]" in lines.wait_for("bravo", "my secret is")
    assert not [line for _, line in lines.items if SECRET_A in line or SECRET_B in line]
    assert dict(os.environ) == before  # their variables never became the process's
    assert alpha.pid == bravo.pid == os.getpid() and alpha.stdout is None
    assert alpha.poll() is None and bravo.poll() is None
    alpha.terminate()
    assert alpha.wait(10) == 0 and bravo.poll() is None
    lines.wait_for("alpha", "probe stopped")
    bravo.terminate()
    assert bravo.wait(10) == 0


@pytest.mark.parametrize(("env", "code", "said"), [
    ({"PROBE_MODE": "fail"}, 1, "probe failure"),  # the traceback, under the service's name
    ({"PROBE_MODE": "exit"}, 3, "probe started"),
    ({"PROBE_MODE": "exit-in-task"}, 4, "probe started"),  # a spawned task's SystemExit: this service's end only
    ({"PROBE_PORT": "not-a-port"}, 2, "PROBE_PORT"),  # a bad configuration names the variable
], ids=["failure", "exit", "exit-in-a-task", "bad-config"])
def test_a_service_ends_with_the_code_a_process_would_have(host: tuple[ServicesHost, Lines], env: dict[str, str],
                                                           code: int, said: str) -> None:
    services, lines = host
    bravo = services.start("bravo", {})
    lines.wait_for("bravo", "probe started")
    alpha = services.start("alpha", env)
    assert alpha.wait(10) == code
    lines.wait_for("alpha", said)
    assert bravo.poll() is None  # the other service is untouched
    again = services.start("alpha", {})  # what the supervisor's restart does
    lines.wait_for("alpha", "probe started")
    again.terminate()
    bravo.terminate()
    assert again.wait(10) == 0 and bravo.wait(10) == 0


def test_a_service_that_ignores_stop_is_killed(host: tuple[ServicesHost, Lines]) -> None:
    services, lines = host
    alpha = services.start("alpha", {"PROBE_MODE": "hang"})
    lines.wait_for("alpha", "probe started")
    alpha.terminate()
    with pytest.raises(Exception, match="hosted alpha"):
        alpha.wait(0.5)
    alpha.kill()
    assert alpha.wait(10) == -9


ENDINGS = {  # how the first copy ends: (its PROBE_MODE, how it is ended, the code it ends with)
    "stopped": ("wait", "terminate", 0),
    "killed": ("hang", "kill", -9),
    "failed": ("fail", None, 1),
    "exited-in-a-task": ("exit-in-task", None, 4),
}


def _live(tag: str) -> list[asyncio.Task[None]]:
    return [task for task in hosted_probe.SPAWNED.get(tag, []) if not task.done()]


@pytest.mark.parametrize("ending", list(ENDINGS))
async def test_the_tasks_a_service_spawned_end_with_it(host: tuple[ServicesHost, Lines], ending: str) -> None:
    services, lines = host
    mode, action, code = ENDINGS[ending]
    bravo = services.start("bravo", {"PROBE_TAG": f"bravo-{ending}"})
    first = services.start("alpha", {"PROBE_MODE": mode, "PROBE_TAG": f"alpha-{ending}"})
    await wait_for(lambda: len(_live(f"bravo-{ending}")) == 2, 10, what="bravo's spawned tasks")
    if action is not None:  # else it ends by itself, once its child and grandchild tasks run
        # Its child task and the task that child spawned both run (the grandchild is filed under alpha too).
        await wait_for(lambda: len(_live(f"alpha-{ending}")) == 2, 10, what="alpha's spawned tasks")
        getattr(first, action)()
    assert await asyncio.to_thread(first.wait, 10) == code
    assert _live(f"alpha-{ending}") == []  # cancelled with their service: none outlives it
    assert len(hosted_probe.SPAWNED[f"alpha-{ending}"]) == 2
    again = services.start("alpha", {"PROBE_TAG": f"alpha-{ending}-again"})  # what the supervisor's restart does
    await wait_for(lambda: len(_live(f"alpha-{ending}-again")) == 2, 10, what="the restarted copy's tasks")
    assert _live(f"alpha-{ending}") == []  # the old copy's tasks do not come back beside the new one
    assert len(_live(f"bravo-{ending}")) == 2 and bravo.poll() is None  # the other service is untouched
    again.terminate()
    bravo.terminate()
    assert await asyncio.to_thread(again.wait, 10) == 0 and await asyncio.to_thread(bravo.wait, 10) == 0
    assert _live(f"alpha-{ending}-again") == [] and _live(f"bravo-{ending}") == []


async def test_the_supervisor_restarts_a_hosted_service_whose_health_port_was_taken(
        settings_env: dict[str, str]) -> None:
    """The real supervisor (`Stack`) hosting two services that run `run_service` (real NATS, real
    uvicorn): the scheduler's health port is held by another program, so its uvicorn exits (code 3,
its start-up failure);
    that ends the scheduler alone, the channels service stays up untouched, and once the port is
    free the supervisor's restart brings the scheduler up."""
    settings = load_settings(Settings, environ=settings_env)
    out = io.StringIO()
    stack = Stack(settings, only=["scheduler", "channels"], service_cmd=default_service_cmd, ready_timeout=60.0,
                  stop_timeout=5.0, max_restarts=8, out=out)
    host = stack.launcher.host
    assert host is not None  # the default launcher hosts the services
    host.modules = {"scheduler": PROBE, "channels": PROBE}
    stack.env = {**settings_env, "PROBE_MODE": "service", "ZCBOT_INSTANCE_ID": stack.instance}
    taken = socket.socket()
    taken.bind(("127.0.0.1", settings.zcbot_scheduler_port))
    taken.listen()
    supervisor = threading.Thread(target=stack._supervise, name="supervisor", daemon=True)
    supervisor.start()
    try:
        await wait_for(lambda: f"scheduler exited unexpectedly with code {STARTUP_FAILURE};" in out.getvalue(), 30,
                       what="the scheduler's end with uvicorn's code")
        scheduler, channels = (next(s for s in stack.services if s.name == n) for n in ("scheduler", "channels"))
        channels_proc = channels.proc
        assert channels_proc is not None and channels_proc.poll() is None  # it ended alone
        taken.close()
        await wait_for(lambda: "zcbot is up" in out.getvalue(), 30, what="the restarted scheduler ready")
        assert scheduler.restarts >= 1 and scheduler.healthy and scheduler.proc is not None
        assert scheduler.proc.poll() is None
        assert channels.proc is channels_proc and channels.restarts == 0  # never restarted
        assert "channels exited" not in out.getvalue()
    finally:
        taken.close()
        stack.stop_requested.set()
        await asyncio.to_thread(supervisor.join, 10)
        for svc in stack.services:
            if svc.proc is not None and svc.proc.poll() is None:
                svc.proc.terminate()
                await asyncio.to_thread(svc.proc.wait, 15)
        host.close()
        print(out.getvalue())


async def test_stopping_says_what_it_waits_for_and_kills_what_does_not_stop(tmp_path: Path) -> None:
    """`zcbot up`'s stop (shutdown.stop_services): a hosted service that ignores the stop is named
    while it is awaited and killed at `stop_timeout`; the one that stops ends cleanly."""
    settings = load_settings(Settings, environ={"ZCBOT_HOME": str(tmp_path / "home")})
    out = io.StringIO()
    stack = Stack(settings, only=["scheduler", "channels"], service_cmd=default_service_cmd, ready_timeout=60.0,
                  stop_timeout=4.0, max_restarts=0, out=out)
    host = stack.launcher.host
    assert host is not None
    host.modules = {"scheduler": PROBE, "channels": PROBE}
    try:
        for svc in stack.services:
            svc.proc = host.start(svc.name, {"PROBE_MODE": "hang" if svc.name == "scheduler" else "wait"})
        await wait_for(lambda: out.getvalue().count("probe started") == 2, 10, what="both probes started")
        began = time.monotonic()
        await asyncio.to_thread(stop_services, stack)
        took = time.monotonic() - began
        said = out.getvalue()
        codes = {svc.name: svc.proc.poll() for svc in stack.services if svc.proc is not None}
        assert codes == {"scheduler": -9, "channels": 0}, said
        assert 4.0 <= took < 4.0 + 3.0, took  # the stop timeout, then the kill's short wait
        assert "stopping scheduler, channels…" in said
        assert "waiting for scheduler to stop (" in said  # named while awaited; channels had stopped
        assert "scheduler did not stop within 4s; killing it" in said
    finally:
        host.close()
