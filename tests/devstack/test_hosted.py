"""`zcbot up`'s services hosted in its own process (hosted.ServicesHost, issue 28): each service reads
its own environment, logs under its own name with every service's secrets redacted, and ends with the
exit code a process of its own would have; one failing leaves the others running and starts again."""

from __future__ import annotations

import os
import threading
import time

import pytest

from zcbot_devstack.hosted import ServicesHost

PROBE = "tests.devstack.hosted_probe"
SECRET_A, SECRET_B = "alpha-secret-value-123", "bravo-secret-value-456"


class Lines:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, name: str, line: str) -> None:
        with self.lock:
            self.items.append((name, line))

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
    ({"PROBE_PORT": "not-a-port"}, 2, "PROBE_PORT"),  # a bad configuration names the variable
], ids=["failure", "exit", "bad-config"])
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
