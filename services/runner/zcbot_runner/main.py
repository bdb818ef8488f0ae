"""`zcbot runner`: the run consumer."""

from __future__ import annotations

import asyncio

from zcbot_core.platform.config import ConfigError, load_settings
from zcbot_core.platform.service import main_entry, run_service
from zcbot_runner.config import RunnerSettings
from zcbot_runner.service import RunnerService

# The settings class `zcbot up` reads this service's settings with when it hosts it (`hosted.py`).
SETTINGS = RunnerSettings


async def serve(settings: RunnerSettings, stop: asyncio.Event | None = None) -> None:
    """The service until SIGTERM/SIGINT in its own process, or until `stop` when `zcbot up` hosts it."""
    await run_service("runner", settings, RunnerService, port=settings.zcbot_runner_port, stop=stop)


def main() -> None:
    try:
        settings = load_settings(RunnerSettings)  # every variable (the host tools' too) validated now
    except ConfigError as exc:
        raise SystemExit(f"zcbot runner: {exc}") from None
    main_entry(lambda: serve(settings))


if __name__ == "__main__":
    main()
