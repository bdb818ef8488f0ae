"""`zcbot channels`: WeChat channels (iLink poll loops, push delivery)."""

from __future__ import annotations

from zcbot_core.config import get_settings
from zcbot_core.service import main_entry, run_service

from zcbot_channels.service import ChannelsService


def main() -> None:
    settings = get_settings()
    main_entry(lambda: run_service("channels", settings, ChannelsService, port=settings.zcbot_channels_port))


if __name__ == "__main__":
    main()
