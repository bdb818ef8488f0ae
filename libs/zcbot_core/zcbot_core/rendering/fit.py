"""Briefs that keep to their page budget, measured on a real render (LibreOffice), not guessed.

A brief has a budget (frontmatter `pages:`, default 2). The brief is rendered and converted to PDF;
when it runs over, or when only a few lines (typically a lone source link) spill onto its last
page, it is rendered again in the compact variant of the layout (tighter spacing and margins,
same fonts and structure) and the variant with fewer pages is kept. What still does not fit is
reported with the measured page count, so the writer cuts text instead of the reader turning a
page for one line. Without LibreOffice nothing can be measured: the caller falls back to a length
estimate and says so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .common import RenderError
from .docx_writer import RenderReport
from .mdparse import parse_frontmatter
from .pdf import find_soffice, to_pdf_many

DEFAULT_BUDGET = 2
# Fewer characters than this on the last page: a spill (a source line, a footnote), not content.
SPILL_CHARS = 220
# The layout's variants, mildest first: tighter spacing and margins, then also a half-point smaller.
COMPACT = {"line_spacing": 1.1, "space_after": 2.0, "margins": (1.6, 1.5, 1.9, 1.9)}
TIGHT = {**COMPACT, "size": 10.0, "table_size": 9.0, "caption_size": 8.5, "title_size": 16.0,
         "heading_sizes": (12.0, 10.5, 10.0, 10.0, 10.0, 10.0)}
VARIANTS = (("compact", COMPACT), ("tight", TIGHT))


@dataclass
class FitReport:
    report: RenderReport
    pages: int | None = None  # None: not measured (no LibreOffice)
    budget: int = DEFAULT_BUDGET
    compact: bool = False
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.pages is None:
            return "pages: not measured (LibreOffice is not available here)"
        layout = " (compact layout)" if self.compact else ""
        return f"pages: {self.pages} of a budget of {self.budget}{layout}"


def page_budget(text: str) -> int:
    meta, _ = parse_frontmatter(text)
    value = str(meta.get("pages", "")).strip()
    return int(value) if value.isdigit() and 0 < int(value) <= 20 else DEFAULT_BUDGET


def pdf_page_count(pdf: Path) -> int:
    if shutil.which("pdfinfo"):
        out = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, timeout=60).stdout
        m = re.search(r"^Pages:\s+(\d+)", out, re.M)
        if m:
            return int(m.group(1))
    return len(re.findall(rb"/Type\s*/Page(?![s\w])", pdf.read_bytes()))


def page_text(pdf: Path, page: int) -> str | None:
    """The text of one page (pdftotext, poppler-utils), or None when it cannot be read."""
    if not shutil.which("pdftotext"):
        return None
    proc = subprocess.run(["pdftotext", "-layout", "-f", str(page), "-l", str(page), str(pdf), "-"],
                          capture_output=True, text=True, timeout=60)
    return proc.stdout if proc.returncode == 0 else None


def _spill(pdf: Path, pages: int) -> bool:
    if pages < 2:
        return False
    text = page_text(pdf, pages)
    if text is None:
        return False
    content = re.sub(r"\s+", "", re.sub(r"(?m)^\s*\d+\s*$", "", text))  # drop the page number line
    return len(content) < SPILL_CHARS


def _attempts(render, tmp: Path, variants) -> list[tuple[RenderReport, Path, Path, int]]:
    """Render each (name, overrides) variant and convert them all in one LibreOffice start."""
    built = [(render(tmp / f"{name}.docx", overrides), tmp / f"{name}.docx") for name, overrides in variants]
    pdfs = to_pdf_many([docx for _, docx in built], tmp)
    return [(report, docx, pdf, pdf_page_count(pdf)) for (report, docx), pdf in zip(built, pdfs)]


def fit_to_budget(render, text: str, docx_out: Path | None, pdf_out: Path | None) -> FitReport:
    """`render(out_docx, overrides) -> RenderReport` renders the brief; writes the variant that
    best keeps to the budget to `docx_out` / `pdf_out` (either may be None)."""
    budget = page_budget(text)
    if not find_soffice():
        if docx_out is None:
            raise RenderError("PDF conversion is not available in this environment (LibreOffice `soffice` was "
                              "not found); deliver the .docx instead")
        return FitReport(render(docx_out, {}), None, budget)
    with tempfile.TemporaryDirectory(prefix="zcbot-fit-") as tmp_name:
        tmp = Path(tmp_name)
        best = _attempts(render, tmp, [("normal", {})])[0]
        compact = False
        if best[3] > budget or _spill(best[2], best[3]):
            for candidate in _attempts(render, tmp, VARIANTS):  # mildest first: the first that saves a page wins
                if candidate[3] < best[3]:
                    best, compact = candidate, True
                    break
        report, docx, pdf, pages = best
        fit = FitReport(report, pages, budget, compact)
        if pages > budget:
            fit.problems.append(f"the brief is {pages} pages against its budget of {budget} (measured on the "
                                f"render, already in the compact layout): cut it, or raise `pages:` if the "
                                f"reader agreed to more")
        elif _spill(pdf, pages):
            fit.problems.append(f"only a few lines spill onto page {pages}: cut a line or two so the brief ends "
                                f"on page {pages - 1}")
        if docx_out is not None:
            _install(docx, Path(docx_out))
            report.out = Path(docx_out)
        if pdf_out is not None:
            _install(pdf, Path(pdf_out))
        return fit


def _install(src: Path, dst: Path) -> None:
    """Copy next to the target, then rename: a reader never sees half a file."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    part = dst.with_name(f".{dst.name}.part")
    shutil.copyfile(src, part)
    os.replace(part, dst)
