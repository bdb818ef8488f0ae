"""`zcbot scheduler`: cron jobs -> run requests (safe to run several replicas)."""

from __future__ import annotations

import asyncio

from zcbot_core.platform.config import ConfigError, load_settings
from zcbot_core.platform.service import main_entry, run_service
from zcbot_scheduler.config import SchedulerSettings
from zcbot_scheduler.service import SchedulerService

# The settings class `zcbot up` reads this service's settings with when it hosts it (`hosted.py`).
SETTINGS = SchedulerSettings


async def serve(settings: SchedulerSettings, stop: asyncio.Event | None = None) -> None:
    """The service until SIGTERM/SIGINT in its own process, or until `stop` when `zcbot up` hosts it."""
    await run_service("scheduler", settings, SchedulerService, port=settings.zcbot_scheduler_port, stop=stop)


def main() -> None:
    try:
        settings = load_settings(SchedulerSettings)  # fail fast on a bad knob, before connecting
    except ConfigError as exc:
        raise SystemExit(f"zcbot scheduler: {exc}") from None
    main_entry(lambda: serve(settings))


if __name__ == "__main__":
    main()
