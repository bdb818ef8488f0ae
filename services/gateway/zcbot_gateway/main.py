"""Entry point: `python -m zcbot_gateway.main` (also what `zcbot up` / the CLI run).

uvicorn with uvloop (when installed), no access log (JSON app logs only), and a bounded
graceful shutdown: on SIGTERM/SIGINT the runtime's `stopping` event is set FIRST (so /readyz
turns 503 and long-lived responses such as SSE streams can end), then uvicorn stops accepting,
waits up to GRACEFUL_SHUTDOWN_SECONDS for open requests, and runs the app's lifespan shutdown.
"""

from __future__ import annotations

import asyncio
import importlib.util
import socket

import uvicorn
from fastapi import FastAPI

from zcbot_core.llm.profiles import check_profiles
from zcbot_core.platform.config import ConfigError, load_settings
from zcbot_core.platform.logs import setup_logging
from zcbot_core.platform.service import own_process_heap
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


def _check(settings: GatewaySettings) -> None:
    settings.require_secrets()
    settings.require_urls()
    check_profiles(settings)  # an invalid model profile file: refuse to start, naming it


def _server(settings: GatewaySettings) -> GatewayServer:
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
    return GatewayServer(config, app)


# The settings class `zcbot up` reads the gateway's settings with when it hosts it (`hosted.py`).
SETTINGS = GatewaySettings


async def serve(settings: GatewaySettings, stop: asyncio.Event) -> None:
    """The gateway hosted by `zcbot up` (which owns the signals and the logging) until `stop`.
    Outside the main thread uvicorn installs no signal handlers."""
    _check(settings)
    server = _server(settings)

    async def relay() -> None:
        await stop.wait()
        server.should_exit = True  # its shutdown sets the runtime's `stopping` first (GatewayServer)

    relay_task = asyncio.create_task(relay())
    try:
        await server.serve()
    finally:
        relay_task.cancel()
    if not server.started:
        raise RuntimeError("the gateway did not start (its port taken, or its start-up failed: see above)")


def main() -> None:
    try:
        settings = load_settings(GatewaySettings)  # every variable validated: a bad value names itself
        _check(settings)
    except ConfigError as exc:
        raise SystemExit(f"zcbot gateway: {exc}") from None
    setup_logging("gateway", settings.zcbot_log_level)
    own_process_heap()
    _server(settings).run()


if __name__ == "__main__":
    main()
