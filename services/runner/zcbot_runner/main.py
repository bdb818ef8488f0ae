"""`zcbot runner`: the run consumer."""

from __future__ import annotations

from zcbot_core.config import ConfigError, load_settings
from zcbot_core.service import main_entry, run_service
from zcbot_runner.config import RunnerSettings
from zcbot_runner.service import RunnerService


def main() -> None:
    try:
        settings = load_settings(RunnerSettings)  # every variable (the host tools' too) validated now
    except ConfigError as exc:
        raise SystemExit(f"zcbot runner: {exc}") from None
    main_entry(lambda: run_service("runner", settings, RunnerService, port=settings.zcbot_runner_port))


if __name__ == "__main__":
    main()
