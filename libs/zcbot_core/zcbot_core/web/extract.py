"""A fetched body as readable Markdown: HTML through trafilatura (main content, links kept; its
plain-text fallback when it finds no article), PDFs through pypdf (text per page), text types as
they are. CPU-bound: the fetcher runs it in a thread."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

HTML_TYPES = {"text/html", "application/xhtml+xml"}
TEXT_TYPES = {"text/plain", "text/markdown", "text/x-markdown", "text/csv", "application/json", "text/xml",
              "application/xml", "application/rss+xml", "application/atom+xml"}
PDF_TYPES = {"application/pdf"}
ALLOWED_TYPES = HTML_TYPES | TEXT_TYPES | PDF_TYPES
MAX_PDF_PAGES = 200


@dataclass
class Extracted:
    title: str
    date: str | None
    markdown: str


def _decode(body: bytes) -> str:
    for encoding in ("utf-8", "gb18030"):
        try:
            return body.decode(encoding)
        except UnicodeDecodeError:
            continue
    return body.decode("utf-8", errors="replace")


def _html(body: bytes, url: str) -> Extracted:
    import trafilatura

    html = _decode(body)
    text = trafilatura.extract(html, url=url, output_format="markdown", include_links=True, include_tables=True,
                               include_comments=False, favor_recall=True, with_metadata=False)
    meta = trafilatura.extract_metadata(html, default_url=url)
    if not text:
        text = trafilatura.html2txt(html) or ""
    title = (meta.title if meta is not None and meta.title else "") or ""
    date = meta.date if meta is not None and meta.date else None
    return Extracted(title=title.strip(), date=date, markdown=text.strip())


def _pdf(body: bytes) -> Extracted:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(body))
        pages = [page.extract_text() or "" for page in reader.pages[:MAX_PDF_PAGES]]
        info = reader.metadata
    except (PdfReadError, ValueError, KeyError, OSError) as exc:
        return Extracted(title="", date=None, markdown=f"(the PDF could not be read: {exc.__class__.__name__})")
    title = str(info.title) if info is not None and info.title else ""
    parts = [f"## Page {i}\n\n{text.strip()}" for i, text in enumerate(pages, 1) if text.strip()]
    more = len(reader.pages) - MAX_PDF_PAGES
    if more > 0:
        parts.append(f"({more} more pages not extracted)")
    return Extracted(title=title.strip(), date=None, markdown="\n\n".join(parts) or "(the PDF has no text layer)")


def to_markdown(body: bytes, content_type: str, url: str) -> Extracted:
    if content_type in PDF_TYPES:
        return _pdf(body)
    if content_type in HTML_TYPES:
        return _html(body, url)
    text = _decode(body)
    if content_type == "application/json":
        try:
            text = "```json\n" + json.dumps(json.loads(text), ensure_ascii=False, indent=2) + "\n```"
        except ValueError:
            pass
    return Extracted(title="", date=None, markdown=text.strip())
