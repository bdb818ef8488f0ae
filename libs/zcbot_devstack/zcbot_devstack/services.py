"""The one list of zcbot's services: name, entry module, health/metrics port, colour in `zcbot up`.

`zcbot <name>` runs `module.main()`; `zcbot up` starts them in this order and waits for each
one's `/healthz` on its port; tests start real services through the same entries.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from zcbot_core.platform.config import Settings


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    module: str  # its main() runs the service until SIGTERM
    port_env: str  # the env var of its HTTP (health/metrics) port
    port: Callable[[Settings], int]  # that port, from the settings
    color: str  # ANSI colour of its `zcbot up` prefix

    def run(self) -> None:
        importlib.import_module(self.module).main()


SERVICES: tuple[ServiceSpec, ...] = (
    ServiceSpec("gateway", "zcbot_gateway.main", "ZCBOT_HTTP_PORT", lambda s: s.zcbot_http_port, "36"),
    ServiceSpec("runner", "zcbot_runner.main", "ZCBOT_RUNNER_PORT", lambda s: s.zcbot_runner_port, "32"),
    ServiceSpec("executor", "zcbot_executor.main", "ZCBOT_EXECUTOR_PORT", lambda s: s.zcbot_executor_port, "33"),
    ServiceSpec("scheduler", "zcbot_scheduler.main", "ZCBOT_SCHEDULER_PORT", lambda s: s.zcbot_scheduler_port, "35"),
    ServiceSpec("channels", "zcbot_channels.main", "ZCBOT_CHANNELS_PORT", lambda s: s.zcbot_channels_port, "34"),
)
NAMES: tuple[str, ...] = tuple(s.name for s in SERVICES)
BY_NAME: dict[str, ServiceSpec] = {s.name: s for s in SERVICES}
#: The env var holding each service's HTTP (health/metrics) port.
SERVICE_PORT_ENV: dict[str, str] = {s.name: s.port_env for s in SERVICES}


def service_port(settings: Settings, name: str) -> int:
    return BY_NAME[name].port(settings)


def derived_ports(base: int, environ: dict[str, str] | None = None) -> dict[str, str]:
    """`zcbot up --port N`: the gateway on N, the other services on N+1… in their order; a service's
    own variable, when set in `environ`, still wins (the gateway's is the flag itself)."""
    if not 1 <= base <= 65535 - len(SERVICES) + 1:
        raise ValueError(f"--port must be between 1 and {65535 - len(SERVICES) + 1}")
    given = environ or {}
    return {spec.port_env: str(base + i) for i, spec in enumerate(SERVICES)
            if i == 0 or spec.port_env not in given}
