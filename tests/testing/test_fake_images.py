"""The fake's images endpoint refuses what Volcengine ARK refuses (issue 40), so a client sending a
reference image as a path or bare base64, an empty prompt or an unknown size fails in tests as it
would in production; a valid request gets ARK's documented shape with a real PNG."""

from __future__ import annotations

import base64
import io

import httpx
import pytest
from PIL import Image

from zcbot_fakellm import FakeLLM

PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()


@pytest.mark.parametrize(("body", "says"), [
    ({"model": "m", "prompt": "", "size": "2K"}, "prompt"),
    ({"model": "m", "prompt": "p", "size": "huge"}, "size"),
    ({"prompt": "p"}, "model"),
    ({"model": "m", "prompt": "p", "image": "photo.png"}, "data URL"),
    ({"model": "m", "prompt": "p", "image": ["iVBORw0KGgo="]}, "data URL"),
    ({"model": "m", "prompt": "p", "image": [PNG] * 11}, "1 to 10"),
    ({"model": "m", "prompt": "p", "response_format": "png"}, "response_format"),
])
async def test_bad_requests_are_refused_like_ark(body: dict, says: str) -> None:
    async with FakeLLM() as fake, httpx.AsyncClient() as client:
        r = await client.post(f"{fake.base_url}/images/generations", json=body)
    assert r.status_code == 400 and says in r.json()["error"]["message"], r.text
    assert r.json()["error"]["code"] == "InvalidParameter"


async def test_a_valid_request_gets_arks_shape_and_a_png() -> None:
    async with FakeLLM() as fake, httpx.AsyncClient() as client:
        body = {"model": "doubao-seedream-4-0-250828", "prompt": "猫", "size": "2K", "response_format": "b64_json",
                "image": [PNG]}
        r = await client.post(f"{fake.base_url}/images/generations", json=body)
        url = await client.post(f"{fake.base_url}/images/generations", json={**body, "response_format": "url"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["model"] == body["model"] and out["usage"]["generated_images"] == 1
    (item,) = out["data"]
    assert item["size"] == "2048x2048"
    assert Image.open(io.BytesIO(base64.b64decode(item["b64_json"]))).format == "PNG"
    assert url.json()["data"][0]["url"].endswith(".png") and fake.image_requests == [body, {**body, "response_format": "url"}]
