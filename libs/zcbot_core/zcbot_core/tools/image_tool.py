"""The `look_at_image` host tool (issue 25; seed 003 §8.1): the run's model asks a cheap vision
model (`ZCBOT_VISION_PROFILE`) a question about an image in the user's folder.

The image is read on the host through `safe_fs` (never through a link, never outside the user
root), decoded and downsized with Pillow (longer side at most `ZCBOT_VISION_MAX_SIDE`; refused past
`MAX_PIXELS` before decoding, so a decompression bomb costs nothing), re-encoded (JPEG, PNG when it
has transparency) and sent as a data URL with the question. The call reserves against the user's
budget like a chat call and is recorded as a usage event of kind `vision`.
"""

from __future__ import annotations

import asyncio
import base64
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core import safe_fs
from zcbot_core.accounts import budgets
from zcbot_core.accounts.usage import record_usage
from zcbot_core.agent.lang import user_language
from zcbot_core.llm.profiles import get_profile
from zcbot_core.platform.config import ConfigError
from zcbot_core.safe_fs import paths
from zcbot_core.tools.push_tool import PushHostTool as HostTool
from zcbot_core.tools.push_tool import _user_relative
from zcbot_core.tools.results import ToolOutcome, required_text

MAX_FILE_BYTES = 30 * 1024 * 1024
MAX_PIXELS = 60_000_000
MAX_QUESTION = 2000
VISION_TIMEOUT = 120.0

LOOK_AT_IMAGE_SCHEMA: dict[str, Any] = {"type": "function", "function": {
    "name": "look_at_image",
    "description": ("Ask a vision model about an image file (PNG, JPEG, GIF, WebP, BMP) in the task folder: "
                    "describe a figure, read a screenshot or a chart, check a rendered page. Returns its answer."),
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string", "description": "The image, relative to the task folder (or /workspace/...)."},
        "question": {"type": "string", "description": "What to look for or answer about the image."},
    }, "required": ["path", "question"]}}}


class ImageProblem(Exception):
    pass


@dataclass(frozen=True)
class Prepared:
    data_url: str
    width: int
    height: int


def prepare_image(data: bytes, max_side: int) -> Prepared:
    """Decode, downsize and re-encode `data` as a data URL (ImageProblem when it is no usable image)."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        if image.width * image.height > MAX_PIXELS:
            raise ImageProblem(f"the image is {image.width}x{image.height} pixels; at most {MAX_PIXELS} are read")
        image.draft("RGB", (max_side, max_side))  # JPEG: decode at a reduced scale straight away
        image = ImageOps.exif_transpose(image)
        image.thumbnail((max_side, max_side))
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError) as exc:
        raise ImageProblem(f"not a readable image ({exc.__class__.__name__})") from None
    out = io.BytesIO()
    if image.mode in ("RGBA", "LA", "P") and ("transparency" in image.info or image.mode != "P"):
        image.convert("RGBA").save(out, "PNG", optimize=True)
        mime = "image/png"
    else:
        image.convert("RGB").save(out, "JPEG", quality=85)
        mime = "image/jpeg"
    return Prepared(f"data:{mime};base64,{base64.b64encode(out.getvalue()).decode('ascii')}", image.width, image.height)


def _read(user_root: Path, rel: str) -> bytes:
    with safe_fs.Root.open(user_root) as root:
        return root.read_bytes(rel, limit=MAX_FILE_BYTES, strict=True)


def register_image_tool(toolbox: Any, settings: Any, sessions: async_sessionmaker[AsyncSession], *,
                        profile_name: str, max_side: int) -> None:
    """`settings`: the service's `Settings` (profiles, storage root, budget defaults)."""
    user_id, task_id, run_id = toolbox.user_id, toolbox.task_id, toolbox.run_id
    cwd = getattr(toolbox, "cwd", "") or ""
    root = paths.user_root(settings.storage_root, user_id)
    defaults = budgets.Defaults.from_settings(settings)

    async def handler(args: dict[str, Any]) -> ToolOutcome:
        from zcbot_core.llm.client import LlmCallError, stream_chat  # litellm: only where calls are made

        question = required_text(args, "question", MAX_QUESTION, "what to look for in the image")
        if isinstance(question, ToolOutcome):
            return question
        try:
            rel = _user_relative(cwd, str(args.get("path") or ""))
            data = await asyncio.to_thread(_read, root, rel)
            prepared = await asyncio.to_thread(prepare_image, data, max_side)
            profile = get_profile(settings, profile_name)
        except (paths.PathRejected, ImageProblem, ConfigError) as exc:
            return ToolOutcome.failure(str(exc))
        except OSError as exc:
            return ToolOutcome.failure(f"could not read the image: {exc.strerror or exc}")
        messages = [{"role": "user", "content": [
            {"type": "text", "text": question.strip()},
            {"type": "image_url", "image_url": {"url": prepared.data_url}}]}]
        lang = user_language([{"role": "user", "content": question}])
        try:
            async with sessions() as session:
                held = await budgets.reserve(session, user_id=user_id, run_id=run_id, defaults=defaults, lang=lang,
                                             amount=budgets.worst_case(profile, messages))
        except budgets.BudgetExceeded as exc:
            return ToolOutcome.failure(str(exc))

        async def ignore(_: str) -> None:
            return None

        try:
            result = await stream_chat(profile, messages, None, ignore, ignore, timeout=VISION_TIMEOUT)
            async with sessions() as session, session.begin():
                await record_usage(session, user_id=user_id, task_id=task_id, run_id=run_id, kind="vision",
                                   model_profile=profile.name, prompt_tokens=result.usage.prompt_tokens,
                                   completion_tokens=result.usage.completion_tokens,
                                   cached_tokens=result.usage.cached_tokens, cost_usd=result.cost_usd)
        except LlmCallError as exc:
            return ToolOutcome.failure(f"the vision model failed: {exc}")
        finally:
            async with sessions() as session:
                await budgets.release(session, held)
        answer = str(result.message.get("content") or "").strip()
        if not answer:
            return ToolOutcome.failure("the vision model returned no answer")
        return ToolOutcome.make(True, f"{answer}\n\n(image {rel}, sent at {prepared.width}x{prepared.height})")

    toolbox.add_host_tool(HostTool(schema=LOOK_AT_IMAGE_SCHEMA, handler=handler))
