"""Platform rendering layer (seed 003 §8.6): Markdown -> .docx (manuscript / brief profiles) and
office files -> PDF (LibreOffice headless). Self-contained: python-docx + stdlib, no imports from
the rest of zcbot_core, so the folder can be mounted read-only into the sandbox and used as

    python /sandbox/rendering/render.py --to pdf brief.md brief.pdf --profile brief

Library use:

    from zcbot_core.rendering import markdown_to_docx, markdown_to_pdf, convert_to_pdf
    report = markdown_to_docx(md_text, "out.docx", profile="proposal", base_dir=folder)
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from .common import RenderError
from .docx_brief import BRIEF, render_brief
from .docx_manuscript import PROFILES, render_manuscript
from .docx_style import DocStyle
from .docx_writer import RenderReport, render_docx
from .fit import FitReport, fit_to_budget, page_budget
from .mdparse import parse as parse_markdown
from .pdf import find_soffice, to_pdf, to_pdf_many

__all__ = [
    "BRIEF", "PROFILES", "DocStyle", "FitReport", "RenderError", "RenderReport", "convert_to_pdf", "find_soffice",
    "fit_to_budget", "markdown_to_docx", "markdown_to_pdf", "page_budget", "parse_markdown", "render_brief", "render_docx",
    "render_manuscript", "to_pdf_many",
]


def markdown_to_docx(text: str, out: str | Path, profile: str = "proposal", base_dir: str | Path | None = None,
                     **overrides: object) -> RenderReport:
    """Render Markdown text to a .docx; `profile` is proposal | paper | brief."""
    base = Path(base_dir) if base_dir else Path(".")
    if profile == "brief":
        return render_brief(text, Path(out), base, **overrides)
    return render_manuscript(text, Path(out), profile, base, **overrides)


def convert_to_pdf(source: str | Path, out: str | Path, timeout: float = 180.0) -> Path:
    """An office file (.docx/.pptx/...) -> PDF via LibreOffice headless."""
    return to_pdf(Path(source), Path(out), timeout)


def markdown_to_pdf(text: str, out: str | Path, profile: str = "proposal", base_dir: str | Path | None = None,
                    timeout: float = 180.0, **overrides: object) -> RenderReport:
    """Markdown -> .docx (same layout as markdown_to_docx) -> PDF."""
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="zcbot-render-") as tmp:
        docx_path = Path(tmp) / f"{out.stem}.docx"
        report = markdown_to_docx(text, docx_path, profile, base_dir, **overrides)
        to_pdf(docx_path, out, timeout)
    report.out = out
    return report

