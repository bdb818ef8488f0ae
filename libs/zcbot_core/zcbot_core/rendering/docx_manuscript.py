"""Manuscripts: research/grant proposals and papers (seed 003 §8.6: one renderer, two profiles).

- `proposal`: Chinese formal document conventions — body 小四 (12 pt) SimSun + Times New Roman,
  headings SimHei, 1.5 line spacing, 2-character first-line indent, three-line tables, captions
  "表 1"/"图 1", headings numbered 一、/（一）/1. (or 1 / 1.1 / 1.1.1 for English text).
- `paper`: English manuscript — Times New Roman 11 pt (SimSun for any CJK), single-and-a-bit
  spacing, no first-line indent (space after paragraphs instead), decimal section numbers.
Headings that already carry numbers are left as written (numbering `auto`).
"""

from __future__ import annotations

from pathlib import Path

from .docx_style import DocStyle
from .docx_writer import RenderReport, render_docx
from .mdparse import Document

PROPOSAL = DocStyle(name="proposal")
PAPER = DocStyle(
    name="paper", size=11.0, heading_sizes=(14.0, 12.0, 11.0, 11.0, 11.0, 11.0), title_size=18.0,
    heading_latin="Times New Roman", heading_east_asia="SimHei", line_spacing=1.15, space_after=6.0,
    first_line_chars=0.0, numbering="auto", margins=(2.54, 2.54, 2.54, 2.54),
)
PROFILES = {"proposal": PROPOSAL, "manuscript": PROPOSAL, "paper": PAPER}


def render_manuscript(source: str | Document, out: Path, profile: str = "proposal", base_dir: Path | None = None,
                      **overrides: object) -> RenderReport:
    if profile not in PROFILES:
        raise ValueError(f"unknown manuscript profile {profile!r}; use one of: {', '.join(sorted(PROFILES))}")
    return render_docx(source, out, PROFILES[profile], base_dir, **overrides)
