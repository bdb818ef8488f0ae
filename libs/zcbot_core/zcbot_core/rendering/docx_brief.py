"""Briefs: short daily/weekly digests — compact sans-serif layout, accent-coloured title rule and
section headings, light grid tables with a shaded header, no first-line indent, no heading numbers.
Shares only the leaf primitives and the Markdown walker with manuscripts (seed 003 §8.6).
"""

from __future__ import annotations

from pathlib import Path

from .docx_style import DocStyle
from .docx_writer import RenderReport, render_docx
from .mdparse import Document

BRIEF = DocStyle(
    name="brief", latin="Arial", east_asia="Microsoft YaHei", heading_latin="Arial",
    heading_east_asia="Microsoft YaHei", size=10.5, heading_sizes=(13.0, 11.5, 10.5, 10.5, 10.5, 10.5),
    title_size=18.0, heading_color="1F4E79", accent="1F4E79", line_spacing=1.25, space_after=4.0,
    first_line_chars=0.0, justify=False, numbering="none", table_style="grid", table_size=9.5,
    header_fill="DCE6F1", caption_size=9.0, margins=(2.0, 2.0, 2.2, 2.2), title_rule=True,
)


def render_brief(source: str | Document, out: Path, base_dir: Path | None = None, **overrides: object) -> RenderReport:
    return render_docx(source, out, BRIEF, base_dir, **overrides)
