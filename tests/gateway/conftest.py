"""Gateway fixtures: the real app (real NATS + Postgres from the root fixtures) over ASGI.

- `app_client`: `create_app(settings)` with its lifespan entered, wrapped in an `httpx.AsyncClient`
  (`client.app` is the FastAPI app; `client.app.state.rt.sessions()` opens a DB session).
  App exceptions become 500 responses, as in production.
- `start_app`: factory `async with start_app(settings) as client` for a second app (e.g. another
  JWT_SECRET) in the same test.
- `make_user`: `await make_user(client, user_id, **profile) -> headers` (platform-key login).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import pytest

from zcbot_core.platform.config import Settings
from zcbot_gateway.app import create_app

Headers = dict[str, str]
MakeUser = Callable[..., Awaitable[Headers]]


@asynccontextmanager
async def running_app(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test") as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


@pytest.fixture
def start_app() -> Callable[[Settings], AbstractAsyncContextManager[httpx.AsyncClient]]:
    return running_app


@pytest.fixture
async def app_client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with running_app(settings) as client:
        yield client


async def login(client: httpx.AsyncClient, user_id: str, **profile: Any) -> Headers:
    settings: Settings = client.app.state.settings  # type: ignore[attr-defined]
    resp = await client.post(
        "/v1/auth/login", json={"user_id": user_id, "platform_key": settings.platform_key, **profile}
    )
    assert resp.status_code == 200, resp.text
    return {"Authorization": f"Bearer {resp.json()['token']}"}


@pytest.fixture
def make_user() -> MakeUser:
    return login
