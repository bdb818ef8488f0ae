"""Every router's routes are built when the app is created (issue 28): FastAPI includes routers lazily,
and the first request to each one used to build its routes (~30 ms, paid by the first message's POST)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import routing

from zcbot_core.platform.config import Settings
from zcbot_gateway.app import create_app
from zcbot_gateway.prebuild import build_included_routes


@pytest.fixture(autouse=True)
def _prebuild_at_creation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The production path (tests/conftest.py turns the prebuild off for the other suites)."""
    from zcbot_gateway import prebuild

    monkeypatch.setattr(prebuild, "AT_CREATION", True)


async def test_the_first_requests_build_no_route(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    original = routing._EffectiveRouteContext.from_api_route

    def recording(**kwargs: Any) -> Any:
        built.append(kwargs["original_route"].path)
        return original(**kwargs)

    monkeypatch.setattr(routing._EffectiveRouteContext, "from_api_route", staticmethod(recording))
    app = create_app(settings)
    assert any(path.endswith("/messages") for path in built), built  # the runs router is included lazily
    at_creation = len(built)
    built.clear()
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test") as client:
        for method, path in (("POST", "/v1/tasks/t1/messages"), ("GET", "/v1/tasks/t1/events"), ("GET", "/v1/tasks"),
                             ("POST", "/v1/auth/login"), ("GET", "/v1/schedules"), ("GET", "/no/such/route")):
            answer = await client.request(method, path, json={})
            assert answer.status_code < 500 or answer.status_code == 503, (path, answer.status_code)
    assert built == []  # nothing left for a request to build
    assert build_included_routes(app) == at_creation  # built once: a second walk builds nothing new...
    assert built == []  # ...and constructs nothing


async def test_the_first_requests_read_no_endpoint_source(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """FastAPI reads and tokenizes an endpoint's source on its first request (error-message context):
    done at creation, so the first message's POST and event stream do not pay it."""
    import inspect

    app = create_app(settings)
    read: list[str] = []
    original = inspect.getsourcelines

    def recording(obj: Any) -> Any:
        read.append(getattr(obj, "__name__", "?"))
        return original(obj)

    monkeypatch.setattr(inspect, "getsourcelines", recording)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test") as client:
        for method, path in (("POST", "/v1/tasks/t1/messages"), ("GET", "/v1/tasks/t1/events"), ("GET", "/v1/tasks"),
                             ("POST", "/v1/auth/login")):
            answer = await client.request(method, path, json={})
            assert answer.status_code < 500 or answer.status_code == 503, (path, answer.status_code)
    assert read == []
