"""Issue 22, the HTTP half: login throttling (429 + Retry-After), token revocation, production's CORS
allowlist. The real gateway app over ASGI on the real PostgreSQL and NATS of the root fixtures;
the throttle's clock is the only thing the tests move by hand (a minute is not waited for)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
import pytest
from sqlalchemy import delete, update

from zcbot_core.accounts import auth
from zcbot_core.db.models import User
from zcbot_core.platform.config import Settings
from zcbot_gateway.config import GatewaySettings
from zcbot_gateway.throttle import LoginThrottle

LIMIT = 3
PASSWORD = "correct horse 1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(app_client: httpx.AsyncClient) -> Clock:
    clock = Clock()
    app_client.app.state.login_throttle = LoginThrottle(LIMIT, clock=clock)  # type: ignore[attr-defined]
    return clock


@asynccontextmanager
async def from_address(app_client: httpx.AsyncClient, host: str) -> AsyncIterator[httpx.AsyncClient]:
    """The same app, reached from another client address."""
    transport = httpx.ASGITransport(app=app_client.app, client=(host, 40000))  # type: ignore[attr-defined]
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test") as client:
        yield client


async def set_user(client: httpx.AsyncClient, user_id: str, **values: object) -> None:
    async with client.app.state.rt.sessions() as s:  # type: ignore[attr-defined]
        await s.execute(update(User).where(User.user_id == user_id).values(**values))
        await s.commit()


async def with_password(client: httpx.AsyncClient, make_user: Callable, user_id: str) -> None:
    await make_user(client, user_id)
    await set_user(client, user_id, email=f"{user_id}@example.com", password_hash=auth.hash_password(PASSWORD))


async def password_login(client: httpx.AsyncClient, user_id: str, password: str) -> httpx.Response:
    return await client.post("/v1/auth/login_password", json={"email": f"{user_id}@example.com", "password": password})


def assert_throttled(resp: httpx.Response, max_wait: int = 60) -> int:
    assert resp.status_code == 429, resp.text
    retry_after = int(resp.headers["retry-after"])
    assert 1 <= retry_after <= max_wait
    assert isinstance(resp.json()["detail"], str) and str(retry_after) in resp.json()["detail"]
    return retry_after


# ---- throttling ----------------------------------------------------------------------------


async def test_failed_password_logins_are_throttled_per_account(app_client, make_user, clock: Clock) -> None:
    await with_password(app_client, make_user, "hana")
    await with_password(app_client, make_user, "ivan")
    for i in range(LIMIT):
        async with from_address(app_client, f"10.0.0.{i + 1}") as c:  # a different address each time
            assert (await password_login(c, "hana", "wrong password")).status_code == 403
    async with from_address(app_client, "10.0.0.99") as c:
        # The account is throttled from any address, even for the right password, before bcrypt runs.
        assert_throttled(await password_login(c, "hana", PASSWORD))
        assert (await password_login(c, "ivan", PASSWORD)).status_code == 200  # other accounts are not
    clock.now += 20
    async with from_address(app_client, "10.0.0.99") as c:
        assert assert_throttled(await password_login(c, "hana", PASSWORD)) == 40  # the oldest failure's age
    clock.now += 41
    async with from_address(app_client, "10.0.0.99") as c:
        assert (await password_login(c, "hana", PASSWORD)).status_code == 200


async def test_failed_logins_are_throttled_per_address(app_client, make_user, clock: Clock) -> None:
    for user in ("jack", "kate"):
        await with_password(app_client, make_user, user)
    async with from_address(app_client, "192.0.2.7") as attacker:
        for i in range(LIMIT):  # one guess at each of several accounts
            assert (await password_login(attacker, f"victim{i}", "guess")).status_code == 403
        assert_throttled(await password_login(attacker, "jack", PASSWORD))
        # The platform login from that address is throttled too.
        assert_throttled(await attacker.post("/v1/auth/login", json={"user_id": "jack", "platform_key": "guess"}))
    async with from_address(app_client, "192.0.2.8") as honest:
        assert (await password_login(honest, "jack", PASSWORD)).status_code == 200


async def test_failed_platform_keys_are_throttled(app_client, settings: Settings, clock: Clock) -> None:
    async with from_address(app_client, "198.51.100.1") as c:
        for _ in range(LIMIT):
            resp = await c.post("/v1/auth/login", json={"user_id": "lena", "platform_key": "wrong"})
            assert resp.status_code == 403
        assert_throttled(await c.post("/v1/auth/login", json={"user_id": "lena", "platform_key": settings.platform_key}))
    async with from_address(app_client, "198.51.100.2") as c:
        ok = await c.post("/v1/auth/login", json={"user_id": "lena", "platform_key": settings.platform_key})
        assert ok.status_code == 200
        # Successful sign-ins never count: a platform signing many users in is not slowed down.
        for i in range(LIMIT * 3):
            resp = await c.post("/v1/auth/login", json={"user_id": f"u{i}", "platform_key": settings.platform_key})
            assert resp.status_code == 200


async def test_wrong_old_passwords_are_throttled(app_client, make_user, clock: Clock) -> None:
    """A stolen token is no password oracle: change_password's old-password check is throttled too."""
    await with_password(app_client, make_user, "rita")
    headers = _bearer(await password_login(app_client, "rita", PASSWORD))
    url = "/v1/auth/change_password"
    for i in range(LIMIT):
        r = await app_client.post(url, headers=headers, json={"old_password": f"guess {i}", "new_password": "x" * 10})
        assert r.status_code == 403
    assert_throttled(await app_client.post(url, headers=headers, json={"old_password": PASSWORD, "new_password": "x" * 10}))
    clock.now += 61
    r = await app_client.post(url, headers=headers, json={"old_password": PASSWORD, "new_password": "new password 3"})
    assert r.status_code == 200


async def test_throttle_limit_comes_from_settings(settings: Settings, start_app) -> None:
    """The configured limit, on the app as built (no clock override): the issue's 40 guesses in a few
    seconds now get 429 after the tenth."""
    async with start_app(GatewaySettings.extend(settings).model_copy(update={"zcbot_login_failures_per_minute": 10})) as client:
        codes = [(await password_login(client, "nobody", f"guess {i}")).status_code for i in range(12)]
        assert codes == [403] * 10 + [429, 429]
    async with start_app(GatewaySettings.extend(settings).model_copy(update={"zcbot_login_failures_per_minute": 0})) as client:  # off
        codes = {(await password_login(client, "nobody", f"guess {i}")).status_code for i in range(12)}
        assert codes == {403}


# ---- token revocation ----------------------------------------------------------------------


async def _refused_everywhere(client: httpx.AsyncClient, headers: dict[str, str], task_id: str) -> None:
    """Every kind of authenticated route refuses the token: the user-exists check (CurrentUser), the
    loaded row (CurrentUserRow) and the events route's own statement (TokenUser)."""
    for method, path in [("GET", "/v1/me"), ("GET", "/v1/tasks"), ("POST", f"/v1/tasks/{task_id}/messages"),
                         ("GET", f"/v1/tasks/{task_id}/events")]:
        resp = await client.request(method, path, headers=headers, json={"content": "hi"})
        assert resp.status_code == 401, (path, resp.text)
        assert resp.headers["www-authenticate"] == "Bearer"


async def _task(client: httpx.AsyncClient, headers: dict[str, str]) -> str:
    resp = await client.post("/v1/tasks", headers=headers, json={"name": "t"})
    assert resp.status_code == 201, resp.text
    return resp.json()["task_id"]


def _bearer(resp: httpx.Response) -> dict[str, str]:
    assert resp.status_code == 200, resp.text
    return {"Authorization": f"Bearer {resp.json()['token']}"}


async def test_password_change_revokes_older_tokens(app_client, make_user) -> None:
    await with_password(app_client, make_user, "mona")
    first = _bearer(await password_login(app_client, "mona", PASSWORD))
    second = _bearer(await password_login(app_client, "mona", PASSWORD))  # e.g. another device
    task_id = await _task(app_client, first)
    changed = await app_client.post("/v1/auth/change_password", headers=first,
                                    json={"old_password": PASSWORD, "new_password": "new password 2"})
    assert changed.status_code == 200, changed.text
    await _refused_everywhere(app_client, first, task_id)
    await _refused_everywhere(app_client, second, task_id)
    fresh = _bearer(await password_login(app_client, "mona", "new password 2"))
    assert (await app_client.get("/v1/me", headers=fresh)).status_code == 200
    assert (await app_client.get(f"/v1/tasks/{task_id}", headers=fresh)).status_code == 200


async def test_role_change_revokes_older_tokens_and_profile_updates_do_not(app_client, make_user) -> None:
    headers = await make_user(app_client, "nina")
    task_id = await _task(app_client, headers)
    await make_user(app_client, "nina", name="Nina N.")  # a profile update at sign-in keeps tokens valid
    assert (await app_client.get("/v1/me", headers=headers)).json()["name"] == "Nina N."
    await set_user(app_client, "nina", role="admin")  # any writer: the database bumps the version
    await _refused_everywhere(app_client, headers, task_id)
    fresh = await make_user(app_client, "nina")
    assert (await app_client.get("/v1/me", headers=fresh)).json()["role"] == "admin"


async def test_deleting_a_user_revokes_its_tokens_even_if_the_id_returns(app_client, make_user) -> None:
    headers = await make_user(app_client, "omar")
    task_id = await _task(app_client, headers)
    async with app_client.app.state.rt.sessions() as s:  # type: ignore[attr-defined]
        await s.execute(delete(User).where(User.user_id == "omar"))
        await s.commit()
    await _refused_everywhere(app_client, headers, task_id)
    again = await make_user(app_client, "omar")  # a new account under the same id
    await _refused_everywhere(app_client, headers, task_id)
    assert (await app_client.get("/v1/me", headers=again)).status_code == 200


async def test_a_token_without_a_version_is_refused(app_client, make_user, settings: Settings) -> None:
    import time

    import jwt

    await make_user(app_client, "pia")
    now = int(time.time())
    legacy = jwt.encode({"sub": "pia", "iat": now, "exp": now + 60}, settings.jwt_secret, algorithm="HS256")
    resp = await app_client.get("/v1/me", headers={"Authorization": f"Bearer {legacy}"})
    assert resp.status_code == 401 and resp.json()["detail"] == "invalid token"


# ---- CORS in production --------------------------------------------------------------------

UI = "https://ui.example.com"


async def _preflight(client: httpx.AsyncClient, origin: str) -> httpx.Response:
    return await client.options("/v1/tasks", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})


async def test_production_cors_allows_only_the_allowlist(settings: Settings, start_app, make_user) -> None:
    prod = GatewaySettings.extend(settings).model_copy(
        update={"zcbot_env": "production", "zcbot_cors_origins": f"{UI}, http://localhost:3000"})
    async with start_app(prod) as client:
        allowed = await _preflight(client, UI)
        assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == UI
        assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
        headers = await make_user(client, "quinn")
        listed = await client.get("/v1/tasks", headers={**headers, "Origin": UI})
        assert listed.status_code == 200 and listed.headers["access-control-allow-origin"] == UI
        for origin in ("https://evil.example", "https://ui.example.com.evil.example", "null"):
            refused = await _preflight(client, origin)
            assert refused.headers.get("access-control-allow-origin") is None, origin
            plain = await client.get("/v1/tasks", headers={**headers, "Origin": origin})
            assert "access-control-allow-origin" not in plain.headers, origin


@pytest.mark.parametrize("value", ["*", "ui.example.com", "https://ui.example.com/app", "ftp://x.example"])
def test_cors_origins_must_be_origins(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from zcbot_core.platform.config import ConfigError, load_settings

    monkeypatch.setenv("ZCBOT_CORS_ORIGINS", value)
    with pytest.raises(ConfigError, match="ZCBOT_CORS_ORIGINS"):
        load_settings(GatewaySettings)
