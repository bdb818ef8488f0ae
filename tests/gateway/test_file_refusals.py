"""Refusals the page words by their own `code`: the files API's delete and rename (issue 37), and WeCom
binding on a gateway without WeCom (issue 40); the page says them in the user's language, the
English detail keeps the specifics."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.asyncio


async def test_delete_and_rename_refusals_have_codes(app_client: httpx.AsyncClient, make_user) -> None:
    h = await make_user(app_client, "refusals-ren")
    assert (await app_client.post("/v1/tasks", headers=h, json={"name": "任务", "working_dir": "项目"})).status_code == 201
    for path in ("项目/子", "空的", "满的/里面"):
        assert (await app_client.post("/v1/files/mkdir", headers=h, json={"path": path})).status_code == 201

    async def post(op: str, **body: str) -> tuple[int, str, str]:
        resp = await app_client.post(f"/v1/files/{op}", headers=h, json=body)
        out = resp.json()
        return resp.status_code, out.get("code", ""), out.get("detail", "")

    assert (await post("delete", path=""))[:2] == (400, "root_refused")
    assert (await post("rename", path="", new_name="x"))[:2] == (400, "root_refused")
    assert (await post("rename", path="空的", new_name="空的"))[:2] == (400, "same_name")
    status, code, detail = await post("rename", path="空的", new_name="满的")
    assert (status, code) == (409, "name_taken") and "满的" in detail
    assert (await post("delete", path="满的"))[:2] == (400, "folder_not_empty")
    status, code, detail = await post("delete", path="项目")
    assert (status, code) == (409, "folder_in_use") and "项目" in detail
    assert (await post("delete", path="项目/子"))[:2] == (200, "")
    assert (await post("delete", path="空的"))[:2] == (200, "")
    assert (await post("delete", path="空的"))[:2] == (404, "not_found")


async def test_wecom_binding_without_wecom_configured_names_it(app_client: httpx.AsyncClient, make_user) -> None:
    """The page says "服务器没有配置企业微信" by this code (not the generic service_unavailable)."""
    h = await make_user(app_client, "refusals-wen")
    for method, path, body in [("PUT", "/v1/channels/wecom", {"userid": "someone"}),
                               ("POST", "/v1/channels/wecom/oauth", None)]:
        resp = await app_client.request(method, path, headers=h, json=body)
        assert (resp.status_code, resp.json()["code"]) == (503, "wecom_not_configured"), resp.text
