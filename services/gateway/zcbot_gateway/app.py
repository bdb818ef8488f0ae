"""The gateway's FastAPI application (kept thin: wiring only).

Lifespan: open the shared runtime (`open_runtime("gateway", settings)`) -> `app.state.rt` ->
run startup hooks in registration order -> serve -> set `rt.stopping` -> run shutdown hooks in
reverse order -> close the runtime. Other modules attach background work (e.g. the SSE hub) with
`hooks.add_startup_hook(app, fn)` / `hooks.add_shutdown_hook(app, fn)`; each hook is `async def fn(app)`.
A router module may also expose `install(app)`, which `create_app` calls after including it. No
module imports this one except the entry point (`main.py`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from zcbot_core import __version__
from zcbot_core.platform.config import Settings
from zcbot_core.platform.service import close_runtime, health_routes, open_runtime, settle_heap
from zcbot_gateway import prebuild
from zcbot_gateway.apidocs import install_docs
from zcbot_gateway.config import GatewaySettings
from zcbot_gateway.errors import install_error_handlers
from zcbot_gateway.hooks import init_hooks, run_shutdown_hooks, run_startup_hooks
from zcbot_gateway.openapi_docs import install_openapi
from zcbot_gateway.prebuild import build_included_routes
from zcbot_gateway.routes import auth as auth_routes
from zcbot_gateway.routes import tasks as task_routes
from zcbot_gateway.throttle import LoginThrottle

log = logging.getLogger(__name__)

@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: GatewaySettings = app.state.settings
    rt = await open_runtime("gateway", settings)
    app.state.rt = rt
    try:
        await run_startup_hooks(app)
        settle_heap()
        rt.started.set()
        log.info("gateway started")
        yield
    finally:
        rt.stopping.set()
        await run_shutdown_hooks(app)
        app.state.rt = None
        await close_runtime(rt)
        log.info("gateway stopped")


def _include_routers(app: FastAPI) -> None:
    from zcbot_gateway import file_history_prune
    from zcbot_gateway.routes import channels, extra, file_versions, runs, schedules, skills
    from zcbot_gateway.routes.pages import install_pages

    install_pages(app)  # dev SPA at `/`, assets at /static
    for router in (*extra.ROUTERS, file_versions.router, runs.router, schedules.router, skills.router, channels.router):
        app.include_router(router)
    runs.install(app)
    file_history_prune.install(app)
    channels.install(app)  # closes the iLink HTTP client on shutdown


def create_app(settings: Settings) -> FastAPI:
    """The app on `settings`: a `GatewaySettings` as given, a shared `Settings` extended with the
    gateway's knobs from the environment (explicit values win)."""
    settings = GatewaySettings.extend(settings)
    app = FastAPI(
        title="zcbot gateway",
        version=__version__,
        description=("zcbot /v1 API: tasks, runs (SSE), files, auth. Every error is RFC 9457 problem details "
                     "(`application/problem+json`: type, title, status, detail, code; `errors` on a 422); every "
                     "list is `{items, total, page, page_size}`."),
        docs_url=None,  # apidocs.py: /docs and /redoc from local assets
        redoc_url=None,
        openapi_url="/openapi.json",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.rt = None
    app.state.login_throttle = LoginThrottle(settings.zcbot_login_failures_per_minute)
    init_hooks(app)

    # Browsers on other origins (the platform UI, seed 003 §7.2): in production only the allowlist,
    # locally any origin unless a list is given. Tokens travel in a header, never a cookie, so no
    # credentials mode is needed.
    origins = settings.cors_origins or (["*"] if settings.zcbot_env == "local" else [])
    if origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["*"],
            allow_headers=["*"],
            expose_headers=["*"],
            max_age=600,
        )
    install_error_handlers(app)
    install_openapi(app)
    install_docs(app)
    health_routes(app, lambda: app.state.rt, settings.zcbot_instance_id)
    app.include_router(auth_routes.router)
    app.include_router(task_routes.router)
    _include_routers(app)
    if prebuild.AT_CREATION:
        build_included_routes(app)  # not on each router's first request (prebuild.py)
    return app
