"""`zcbot channels`: WeChat channels (iLink poll loops, push delivery)."""

from __future__ import annotations

import asyncio

from zcbot_channels.config import ChannelsServiceSettings
from zcbot_channels.service import ChannelsService
from zcbot_core.platform.config import ConfigError, load_settings
from zcbot_core.platform.service import main_entry, run_service

# The settings class `zcbot up` reads this service's settings with when it hosts it (`hosted.py`).
SETTINGS = ChannelsServiceSettings


async def serve(settings: ChannelsServiceSettings, stop: asyncio.Event | None = None) -> None:
    """The service until SIGTERM/SIGINT in its own process, or until `stop` when `zcbot up` hosts it."""
    await run_service("channels", settings, ChannelsService, port=settings.zcbot_channels_port, stop=stop)


def main() -> None:
    try:  # validated before anything starts: a bad value names its variable
        settings = load_settings(ChannelsServiceSettings)
    except ConfigError as exc:
        raise SystemExit(f"zcbot channels: {exc}") from None
    main_entry(lambda: serve(settings))


if __name__ == "__main__":
    main()
