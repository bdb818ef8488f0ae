"""Build every included router's routes when the app is created, not on its first request (issue 28).

FastAPI (since 0.137) includes a router lazily: `include_router` appends one node, and the router's
routes — each endpoint's signature analysed, its dependencies resolved, a pydantic field made per
parameter — are built the first time a request walks that node. Here that was ~30 ms on the first
request to each router (the first message's POST, the first login, the first task list), 30+ routes
at a time, all of it paid by a user after "zcbot is up". `build_included_routes` walks them once at
start-up through the node's own `effective_route_contexts()`, the method FastAPI's `url_path_for`
walks; on a FastAPI without lazy inclusion no node has it and nothing happens.
"""

from __future__ import annotations

import fastapi.routing
from fastapi import FastAPI

AT_CREATION = True
"""`create_app` builds the routes at once (production). A test hook: the test suites turn it off
(tests/conftest.py), where hundreds of apps are created in one process, ~200 ms of routes each,
most of them serving a handful of requests; tests/gateway/test_route_prebuild.py turns it back on."""


def build_included_routes(app: FastAPI) -> int:
    """Build the routes of every router included in `app`; the number of routes built."""
    built = 0
    for route in app.router.routes:
        contexts = getattr(route, "effective_route_contexts", None)
        if callable(contexts):
            for context in contexts():
                built += 1
                _endpoint_context(context)
    return built


def _endpoint_context(route: object) -> None:
    """FastAPI (0.16x) also reads each endpoint's source file and tokenizes its definition on the
    endpoint's first request (`_extract_endpoint_context`, for error messages; cached by function):
    3-4 ms per endpoint, paid by the first message's POST and event stream. Done here instead; an
    internal of FastAPI, so absent it nothing happens."""
    extract = getattr(fastapi.routing, "_extract_endpoint_context", None)
    call = getattr(getattr(route, "dependant", None), "call", None)
    if callable(extract) and call is not None:
        extract(call)
