"""`generate_image` through the real stack (issue 40): the fake model asks for an image (t2i), then
an edit of an uploaded photo and of the generated image (i2i); LiteLLM's images API reaches the
fake's Seedream/ARK endpoint (`zcbot_fakellm/images.py`), which refuses a request of the wrong shape
as ARK would. The images land in the task folder, usage events of kind `image` are recorded, and
without the profile's key the tool is not offered at all."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import pytest
from PIL import Image

from tests.helpers.db import db_rows_async
from tests.helpers.stack import Stack

PROFILE = """model: openai/doubao-seedream-4-0-250828
api_base: {base}
api_key_env: ZCBOT_TEST_ARK_KEY
pricing: {{input_per_mtok: 0.0, output_per_mtok: 0.0}}
"""
DATA_URL = re.compile(r"^data:image/(png|jpeg);base64,[A-Za-z0-9+/=]+$")


def _png(color: tuple[int, int, int], size: tuple[int, int] = (300, 200)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


async def _stack(stack: Stack, monkeypatch: pytest.MonkeyPatch, key: str | None) -> Stack:
    (Path(stack.env["ZCBOT_MODELS_DIR"]) / "ark.yaml").write_text(PROFILE.format(base=stack.fake.base_url))
    monkeypatch.setenv("ZCBOT_IMAGE_PROFILE", "ark")
    monkeypatch.setenv("ZCBOT_IMAGE_COST_USD", "0.04")
    if key:
        monkeypatch.setenv("ZCBOT_TEST_ARK_KEY", key)
    await stack.add_runner()
    return stack


async def test_generate_then_edit_images_into_the_task_folder(bare_stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    stack = await _stack(bare_stack, monkeypatch, key="ark-test-key")
    token = await stack.login("iris")
    task = await stack.create_task(token, "Poster")
    folder = stack.settings.storage_root / "iris" / task["working_dir"]
    (folder / "photo.png").write_bytes(_png((200, 30, 30)))  # as an upload would leave it
    stack.fake.script("KEY-img", [
        {"tool_calls": [{"name": "generate_image", "arguments": {"prompt": "一只橘猫坐在窗台上，水彩风格",
                                                                 "path": "art/cat", "size": "2048x1152"}}]},
        {"tool_calls": [{"name": "generate_image", "arguments": {
            "prompt": "把照片里的背景换成海边", "reference_images": ["photo.png", "art/cat.png"]}}]},
        {"tool_calls": [{"name": "generate_image", "arguments": {"prompt": "x", "reference_images": ["../../etc"]}},
                        {"name": "generate_image", "arguments": {"prompt": "x", "size": "huge"}}]},
        {"text": "做好了。"},
    ])
    r = await stack.post(token, task["task_id"], "KEY-img 画一张海报")
    events = await stack.events(token, r.json()["events_url"], timeout=90)
    assert events[-1]["data"]["status"] == "ok", events[-3:]
    made, edited, outside, bad_size = [e["data"] for e in events if e["event"] == "tool_result"]
    assert made["ok"] and "as art/cat.png" in made["preview"], made["preview"]
    assert edited["ok"] and "edited from 2 reference image(s)" in edited["preview"], edited
    assert not outside["ok"] and not bad_size["ok"] and "`size`" in bad_size["preview"]

    # what reached the images API: the prompt, the size, references as data URLs (i2i only)
    t2i, i2i = stack.fake.image_requests
    assert t2i["prompt"] == "一只橘猫坐在窗台上，水彩风格" and t2i["size"] == "2048x1152"
    assert t2i["response_format"] == "b64_json" and t2i["model"] == "doubao-seedream-4-0-250828"
    assert "image" not in t2i
    assert len(i2i["image"]) == 2 and all(DATA_URL.match(u) for u in i2i["image"])
    first = Image.open(io.BytesIO(base64.b64decode(i2i["image"][0].split(",", 1)[1])))
    assert first.size == (300, 200) and first.getpixel((5, 5))[:3] == (200, 30, 30)  # the upload itself

    # saved in the task folder as real images, the edit different from the generation
    cat = Image.open(folder / "art" / "cat.png")
    [edit_path] = list((folder / "images").iterdir())
    edit = Image.open(edit_path)
    assert cat.format == edit.format == "PNG" and cat.getpixel((0, 0)) != edit.getpixel((0, 0))
    rows = await db_rows_async(stack.settings.zcbot_db_url,
                               "select kind, model_profile, cost from usage_events where task_id = %s and kind = 'image'",
                               task["task_id"])
    assert [(k, p, float(c)) for k, p, c in rows] == [("image", "ark", 0.04), ("image", "ark", 0.04)]


async def test_a_refused_request_is_a_tool_error_and_no_key_means_no_tool(bare_stack: Stack,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    stack = await _stack(bare_stack, monkeypatch, key="ark-test-key")
    stack.fake.image_error = {"status": 400, "message": "The request failed because the input text may contain "
                                                        "sensitive information.", "code": "InputTextSensitiveContentDetected"}
    stack.fake.script("KEY-refused", [
        {"tool_calls": [{"name": "generate_image", "arguments": {"prompt": "something refused"}}]},
        {"text": "无法生成。"},
    ])
    token = await stack.login("jon")
    task = await stack.create_task(token, "Refused")
    r = await stack.post(token, task["task_id"], "KEY-refused 画")
    events = await stack.events(token, r.json()["events_url"], timeout=60)
    assert events[-1]["data"]["status"] == "ok"
    (result,) = [e["data"] for e in events if e["event"] == "tool_result"]
    assert not result["ok"] and "sensitive information" in result["preview"], result
    assert not (stack.settings.storage_root / "jon" / task["working_dir"] / "images").exists()
    # the key unset: the model is not offered the tool
    monkeypatch.delenv("ZCBOT_TEST_ARK_KEY")
    stack.fake.script("KEY-nokey", [{"text": "ok"}])
    r = await stack.post(token, task["task_id"], "KEY-nokey 再试")
    await stack.events(token, r.json()["events_url"], timeout=60)
    request = next(req for req in stack.fake.requests if "KEY-nokey" in str(req["messages"]))
    offered = {t["function"]["name"] for t in request.get("tools") or []}
    assert "generate_image" not in offered and "read" in offered
