"""`zcbot runner`: the run consumer."""

from __future__ import annotations

from zcbot_core.config import get_settings
from zcbot_core.service import main_entry, run_service
from zcbot_runner.service import RunnerService


def main() -> None:
    settings = get_settings()
    main_entry(lambda: run_service("runner", settings, RunnerService, port=settings.zcbot_runner_port))


if __name__ == "__main__":
    main()
