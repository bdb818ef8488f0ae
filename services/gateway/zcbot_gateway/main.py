"""Entry point: `python -m zcbot_gateway.main` (or `zcbot up` / the CLI's service runner)."""

from __future__ import annotations

import importlib.util

import uvicorn

from zcbot_core.config import ConfigError, get_settings
from zcbot_core.logs import setup_logging

from zcbot_gateway.app import create_app

GRACEFUL_SHUTDOWN_SECONDS = 10


def main() -> None:
    settings = get_settings()
    try:
        settings.require_secrets()
        settings.require_urls()
    except ConfigError as exc:
        raise SystemExit(f"zcbot gateway: {exc}") from None
    setup_logging("gateway", settings.zcbot_log_level)
    uvicorn.run(
        create_app(settings),
        host=settings.zcbot_http_host,
        port=settings.zcbot_http_port,
        loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        access_log=False,
        log_config=None,
        server_header=False,
    )


if __name__ == "__main__":
    main()
