"""Admin user routes: the `zcbot user` operations over HTTP, with the same rules (users_admin)."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers.gateway import set_role

pytestmark = pytest.mark.asyncio

BASE = "/v1/admin/users"


async def _password_login(client: httpx.AsyncClient, email: str, password: str) -> int:
    resp = await client.post("/v1/auth/login_password", json={"email": email, "password": password})
    return resp.status_code


async def test_admin_user_routes_follow_the_cli_rules(app_client: httpx.AsyncClient, make_user, make_admin) -> None:
    user_h = await make_user(app_client, "plain")
    for method, url, body in [("GET", BASE, None), ("POST", BASE, {"email": "x@y.z", "password": "long-enough-1"}),
                              ("PUT", f"{BASE}/x@y.z/role", {"role": "admin"}),
                              ("PUT", f"{BASE}/x@y.z/password", {"password": "long-enough-1"}),
                              ("POST", f"{BASE}/x@y.z/disable", None), ("POST", f"{BASE}/x@y.z/enable", None)]:
        resp = await app_client.request(method, url, json=body, headers=user_h)
        assert resp.status_code == 403, (method, url, resp.text)
    h = await make_admin(app_client, "root")

    made = await app_client.post(BASE, json={"email": "Ann@Example.com", "password": "ann-secret-1"}, headers=h)
    assert made.status_code == 201 and made.json()["changes"] == ["created with role user"], made.text
    assert made.json()["email"] == "ann@example.com"
    again = await app_client.post(BASE, json={"email": "ann@example.com", "password": "ann-other-2"}, headers=h)
    assert again.status_code == 409 and "already exists" in again.json()["detail"]
    upd = await app_client.post(BASE, json={"email": "ann@example.com", "password": "ann-other-2", "role": "admin",
                                            "update": True}, headers=h)
    assert upd.status_code == 201 and upd.json()["changes"] == ["password changed", "role user -> admin"]

    role = await app_client.put(f"{BASE}/ann@example.com/role", json={"role": "user"}, headers=h)
    assert role.json() == {"email": "ann@example.com", "role": "user", "previous_role": "admin"}
    weak = await app_client.put(f"{BASE}/ann@example.com/password", json={"password": "short"}, headers=h)
    assert weak.status_code == 400
    ok = await app_client.put(f"{BASE}/ann@example.com/password", json={"password": "ann-third-3"}, headers=h)
    assert ok.status_code == 200 and ok.json()["password_changed"] is True
    assert await _password_login(app_client, "ann@example.com", "ann-third-3") == 200
    missing = await app_client.put(f"{BASE}/nobody@example.com/role", json={"role": "user"}, headers=h)
    assert missing.status_code == 404
    bad_role = await app_client.put(f"{BASE}/ann@example.com/role", json={"role": "root"}, headers=h)
    assert bad_role.status_code == 422

    disabled = await app_client.post(f"{BASE}/ann@example.com/disable", headers=h)
    assert disabled.status_code == 200 and disabled.json()["role"] == "disabled"
    listed = (await app_client.get(BASE, headers=h)).json()
    rows = {r["email"]: r for r in listed["items"] if r["email"]}
    assert listed["total"] == len(listed["items"])
    assert rows["ann@example.com"]["role"] == "disabled" and rows["ann@example.com"]["has_password"] is False
    assert await _password_login(app_client, "ann@example.com", "ann-third-3") == 403  # a wrong password answer
    assert rows["ann@example.com"]["status"] == "disabled"

    # A disabled user's password or role is not changed as if it could log in: enable it instead.
    for method, url, body in [("PUT", f"{BASE}/ann@example.com/password", {"password": "ann-fourth-4"}),
                              ("PUT", f"{BASE}/ann@example.com/role", {"role": "admin"})]:
        refused = await app_client.request(method, url, json=body, headers=h)
        assert refused.status_code == 409 and "is disabled" in refused.json()["detail"], refused.text
        assert "/enable" in refused.json()["detail"]
    enabled = await app_client.post(f"{BASE}/ann@example.com/enable", headers=h)  # no body: one is generated
    assert enabled.status_code == 200 and enabled.json()["role"] == "user", enabled.text
    assert await _password_login(app_client, "ann@example.com", enabled.json()["password"]) == 200
    again = await app_client.post(f"{BASE}/ann@example.com/enable", json={"password": "ann-fifth-55"}, headers=h)
    assert again.status_code == 409 and "not disabled" in again.json()["detail"]
    assert (await app_client.post(f"{BASE}/nobody@example.com/enable", headers=h)).status_code == 404
    await app_client.post(f"{BASE}/ann@example.com/disable", headers=h)
    chosen = await app_client.post(f"{BASE}/ann@example.com/enable", json={"password": "ann-fifth-55"}, headers=h)
    assert chosen.status_code == 200 and "password" not in chosen.json()
    assert await _password_login(app_client, "ann@example.com", "ann-fifth-55") == 200
    listed = (await app_client.get(BASE, headers=h)).json()
    assert [r["status"] for r in listed["items"] if r["email"] == "ann@example.com"] == ["active"]


async def test_the_last_admin_cannot_be_removed_over_http(app_client: httpx.AsyncClient, make_admin) -> None:
    h = await make_admin(app_client, "root")
    made = await app_client.post(BASE, json={"email": "boss@example.com", "password": "boss-secret-1",
                                             "role": "admin"}, headers=h)
    assert made.status_code == 201
    await set_role(app_client, "root", "user")  # boss@example.com is now the only admin
    login = await app_client.post("/v1/auth/login_password", json={"email": "boss@example.com",
                                                                   "password": "boss-secret-1"})
    assert login.status_code == 200, login.text
    boss = {"Authorization": f"Bearer {login.json()['token']}"}
    demote = await app_client.put(f"{BASE}/boss@example.com/role", json={"role": "user"}, headers=boss)
    assert demote.status_code == 409 and "only admin" in demote.json()["detail"]
    disable = await app_client.post(f"{BASE}/boss@example.com/disable", headers=boss)
    assert disable.status_code == 409
    overwrite = await app_client.post(BASE, json={"email": "boss@example.com", "password": "boss-secret-2",
                                                  "update": True}, headers=boss)
    assert overwrite.status_code == 409
    rows = (await app_client.get(BASE, headers=boss)).json()["items"]
    assert [r["role"] for r in rows if r["email"] == "boss@example.com"] == ["admin"]
