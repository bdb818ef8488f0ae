"""`zcbot runner`: the run consumer."""

from __future__ import annotations

from zcbot_core.config import ConfigError, get_settings
from zcbot_core.service import main_entry, run_service
from zcbot_core.web.settings import HostToolSettings
from zcbot_runner.service import RunnerService


def main() -> None:
    try:
        settings = get_settings()  # every variable validated before anything starts
        HostToolSettings.from_env()  # the host tools' too (read again, once, when the service starts)
    except ConfigError as exc:
        raise SystemExit(f"zcbot runner: {exc}") from None
    main_entry(lambda: run_service("runner", settings, RunnerService, port=settings.zcbot_runner_port))


if __name__ == "__main__":
    main()
