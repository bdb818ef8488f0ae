"""The look of a document profile: `DocStyle` (fonts, sizes, spacing, numbering, table look — the
only thing the profiles in docx_manuscript.py and docx_brief.py differ in) and `apply_style`, which
sets a new document's page and paragraph styles from it before the writer adds any content.
"""

from __future__ import annotations

from dataclasses import dataclass

from docx.document import Document as DocxDocument
from docx.enum.text import WD_ALIGN_PARAGRAPH, WD_LINE_SPACING
from docx.shared import Pt

from . import common


@dataclass
class DocStyle:
    name: str
    latin: str = "Times New Roman"
    east_asia: str = "SimSun"
    heading_latin: str = "Times New Roman"
    heading_east_asia: str = "SimHei"
    code_font: str = "Consolas"
    size: float = 12.0
    heading_sizes: tuple[float, ...] = (16.0, 14.0, 12.0, 12.0, 12.0, 12.0)
    title_size: float = 22.0
    heading_color: str = "000000"
    accent: str = "000000"
    line_spacing: float = 1.5
    space_after: float = 0.0
    first_line_chars: float = 2.0  # first-line indent in characters (0 = none)
    justify: bool = True
    numbering: str = "auto"  # auto | decimal | chinese | none
    table_style: str = "three-line"  # three-line | grid
    table_size: float = 10.5
    header_fill: str = ""
    caption_size: float = 10.5
    paper: str = "A4"
    margins: tuple[float, float, float, float] = (2.54, 2.54, 3.17, 3.17)  # top, bottom, left, right (cm)
    page_numbers: bool = True
    title_rule: bool = False
    quote_color: str = ""  # e.g. the export's grey tool lines; "" = body colour
    quote_size: float = 0.0  # 0 = body size
    code_fill: str = "F3F3F3"  # background of code blocks ("" = none)


def apply_style(doc: DocxDocument, st: DocStyle) -> None:
    """The document's page, default fonts and paragraph styles (Normal, headings, Title, Caption,
    lists) from `st`; page numbers when the profile has them."""
    common.set_page(doc, st.paper, *st.margins)
    common.set_doc_defaults(doc, st.latin, st.east_asia, st.size, "zh-CN")
    normal = doc.styles["Normal"]
    common.set_style_fonts(normal, st.latin, st.east_asia, st.size)
    pf = normal.paragraph_format
    pf.line_spacing = st.line_spacing
    pf.line_spacing_rule = WD_LINE_SPACING.MULTIPLE
    pf.space_after = Pt(st.space_after)
    pf.space_before = Pt(0)
    for level in range(1, 7):
        heading = doc.styles[f"Heading {level}"]
        size = st.heading_sizes[min(level, len(st.heading_sizes)) - 1]
        common.set_style_fonts(heading, st.heading_latin, st.heading_east_asia, size, bold=True, italic=False,
                               color=st.heading_color)
        hpf = heading.paragraph_format
        hpf.space_before = Pt(size * (0.9 if level == 1 else 0.6))
        hpf.space_after = Pt(size * 0.4)
        hpf.line_spacing = 1.25
        hpf.first_line_indent = Pt(0)
        hpf.keep_with_next = True
    title = doc.styles["Title"]
    common.set_style_fonts(title, st.heading_latin, st.heading_east_asia, st.title_size, bold=True, color=st.heading_color)
    title.paragraph_format.alignment = WD_ALIGN_PARAGRAPH.LEFT if st.title_rule else WD_ALIGN_PARAGRAPH.CENTER
    title.paragraph_format.space_after = Pt(6)
    # The default template draws a blue rule under Title: drop it (brief adds its own).
    ppr = title.element.get_or_add_pPr()
    for bdr in ppr.findall(common.qn("w:pBdr")):
        ppr.remove(bdr)
    caption = doc.styles["Caption"]
    common.set_style_fonts(caption, st.latin, st.east_asia, st.caption_size, bold=False, italic=False, color="000000")
    caption.paragraph_format.alignment = WD_ALIGN_PARAGRAPH.CENTER
    caption.paragraph_format.first_line_indent = Pt(0)
    caption.paragraph_format.space_before = Pt(3)
    caption.paragraph_format.space_after = Pt(6)
    for name in ("List Bullet", "List Bullet 2", "List Bullet 3", "List Number", "Quote"):
        if name in [s.name for s in doc.styles]:
            common.set_style_fonts(doc.styles[name], st.latin, st.east_asia, st.size)
    if st.page_numbers:
        common.add_page_numbers(doc)
