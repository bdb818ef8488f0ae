"""The fake's image endpoint (issue 40): ``POST /v1/images/generations`` as Volcengine ARK serves
Seedream (OpenAI's images API plus an ``image`` field for reference images), checked like a real
provider would check it, answered with a real PNG.

The request must carry a non-empty ``prompt`` string and a ``model``; ``size`` is ``1K``/``2K``/
``4K`` or ``WxH``; ``response_format`` ``url`` or ``b64_json``; ``n`` 1; ``image`` (i2i) one data
URL or a list of 1-10, each ``data:image/<png|jpeg|webp|gif|bmp>;base64,...`` that decodes. Anything
else is ARK's 400 (``InvalidParameter``), so a client sending a reference as a path or a bare
base64 string fails here as it would there.

The answer has ARK's documented shape (``model``, ``created``, ``data: [{b64_json | url, size}]``,
``usage: {generated_images, output_tokens, total_tokens}``; from the API reference, not a recorded
call). The PNG is small (``PNG_SIDE`` pixels) whatever ``size`` says; ``size`` is echoed. Its colour
is derived from the prompt and the reference images, so a test can tell an edit from a generation.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
import time
import zlib
from typing import Any

PNG_SIDE = 16
MAX_REFERENCES = 10
SIZES = {"1K": "1024x1024", "2K": "2048x2048", "4K": "4096x4096"}
_DATA_URL = re.compile(r"^data:image/(png|jpeg|webp|gif|bmp);base64,([A-Za-z0-9+/=]+)$")
_WXH = re.compile(r"^(\d{2,5})x(\d{2,5})$")


class ImageRequestError(ValueError):
    """A request ARK would refuse: its 400 message."""


def png(rgb: tuple[int, int, int], side: int = PNG_SIDE) -> bytes:
    """A solid-colour RGB PNG (stdlib only)."""
    row = b"\x00" + bytes(rgb) * side
    raw = row * side

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def _references(value: Any) -> list[bytes]:
    items = value if isinstance(value, list) else [value]
    if not items or len(items) > MAX_REFERENCES:
        raise ImageRequestError(f"image: 1 to {MAX_REFERENCES} reference images")
    out = []
    for i, item in enumerate(items):
        m = _DATA_URL.match(item) if isinstance(item, str) else None
        if m is None:
            raise ImageRequestError(f"image[{i}]: must be a data URL data:image/<format>;base64,<data> (or an https URL)")
        try:
            out.append(base64.b64decode(m.group(2), validate=True))
        except (binascii.Error, ValueError):
            raise ImageRequestError(f"image[{i}]: invalid base64") from None
    return out


def check(body: Any) -> tuple[str, list[bytes], str]:
    """(size to echo, decoded references, response format) of a valid request."""
    if not isinstance(body, dict):
        raise ImageRequestError("the body must be a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise ImageRequestError("model: required")
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ImageRequestError("prompt: a non-empty string is required")
    size = body.get("size", "2K")
    if not isinstance(size, str) or not (size in SIZES or _WXH.match(size)):
        raise ImageRequestError(f"size: {size!r} is not 1K, 2K, 4K or WIDTHxHEIGHT")
    fmt = body.get("response_format", "url")
    if fmt not in ("url", "b64_json"):
        raise ImageRequestError(f"response_format: {fmt!r} is not url or b64_json")
    if body.get("n", 1) != 1:
        raise ImageRequestError("n: only 1 is supported")
    refs = _references(body["image"]) if "image" in body else []
    return SIZES.get(size, size), refs, fmt


def answer(body: dict[str, Any], base_url: str) -> dict[str, Any]:
    """ARK's response to a request `check` accepted."""
    size, refs, fmt = check(body)
    digest = hashlib.sha256(body["prompt"].encode() + b"".join(refs)).digest()
    image = png((digest[0], digest[1], digest[2]))
    item: dict[str, Any] = {"size": size}
    if fmt == "b64_json":
        item["b64_json"] = base64.b64encode(image).decode("ascii")
    else:
        item["url"] = f"{base_url}/_images/{digest.hex()[:16]}.png"
    return {"model": body["model"], "created": int(time.time()), "data": [item],
            "usage": {"generated_images": 1, "output_tokens": 4096, "total_tokens": 4096}}
