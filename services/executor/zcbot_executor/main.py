"""Entrypoint: `python -m zcbot_executor` or `zcbot executor` (configured by env, see config.py)."""

from __future__ import annotations

import asyncio

from zcbot_core.platform.config import ConfigError, load_settings
from zcbot_core.platform.service import main_entry, run_service
from zcbot_executor.config import ExecutorSettings
from zcbot_executor.service import ExecutorService

# The settings class `zcbot up` reads this service's settings with when it hosts it (`hosted.py`).
SETTINGS = ExecutorSettings


async def serve(settings: ExecutorSettings, stop: asyncio.Event | None = None) -> None:
    """The service until SIGTERM/SIGINT in its own process, or until `stop` when `zcbot up` hosts it."""
    await run_service("executor", settings, lambda: ExecutorService(settings),
                      port=settings.zcbot_executor_port, use_db=False, needs_secrets=False, stop=stop)


def main() -> None:
    try:
        settings = load_settings(ExecutorSettings)  # every knob validated before anything starts
    except ConfigError as exc:
        raise SystemExit(f"zcbot executor: {exc}") from None
    main_entry(lambda: serve(settings))


if __name__ == "__main__":
    main()
