"""`zcbot channels`: WeChat channels (iLink poll loops, push delivery)."""

from __future__ import annotations

from zcbot_core.channels.settings import ChannelSettings
from zcbot_core.config import ConfigError, get_settings
from zcbot_core.service import main_entry, run_service

from zcbot_channels.service import ChannelsService


def main() -> None:
    try:  # both validated before anything starts: a bad value names its variable
        settings = get_settings()
        cs = ChannelSettings.from_env()
    except ConfigError as exc:
        raise SystemExit(f"zcbot channels: {exc}") from None
    main_entry(lambda: run_service("channels", settings, lambda: ChannelsService(cs), port=settings.zcbot_channels_port))


if __name__ == "__main__":
    main()
