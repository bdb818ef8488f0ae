"""`GET /v1/files/preview?path=`: a file of your root to show in the page (issue 27, seed §8.3).

PDFs and images (png, jpeg, gif, webp) are the file itself, inline, with their own safe content type
(never guessed from the bytes: `nosniff`); office files (pptx, docx, xlsx and the older/ODF kinds)
are a PDF converted on the host (zcbot_gateway/previews.py: sandboxed, cached by content hash in a
cache bounded by ZCBOT_PREVIEW_CACHE_MB, zcbot_gateway/preview_cache.py).
Refusals are problem answers: another type 415, over 50 MB 413, a missing file 404, LibreOffice not
installed 503 (`preview_unavailable`), a failed or timed-out conversion 422 (`preview_failed`); the
message is Chinese unless the request's Accept-Language starts with English.
"""

from __future__ import annotations

import asyncio
import posixpath
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse, Response
from starlette.background import BackgroundTask

from zcbot_core.errors import PreviewTooLarge, PreviewUnsupported
from zcbot_core.safe_fs import paths
from zcbot_gateway import previews
from zcbot_gateway.deps import CurrentUser, SettingsDep
from zcbot_gateway.files_fs import open_download
from zcbot_gateway.lang import LangDep
from zcbot_gateway.preview_cache import PreviewCache

router = APIRouter(prefix="/v1/files", tags=["files"])
PREVIEW_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "private, max-age=300",
                   "Content-Security-Policy": "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'"}


def _read(root: object, rel: str, lang: str) -> bytes:
    with open_download(root, rel) as fh:  # type: ignore[arg-type]
        data = fh.read(previews.MAX_SOURCE_BYTES + 1)
    if len(data) > previews.MAX_SOURCE_BYTES:
        raise PreviewTooLarge(previews.say("too_large", lang, mb=previews.MAX_SOURCE_BYTES // 2**20))
    return data


@router.get("/preview", response_class=Response, responses={200: {
        "content": {"application/pdf": {}, "image/png": {}, "image/jpeg": {}, "image/gif": {}, "image/webp": {}},
        "description": "The file (PDF, image) or its PDF conversion (office files), inline"}})
async def preview_file(user: CurrentUser, settings: SettingsDep,
                       path: Annotated[str, Query(min_length=1, max_length=4096, description="a file of your root")],
                       lang: LangDep) -> Response:
    """Show one file: PDFs and images as they are, office files as a PDF converted on the host."""
    rel = paths.normalize_rel(path.strip(), allow_empty=False, allow_hidden=False)
    name = posixpath.basename(rel)
    try:
        kind = previews.kind_of(name)
    except PreviewUnsupported:
        raise PreviewUnsupported(previews.say("unsupported", lang)) from None
    root = paths.user_root(settings.storage_root, user)
    data = await asyncio.to_thread(_read, root, rel, lang)
    disposition = f"inline; filename*=UTF-8''{quote(name)}"
    if kind == "inline":
        media = previews.INLINE[posixpath.splitext(name)[1].lower()]
        return Response(data, media_type=media, headers={**PREVIEW_HEADERS, "Content-Disposition": disposition})
    cache = PreviewCache(previews.CACHE_DIR, settings.zcbot_preview_cache_mb * 2**20)
    pdf = await asyncio.to_thread(previews.convert, data, posixpath.splitext(name)[1].lower(), lang,
                                  settings.zcbot_soffice, cache, settings.zcbot_preview_uid)
    stem = posixpath.splitext(name)[0] + ".pdf"
    # Served from the fd convert opened (/proc/self/fd/N is our own descriptor): an entry evicted
    # meanwhile by another request is still sent whole.
    return FileResponse(f"/proc/self/fd/{pdf.fileno()}", media_type="application/pdf", background=BackgroundTask(pdf.close),
                        headers={**PREVIEW_HEADERS, "Content-Disposition": f"inline; filename*=UTF-8''{quote(stem)}"})
