"""Gateway fixtures: the real app (real NATS + Postgres from the root fixtures) over ASGI.

- `app_client`: `create_app(settings)` with its lifespan entered, wrapped in an `httpx.AsyncClient`
  (`client.app` is the FastAPI app; `client.app.state.rt.sessions()` opens a DB session).
  App exceptions become 500 responses, as in production.
- `start_app`: factory `async with start_app(settings) as client` for a second app (e.g. another
  JWT_SECRET) in the same test.
- `make_user`: `await make_user(client, user_id, **profile) -> headers` (platform-key login);
  `make_admin` also sets `users.role = 'admin'` in the DB. More helpers in tests/helpers/gateway.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
import pytest

from tests.helpers.gateway import Headers, login, running_app, set_role
from zcbot_core.platform.config import Settings

MakeUser = Callable[..., Awaitable[Headers]]


@pytest.fixture
def start_app() -> Callable[[Settings], AbstractAsyncContextManager[httpx.AsyncClient]]:
    return running_app


@pytest.fixture
async def app_client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with running_app(settings) as client:
        yield client


@pytest.fixture
def make_user() -> MakeUser:
    return login


@pytest.fixture
def make_admin() -> MakeUser:
    async def make(client: httpx.AsyncClient, user_id: str, **profile: Any) -> Headers:
        await login(client, user_id, **profile)
        await set_role(client, user_id, "admin")
        return await login(client, user_id, **profile)  # the role change revoked the first token

    return make
