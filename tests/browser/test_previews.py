"""Previews in the page (issue 27): an image inline, a deck converted to PDF on the host by the
preview route (LibreOffice, sandboxed, cached), or the clear note when LibreOffice is absent."""

from __future__ import annotations

import io
import shutil
import struct
import zlib

import pytest

from tests.browser.pagekit import close_drawers, create_task, login_with_key, open_drawer, tid, upload
from tests.helpers.stack import Stack

try:
    from playwright.async_api import Page, expect
except ImportError:  # pragma: no cover - conftest skips (or fails) the suite without Playwright
    pytest.skip("playwright is not installed", allow_module_level=True)


def png(width: int = 4, height: int = 3) -> bytes:
    raw = b"".join(b"\x00" + b"\xd0\x40\x40" * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def deck() -> bytes:
    from pptx import Presentation

    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "季度汇报"
    slide.placeholders[1].text = "第一点"
    out = io.BytesIO()
    prs.save(out)
    return out.getvalue()


async def test_previews_image_inline_and_deck_as_pdf(stack: Stack, page: Page) -> None:
    await login_with_key(page, stack, "preview-pia")
    await create_task(page, "预览", folder="slides")
    # An image opens inline.
    await upload(page, "图.png", "image/png", png())
    await page.locator(f'{tid("file-entry")}[data-name="图.png"]').locator(tid("file-preview")).click()
    image = page.locator(tid("preview-image"))
    await expect(image).to_be_visible()
    assert await image.evaluate("(img) => img.complete && img.naturalWidth") == 4
    assert (await image.get_attribute("src")).startswith("blob:")
    await page.locator(tid("preview-close")).click()
    await expect(page.locator(tid("preview-dialog"))).to_be_hidden()

    # A deck: converted to PDF on the host with LibreOffice, or a clear note without it.
    await open_drawer(page, "files")
    await upload(page, "汇报.pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation", deck())
    await page.locator(f'{tid("file-entry")}[data-name="汇报.pptx"]').locator(tid("file-preview")).click()
    if shutil.which("soffice") or shutil.which("libreoffice"):
        frame = page.locator(tid("preview-frame"))
        await expect(frame).to_be_visible(timeout=60_000)
        await expect(frame).to_have_attribute("data-type", "application/pdf")
    else:
        await expect(page.locator(tid("preview-error"))).to_contain_text("LibreOffice")
    await page.locator(tid("preview-close")).click()
    await close_drawers(page)
