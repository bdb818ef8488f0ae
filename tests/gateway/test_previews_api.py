"""GET /v1/files/preview (issue 27, seed §8.3): office files as PDF converted on the host with the real
LibreOffice (sandboxed, cached by content hash in a bounded LRU cache), PDFs and images inline, clear refusals."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from docx import Document
from pptx import Presentation

from tests.helpers.gateway import running_app, user_dir
from zcbot_core.errors import PreviewUnavailable
from zcbot_core.platform.config import Settings
from zcbot_gateway import previews
from zcbot_gateway.config import GatewaySettings
from zcbot_gateway.preview_cache import STALE_PART_SECONDS, PreviewCache

needs_soffice = pytest.mark.skipif(previews.find_soffice() is None, reason="LibreOffice (soffice) not installed")
PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
       b"\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")


def _deck(title: str) -> bytes:
    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = title
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def _doc(text: str) -> bytes:
    doc = Document()
    doc.add_paragraph(text)
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


@needs_soffice
async def test_office_files_preview_as_cached_pdf(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "viewer")
    root = user_dir(settings, "viewer")
    (root / "docs").mkdir(parents=True)
    title = f"预览 deck {time.time_ns()}"  # new content: not in the cache yet
    (root / "docs" / "季度汇报.pptx").write_bytes(_deck(title))
    (root / "docs" / "memo.docx").write_bytes(_doc(f"memo {time.time_ns()}"))
    for path in ("docs/季度汇报.pptx", "docs/memo.docx"):
        r = await app_client.get("/v1/files/preview", headers=h, params={"path": path})
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/pdf" and r.content.startswith(b"%PDF-")
        assert r.headers["content-disposition"].startswith("inline;")
        assert r.headers["x-content-type-options"] == "nosniff"
    digest = __import__("hashlib").sha256((root / "docs" / "季度汇报.pptx").read_bytes()).hexdigest()
    assert (previews.CACHE_DIR / f"{digest}.pdf").is_file()  # cached by content hash
    started = time.monotonic()
    again = await app_client.get("/v1/files/preview", headers=h, params={"path": "docs/季度汇报.pptx"})
    assert again.status_code == 200 and again.content.startswith(b"%PDF-") and time.monotonic() - started < 2.0
    other = await make_user(app_client, "stranger")  # the path is read in the caller's own root only
    assert (await app_client.get("/v1/files/preview", headers=other,
                                 params={"path": "docs/季度汇报.pptx"})).status_code == 404


async def test_pdf_and_images_inline_and_refusals(app_client: httpx.AsyncClient, settings: Settings, make_user,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    h = await make_user(app_client, "viewer2")
    root = user_dir(settings, "viewer2")
    root.mkdir(parents=True, exist_ok=True)
    (root / "a.png").write_bytes(PNG)
    (root / "b.pdf").write_bytes(b"%PDF-1.4\n%fake but served as is\n")
    (root / "page.html").write_text("<script>alert(1)</script>")
    (root / "c.pptx").write_bytes(_deck("no soffice"))
    img = await app_client.get("/v1/files/preview", headers=h, params={"path": "a.png"})
    assert img.status_code == 200 and img.headers["content-type"] == "image/png" and img.content == PNG
    pdf = await app_client.get("/v1/files/preview", headers=h, params={"path": "b.pdf"})
    assert pdf.status_code == 200 and pdf.headers["content-type"] == "application/pdf"
    assert "default-src 'none'" in pdf.headers["content-security-policy"]
    html = await app_client.get("/v1/files/preview", headers=h, params={"path": "page.html"})
    assert html.status_code == 415 and html.json()["code"] == "preview_unsupported" and "<script>" not in html.text
    assert "预览" in html.json()["detail"]  # Chinese by default
    for path, code in (("missing.pdf", 404), ("../x.pdf", 400), (".hidden.pdf", 400)):
        r = await app_client.get("/v1/files/preview", headers=h, params={"path": path})
        assert r.status_code == code, (path, r.text)
    # LibreOffice absent: a clear 503 with a message, in the request's language.
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("ZCBOT_SOFFICE", raising=False)
    r = await app_client.get("/v1/files/preview", headers={**h, "Accept-Language": "en-US,en;q=0.9"},
                             params={"path": "c.pptx"})
    assert r.status_code == 503 and r.json()["code"] == "preview_unavailable", r.text
    assert "LibreOffice" in r.json()["detail"] and "download" in r.json()["detail"]


def test_the_converter_sandbox_has_no_network_and_sees_only_its_folder(os_tmp_dir: Path) -> None:
    (os_tmp_dir / "secret.txt").write_text("someone else's")
    os_tmp_dir.chmod(0o711)  # the converter's uid passes through, as through /tmp to a real conversion
    conv = os_tmp_dir / "conv"
    conv.mkdir()
    uid = previews.converter_uid()
    work, etc = previews._prepare(conv, b"mine", "in.txt", uid)
    probe = ("import socket, os\n"
             "print(sorted(os.listdir('/sys/class/net')) if os.path.isdir('/sys/class/net') else ['?'])\n"
             "s = socket.socket(); s.settimeout(2)\n"
             "try:\n    s.connect(('1.1.1.1', 53)); print('NET')\nexcept OSError as e:\n    print('nonet', e.errno)\n"
             f"print(os.path.exists({str(os_tmp_dir / 'secret.txt')!r}), open('/work/in.txt').read())\n")
    out = subprocess.run([*previews.sandbox_prefix(work, etc), "/usr/bin/python3", "-c", probe], capture_output=True,
                         text=True, timeout=30, preexec_fn=previews._as_user(uid))
    assert out.returncode == 0, out.stderr
    assert "NET" not in out.stdout and "nonet" in out.stdout, out.stdout
    assert out.stdout.strip().endswith("False mine"), out.stdout


# ---- the bounded cache (preview_cache.py) -------------------------------------------------------

def _pdf(folder: Path, name: str, size: int) -> Path:
    """A converter's output as `convert` hands it to the cache (a PDF in its private folder)."""
    path = folder / name
    path.write_bytes(b"%PDF-1.4\n" + b"x" * (size - 9))
    return path


def test_the_cache_evicts_least_recently_used_first_and_a_hit_refreshes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    cache = PreviewCache(tmp_path / "cache", 2**20)  # 1 MiB
    assert cache.ready()
    kb = 1024
    for digest in ("a", "b", "c"):  # 3 × 300 KiB: fits
        with cache.store(digest, _pdf(out, f"{digest}.pdf", 300 * kb)) as fh:
            assert fh.read(5) == b"%PDF-"
    with cache.open("a") as fh:  # a hit: `a` is now the most recently used
        assert fh.read(5) == b"%PDF-"
    with cache.store("d", _pdf(out, "d.pdf", 300 * kb)):  # 1200 KiB: one must go — `b`, not `a`
        pass
    assert sorted(p.name for p in cache.folder.iterdir()) == ["a.pdf", "c.pdf", "d.pdf"]
    assert cache.open("b") is None
    with cache.store("e", _pdf(out, "e.pdf", 600 * kb)):  # c (oldest) then a go: d + e = 900 KiB
        pass
    assert sorted(p.name for p in cache.folder.iterdir()) == ["d.pdf", "e.pdf"]
    assert sum(p.stat().st_size for p in cache.folder.iterdir()) <= 2**20
    # an entry over the whole bound is served from its open file and not kept
    with cache.store("huge", _pdf(out, "huge.pdf", 2 * 2**20)) as fh:
        assert len(fh.read()) == 2 * 2**20
    assert sorted(p.name for p in cache.folder.iterdir()) == ["d.pdf", "e.pdf"]
    # a .part left by a conversion that died long ago is cleared; a fresh one (in progress) stays
    old, fresh = cache.folder / "x.123.part", cache.folder / "y.456.part"
    old.write_bytes(b"partial")
    fresh.write_bytes(b"partial")
    os.utime(old, (time.time() - 2 * STALE_PART_SECONDS,) * 2)
    assert cache.evict() == [] and not old.exists() and fresh.exists()


def test_the_cache_folder_must_be_the_gateways_own(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # others could plant entries
    assert not PreviewCache(shared, 2**20).ready()
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert not PreviewCache(tmp_path / "link", 2**20).ready()
    if previews.find_soffice() is not None:
        with pytest.raises(PreviewUnavailable):
            previews.convert(_doc("x"), ".docx", "en", cache=PreviewCache(shared, 2**20))


@needs_soffice
async def test_a_conversion_with_no_cache_room_is_still_served_whole(settings: Settings, make_user) -> None:
    """ZCBOT_PREVIEW_CACHE_MB=0: each conversion is evicted at once, the response reads its open file."""
    gateway = GatewaySettings.extend(settings).model_copy(update={"zcbot_preview_cache_mb": 0})
    async with running_app(gateway) as client:
        h = await make_user(client, "nocache")
        root = user_dir(settings, "nocache")
        root.mkdir(parents=True, exist_ok=True)
        body = _doc(f"no cache {time.time_ns()}")
        (root / "n.docx").write_bytes(body)
        r = await client.get("/v1/files/preview", headers=h, params={"path": "n.docx"})
        assert r.status_code == 200 and r.content.startswith(b"%PDF-") and r.content.rstrip().endswith(b"%%EOF"), r.text
        digest = hashlib.sha256(body).hexdigest()
        assert not (previews.CACHE_DIR / f"{digest}.pdf").exists()
