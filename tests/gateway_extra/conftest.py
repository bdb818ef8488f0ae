"""Fixtures for the files / memory / shortcuts / export / admin routes (same real app as tests/gateway).

- `app_client`: `create_app(settings)` with its lifespan entered, over ASGI (`client.app` is the app).
  The extra routers come from `zcbot_gateway.routes.extra.ROUTERS`; they are included here only
  when `create_app` did not include them already.
- `make_user(client, user_id, **profile) -> headers` (platform-key login); `make_admin` also sets
  `users.role = 'admin'` in the DB. More helpers in `extra_helpers.py`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from extra_helpers import Headers, login, running_app, set_role

from zcbot_core.platform.config import Settings


@pytest.fixture
async def app_client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with running_app(settings) as client:
        yield client


@pytest.fixture
def make_user() -> Callable[..., Awaitable[Headers]]:
    return login


@pytest.fixture
def make_admin() -> Callable[..., Awaitable[Headers]]:
    async def make(client: httpx.AsyncClient, user_id: str, **profile: Any) -> Headers:
        await login(client, user_id, **profile)
        await set_role(client, user_id, "admin")
        return await login(client, user_id, **profile)  # the role change revoked the first token

    return make
