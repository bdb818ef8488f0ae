"""The `generate_image` host tool (issue 40; seed 003 §8.1): text to image, and image editing from
reference images (i2i), through LiteLLM's images API with the profile `ZCBOT_IMAGE_PROFILE`
(Seedream 4.0 on Volcengine ARK by default: `config/models/seedream.yaml`; any OpenAI-compatible
images endpoint works the same way).

Reference images are files of the user's folder (an upload, or an image generated before), read
through `safe_fs`, downsized and re-encoded like `look_at_image`'s, and sent as base64 data URLs in
the request's `image` field (ARK accepts them, so no object store is needed). The result is asked
as `b64_json`, checked to be an image (Pillow), and written into the task folder through the same
quota-reserving write as `web_fetch`'s saved pages; the page previews it like any image file. One
call reserves `ZCBOT_IMAGE_COST_USD` against the user's budget and records a usage event of kind
`image`. The tool is offered only while the profile exists and its API key is set.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import logging
import posixpath
import re
import time
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core import quota
from zcbot_core.accounts import budgets
from zcbot_core.accounts.usage import record_usage, to_cost
from zcbot_core.agent.lang import user_language
from zcbot_core.llm.profiles import Profile, get_profile
from zcbot_core.platform.config import ConfigError
from zcbot_core.safe_fs import paths
from zcbot_core.tools.image_tool import ImageProblem, _read, prepare_image
from zcbot_core.tools.push_tool import PushHostTool as HostTool
from zcbot_core.tools.push_tool import _user_relative
from zcbot_core.tools.results import ToolOutcome, required_text
from zcbot_core.tools.web_tools import _save

log = logging.getLogger(__name__)

MAX_PROMPT = 4000
MAX_REFERENCES = 10  # Seedream 4.0 takes up to 10
REFERENCE_MAX_SIDE = 2048
IMAGE_TIMEOUT = 180.0
SIZE = re.compile(r"^(1K|2K|4K|\d{3,4}x\d{3,4})$")
FORMATS = {"PNG": ".png", "JPEG": ".jpg", "WEBP": ".webp"}

GENERATE_IMAGE_SCHEMA: dict[str, Any] = {"type": "function", "function": {
    "name": "generate_image",
    "description": ("Generate an image from a text prompt, or edit/combine images: pass `reference_images` (files "
                    "in the task folder, e.g. an upload or an image generated before) and say in the prompt what to "
                    "change. The image is saved in the task folder; returns its path."),
    "parameters": {"type": "object", "properties": {
        "prompt": {"type": "string", "description": "What the image shows (subject, style, text in it, layout)."},
        "path": {"type": "string", "description": "Where to save it, relative to the task folder "
                                                  "(default images/<time>.png)."},
        "size": {"type": "string", "description": "1K, 2K (default), 4K, or WIDTHxHEIGHT such as 2048x1152."},
        "reference_images": {"type": "array", "items": {"type": "string"},
                             "description": f"Up to {MAX_REFERENCES} images to edit or draw from (paths)."},
    }, "required": ["prompt"]}}}


def image_profile(settings: Any, name: str | None) -> Profile | None:
    """The profile when `generate_image` can be offered (it exists and its API key is set)."""
    if not name:
        return None
    try:
        profile = get_profile(settings, name)
        profile.api_key()
    except ConfigError as exc:
        log.debug("generate_image not offered", extra={"profile": name, "reason": str(exc)})
        return None
    return profile


def _decode(data: str) -> tuple[bytes, str, tuple[int, int]]:
    """The image bytes of a b64_json answer, their extension and pixel size (ImageProblem if none)."""
    from PIL import Image, UnidentifiedImageError

    try:
        raw = base64.b64decode(data, validate=True)
        with Image.open(io.BytesIO(raw)) as image:
            fmt, size = image.format or "", image.size
    except (binascii.Error, ValueError, UnidentifiedImageError, OSError):
        raise ImageProblem("the image model returned something that is not an image") from None
    if fmt not in FORMATS:
        raise ImageProblem(f"the image model returned an unexpected format ({fmt or 'unknown'})")
    return raw, FORMATS[fmt], size


def _target(cwd: str, requested: object, ext: str) -> str:
    """Where to save, relative to the user root: the path asked for (default images/<time>) with the
    extension of what the model returned."""
    asked = requested.strip() if isinstance(requested, str) and requested.strip() else \
        f"images/{time.strftime('%Y%m%d-%H%M%S')}{ext}"
    rel = _user_relative(cwd, asked)
    stem, old = posixpath.splitext(rel)
    return rel if old.lower() == ext or (old.lower(), ext) == (".jpeg", ".jpg") else stem + ext


def _shown(cwd: str, rel: str) -> str:
    prefix = cwd.rstrip("/") + "/" if cwd else ""
    return rel[len(prefix):] if prefix and rel.startswith(prefix) else f"/workspace/{rel}" if prefix else rel


async def _generate(profile: Profile, prompt: str, size: str, refs: list[str]) -> dict[str, Any]:
    import litellm  # only where calls are made

    # In the body as given: LiteLLM drops (or refuses) `response_format` for models it does not know
    # as OpenAI's, and has no parameter for the references; ARK reads both from the JSON body.
    extra: dict[str, Any] = {"response_format": "b64_json", **({"image": refs} if refs else {})}
    response = await litellm.aimage_generation(
        model=profile.model, prompt=prompt, size=size, n=1, api_base=profile.api_base,
        api_key=profile.api_key(), timeout=IMAGE_TIMEOUT, extra_body=extra)
    return response.model_dump() if hasattr(response, "model_dump") else dict(response)


def register_image_gen_tool(toolbox: Any, settings: Any, sessions: async_sessionmaker[AsyncSession], *,
                            profile: Profile, cost_usd: float, ledger: quota.Ledger | None) -> None:
    """`settings`: the service's `Settings` (storage root, budget defaults)."""
    user_id, task_id, run_id = toolbox.user_id, toolbox.task_id, toolbox.run_id
    cwd = getattr(toolbox, "cwd", "") or ""
    root: Path = paths.user_root(settings.storage_root, user_id)
    defaults = budgets.Defaults.from_settings(settings)

    async def handler(args: dict[str, Any]) -> ToolOutcome:
        prompt = required_text(args, "prompt", MAX_PROMPT, "what the image should show")
        if isinstance(prompt, ToolOutcome):
            return prompt
        size = args.get("size") or "2K"
        if not isinstance(size, str) or not SIZE.match(size):
            return ToolOutcome.failure("`size` must be 1K, 2K, 4K or WIDTHxHEIGHT (e.g. 2048x1152)")
        wanted = args.get("reference_images") or []
        if not isinstance(wanted, list) or not all(isinstance(p, str) for p in wanted) or len(wanted) > MAX_REFERENCES:
            return ToolOutcome.failure(f"`reference_images` must be a list of at most {MAX_REFERENCES} paths")
        refs = []
        try:
            for raw in wanted:
                data = await asyncio.to_thread(_read, root, _user_relative(cwd, raw))
                refs.append((await asyncio.to_thread(prepare_image, data, REFERENCE_MAX_SIDE)).data_url)
        except (paths.PathRejected, ImageProblem) as exc:
            return ToolOutcome.failure(f"reference image: {exc}")
        except OSError as exc:
            return ToolOutcome.failure(f"could not read a reference image: {exc.strerror or exc}")
        lang = user_language([{"role": "user", "content": prompt}])
        try:
            async with sessions() as session:
                held = await budgets.reserve(session, user_id=user_id, run_id=run_id, defaults=defaults, lang=lang,
                                             amount=to_cost(cost_usd))
        except budgets.BudgetExceeded as exc:
            return ToolOutcome.failure(str(exc))
        try:
            try:
                answer = await _generate(profile, prompt.strip(), size, refs)
            except Exception as exc:  # noqa: BLE001 - a refused or failed generation is the tool's error, not the run's
                return ToolOutcome.failure(f"the image model failed: {exc.__class__.__name__}: {exc}"[:2000])
            async with sessions() as session, session.begin():
                await record_usage(session, user_id=user_id, task_id=task_id, run_id=run_id, kind="image",
                                   model_profile=profile.name, prompt_tokens=0, completion_tokens=0, cached_tokens=0,
                                   cost_usd=cost_usd)
        finally:
            async with sessions() as session:
                await budgets.release(session, held)
        items = answer.get("data") or []
        b64 = items[0].get("b64_json") if items and isinstance(items[0], dict) else None
        if not isinstance(b64, str):
            return ToolOutcome.failure("the image model returned no image data (b64_json)")
        try:
            image, ext, (width, height) = _decode(b64)
            rel = _target(cwd, args.get("path"), ext)
            await asyncio.to_thread(_save, settings.storage_root, user_id, "", rel, image, ledger)
        except (ImageProblem, paths.PathRejected, quota.DiskQuotaExceeded) as exc:
            return ToolOutcome.failure(str(exc))
        how = f"edited from {len(refs)} reference image(s)" if refs else "generated"
        return ToolOutcome.make(True, f"saved the image ({how}, {width}x{height}) as {_shown(cwd, rel)}")

    toolbox.add_host_tool(HostTool(schema=GENERATE_IMAGE_SCHEMA, handler=handler))
