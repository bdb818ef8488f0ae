"""Entry point: `python -m zcbot_gateway.main` (also what `zcbot up` / the CLI run).

uvicorn with uvloop (when installed), no access log (JSON app logs only), and a bounded
graceful shutdown: on SIGTERM/SIGINT the runtime's `stopping` event is set FIRST (so /readyz
turns 503 and long-lived responses such as SSE streams can end), then uvicorn stops accepting,
waits up to GRACEFUL_SHUTDOWN_SECONDS for open requests, and runs the app's lifespan shutdown.
"""

from __future__ import annotations

import importlib.util
import socket

import uvicorn
from fastapi import FastAPI

from zcbot_core.config import ConfigError, load_settings
from zcbot_core.llm.profiles import check_profiles
from zcbot_core.logs import setup_logging
from zcbot_core.service import own_process_heap

from zcbot_gateway.app import create_app
from zcbot_gateway.config import GatewaySettings

GRACEFUL_SHUTDOWN_SECONDS = 10


class GatewayServer(uvicorn.Server):
    """uvicorn.Server that flags the runtime as stopping before it starts draining connections."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self.app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        rt = getattr(self.app.state, "rt", None)
        if rt is not None:
            rt.stopping.set()
        await super().shutdown(sockets=sockets)


def main() -> None:
    try:
        settings = load_settings(GatewaySettings)  # every variable validated: a bad value names itself
        settings.require_secrets()
        settings.require_urls()
        check_profiles(settings)  # an invalid model profile file: refuse to start, naming it
    except ConfigError as exc:
        raise SystemExit(f"zcbot gateway: {exc}") from None
    setup_logging("gateway", settings.zcbot_log_level)
    own_process_heap()
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.zcbot_http_host,
        port=settings.zcbot_http_port,
        loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        access_log=False,
        log_config=None,
        server_header=False,
    )
    GatewayServer(config, app).run()


if __name__ == "__main__":
    main()
