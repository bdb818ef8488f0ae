"""Leaf primitives every document renderer shares (python-docx + stdlib only).

The single source of truth for: fonts (Latin + East Asian, theme fonts removed so Word and
LibreOffice both honour them), page setup, fields (page numbers, TOC), inline spans -> runs
(in `docx_inline.py`: bold/italic/code/sub/sup/links, chemical formulas by rule), table
borders (three-line academic tables or a light grid), images sized to the text width, and an
atomic save.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from docx.enum.text import WD_BREAK
from docx.oxml import OxmlElement
from docx.oxml.ns import qn
from docx.shared import Cm, Emu, Pt, RGBColor


class RenderError(RuntimeError):
    """The document could not be rendered; the message says what is wrong with the input or environment.

    Outside the `ZcbotError` family on purpose: this package is mounted into sandboxes on its own
    (/sandbox/rendering, relative imports only), where `zcbot_core` is not importable."""


# ---- fonts ------------------------------------------------------------------------------------

_THEME_ATTRS = ("w:asciiTheme", "w:hAnsiTheme", "w:eastAsiaTheme", "w:cstheme")


def _rfonts(rpr) -> object:
    rfonts = rpr.find(qn("w:rFonts"))
    if rfonts is None:
        rfonts = OxmlElement("w:rFonts")
        rpr.insert(0, rfonts)
    for attr in _THEME_ATTRS:
        rfonts.attrib.pop(qn(attr), None)
    return rfonts


def set_rpr_fonts(rpr, latin: str | None = None, east_asia: str | None = None) -> None:
    """Set w:rFonts on an rPr element: ascii/hAnsi/cs = latin, eastAsia = east_asia."""
    rfonts = _rfonts(rpr)
    if latin:
        for attr in ("w:ascii", "w:hAnsi", "w:cs"):
            rfonts.set(qn(attr), latin)
    if east_asia:
        rfonts.set(qn("w:eastAsia"), east_asia)


def set_run_fonts(run, latin: str | None = None, east_asia: str | None = None) -> None:
    set_rpr_fonts(run._element.get_or_add_rPr(), latin, east_asia)


def set_style_fonts(style, latin: str | None = None, east_asia: str | None = None, size: float | None = None,
                    bold: bool | None = None, italic: bool | None = None, color: str | None = None) -> None:
    set_rpr_fonts(style.element.get_or_add_rPr(), latin, east_asia)
    if size is not None:
        style.font.size = Pt(size)
    if bold is not None:
        style.font.bold = bold
    if italic is not None:
        style.font.italic = italic
    if color is not None:
        style.font.color.rgb = RGBColor.from_string(color)


def set_doc_defaults(document, latin: str, east_asia: str, size: float, east_asia_lang: str = "zh-CN") -> None:
    """docDefaults: the fonts any text without a style falls back to (and the East Asian language)."""
    styles = document.styles.element
    defaults = styles.find(qn("w:docDefaults"))
    if defaults is None:
        defaults = OxmlElement("w:docDefaults")
        styles.insert(0, defaults)
    rpr_default = defaults.find(qn("w:rPrDefault"))
    if rpr_default is None:
        rpr_default = OxmlElement("w:rPrDefault")
        defaults.insert(0, rpr_default)
    rpr = rpr_default.find(qn("w:rPr"))
    if rpr is None:
        rpr = OxmlElement("w:rPr")
        rpr_default.append(rpr)
    set_rpr_fonts(rpr, latin, east_asia)
    after = {"w:sz": ("w:szCs", "w:highlight", "w:u", "w:effect", "w:bdr", "w:shd", "w:fitText", "w:vertAlign",
                      "w:rtl", "w:cs", "w:em", "w:lang", "w:eastAsianLayout", "w:specVanish", "w:oMath"),
             "w:szCs": ("w:highlight", "w:u", "w:effect", "w:bdr", "w:shd", "w:fitText", "w:vertAlign", "w:rtl",
                        "w:cs", "w:em", "w:lang", "w:eastAsianLayout", "w:specVanish", "w:oMath"),
             "w:lang": ("w:eastAsianLayout", "w:specVanish", "w:oMath")}
    for tag in ("w:sz", "w:szCs", "w:lang"):
        el = rpr.find(qn(tag))
        if el is None:
            el = OxmlElement(tag)
            rpr.insert_element_before(el, *after[tag])
        if tag == "w:lang":
            el.set(qn("w:eastAsia"), east_asia_lang)
        else:
            el.set(qn("w:val"), str(int(round(size * 2))))


# ---- page, fields -----------------------------------------------------------------------------

PAPER = {"A4": (Cm(21.0), Cm(29.7)), "Letter": (Emu(7772400), Emu(10058400))}


def set_page(document, paper: str = "A4", top: float = 2.54, bottom: float = 2.54, left: float = 3.17,
             right: float = 3.17) -> None:
    width, height = PAPER.get(paper, PAPER["A4"])
    for section in document.sections:
        section.page_width, section.page_height = width, height
        section.top_margin, section.bottom_margin = Cm(top), Cm(bottom)
        section.left_margin, section.right_margin = Cm(left), Cm(right)


def text_width(document) -> int:
    s = document.sections[-1]
    return int(s.page_width - s.left_margin - s.right_margin)


def add_field(paragraph, instruction: str, placeholder: str = "") -> None:
    """A complex field (PAGE, NUMPAGES, TOC ...); Word/LibreOffice compute it when laying out."""
    def fld(kind: str) -> object:
        el = OxmlElement("w:fldChar")
        el.set(qn("w:fldCharType"), kind)
        return el

    run = paragraph.add_run()
    run._r.append(fld("begin"))
    instr = OxmlElement("w:instrText")
    instr.set(qn("xml:space"), "preserve")
    instr.text = f" {instruction} "
    run = paragraph.add_run()
    run._r.append(instr)
    run = paragraph.add_run()
    run._r.append(fld("separate"))
    if placeholder:
        paragraph.add_run(placeholder)
    run = paragraph.add_run()
    run._r.append(fld("end"))


def add_page_numbers(document, size: float = 9.0) -> None:
    for section in document.sections:
        para = section.footer.paragraphs[0] if section.footer.paragraphs else section.footer.add_paragraph()
        para.alignment = 1  # center
        para.paragraph_format.first_line_indent = 0
        add_field(para, "PAGE", "1")
        for run in para.runs:
            run.font.size = Pt(size)


def page_break(document) -> None:
    document.add_paragraph().add_run().add_break(WD_BREAK.PAGE)


def bottom_border(paragraph, size_eighths: int = 6, color: str = "000000") -> None:
    ppr = paragraph._p.get_or_add_pPr()
    borders = OxmlElement("w:pBdr")
    bottom = OxmlElement("w:bottom")
    for k, v in (("w:val", "single"), ("w:sz", str(size_eighths)), ("w:space", "1"), ("w:color", color)):
        bottom.set(qn(k), v)
    borders.append(bottom)
    ppr.insert_element_before(borders, *_PPR_AFTER_PBDR)


def left_bar(paragraph, size_eighths: int = 18, color: str = "000000", space: int = 8) -> None:
    """A vertical rule left of the paragraph (consecutive paragraphs with the same bar join up)."""
    ppr = paragraph._p.get_or_add_pPr()
    borders = OxmlElement("w:pBdr")
    left = OxmlElement("w:left")
    for k, v in (("w:val", "single"), ("w:sz", str(size_eighths)), ("w:space", str(space)), ("w:color", color)):
        left.set(qn(k), v)
    borders.append(left)
    ppr.insert_element_before(borders, *_PPR_AFTER_PBDR)


# OOXML requires children in schema order (Word rejects some out-of-order files): new elements
# are inserted before the first sibling that must follow them.
_PPR_AFTER_PBDR = ("w:shd", "w:tabs", "w:suppressAutoHyphens", "w:kinsoku", "w:wordWrap", "w:overflowPunct",
                   "w:topLinePunct", "w:autoSpaceDE", "w:autoSpaceDN", "w:bidi", "w:adjustRightInd", "w:snapToGrid",
                   "w:spacing", "w:ind", "w:contextualSpacing", "w:mirrorIndents", "w:suppressOverlap", "w:jc",
                   "w:textDirection", "w:textAlignment", "w:textboxTightWrap", "w:outlineLvl", "w:divId",
                   "w:cnfStyle", "w:rPr", "w:sectPr", "w:pPrChange")
_TBLPR_AFTER_BORDERS = ("w:shd", "w:tblLayout", "w:tblCellMar", "w:tblLook", "w:tblCaption", "w:tblDescription",
                        "w:tblPrChange")
_TCPR_AFTER_SHD = ("w:noWrap", "w:tcMar", "w:textDirection", "w:tcFitText", "w:vAlign", "w:hideMark", "w:headers",
                   "w:cellIns", "w:cellDel", "w:cellMerge", "w:tcPrChange")
_TCPR_AFTER_BORDERS = ("w:shd", *_TCPR_AFTER_SHD)


def keep_with_next(paragraph) -> None:
    paragraph.paragraph_format.keep_with_next = True


# ---- tables -----------------------------------------------------------------------------------

def _border(tag: str, val: str = "single", size: int = 4, color: str = "000000") -> object:
    el = OxmlElement(tag)
    el.set(qn("w:val"), val)
    el.set(qn("w:sz"), str(size))
    el.set(qn("w:space"), "0")
    el.set(qn("w:color"), color)
    return el


def _tbl_pr(table):
    return table._tbl.tblPr


def set_table_borders(table, style: str = "three-line", color: str = "000000") -> None:
    """`three-line`: thick top/bottom rules, thin rule under the header (academic style).
    `grid`: light lines everywhere. `none`: no borders."""
    tbl_pr = _tbl_pr(table)
    old = tbl_pr.find(qn("w:tblBorders"))
    if old is not None:
        tbl_pr.remove(old)
    borders = OxmlElement("w:tblBorders")
    # Children in schema order: top, left, bottom, right, insideH, insideV.
    for tag in ("w:top", "w:left", "w:bottom", "w:right", "w:insideH", "w:insideV"):
        if style == "grid":
            borders.append(_border(tag, size=4, color=color))
        elif style == "three-line" and tag in ("w:top", "w:bottom"):
            borders.append(_border(tag, size=12, color=color))
        else:
            borders.append(_border(tag, val="nil"))
    tbl_pr.insert_element_before(borders, *_TBLPR_AFTER_BORDERS)
    if style == "three-line" and len(table.rows) > 1:
        for cell in table.rows[0].cells:
            tc_pr = cell._tc.get_or_add_tcPr()
            tc_borders = OxmlElement("w:tcBorders")
            tc_borders.append(_border("w:bottom", size=6, color=color))
            tc_pr.insert_element_before(tc_borders, *_TCPR_AFTER_BORDERS)


def indent_to_text(table, twips: int = 108) -> None:
    """A left-aligned table's border on the text margin (the cells' own left padding, 0.19 cm, is
    otherwise hung out to the left of the text column)."""
    tbl_pr = _tbl_pr(table)
    ind = OxmlElement("w:tblInd")
    ind.set(qn("w:w"), str(twips))
    ind.set(qn("w:type"), "dxa")
    tbl_pr.insert_element_before(ind, "w:tblBorders", *_TBLPR_AFTER_BORDERS)


def shade_cell(cell, fill: str) -> None:
    tc_pr = cell._tc.get_or_add_tcPr()
    shd = OxmlElement("w:shd")
    shd.set(qn("w:val"), "clear")
    shd.set(qn("w:color"), "auto")
    shd.set(qn("w:fill"), fill)
    tc_pr.insert_element_before(shd, *_TCPR_AFTER_SHD)


def shade_paragraph(paragraph, fill: str) -> None:
    ppr = paragraph._p.get_or_add_pPr()
    shd = OxmlElement("w:shd")
    for k, v in (("w:val", "clear"), ("w:color", "auto"), ("w:fill", fill)):
        shd.set(qn(k), v)
    ppr.insert_element_before(shd, *_PPR_AFTER_PBDR[1:])


def repeat_header(row) -> None:
    tr_pr = row._tr.get_or_add_trPr()
    el = OxmlElement("w:tblHeader")
    el.set(qn("w:val"), "true")
    tr_pr.append(el)


NUMERIC = re.compile(r"^[\s+\-−±~≈<>≤≥$¥€£]*[\d.,]+\s*(%|‰|[A-Za-zμ°/²³]{0,6})?\s*$")


# ---- images -----------------------------------------------------------------------------------

def picture_width(path: Path, max_width: int, requested: str = "") -> int:
    """EMU width for an image: the requested share of the text width, else native size capped."""
    from docx.image.image import Image as DocxImage

    if requested.endswith("%"):
        return int(max_width * min(float(requested[:-1]), 100.0) / 100.0)
    if requested.endswith("cm"):
        return min(int(Cm(float(requested[:-2]))), max_width)
    if requested.endswith("mm"):
        return min(int(Cm(float(requested[:-2]) / 10)), max_width)
    if requested.endswith("in"):
        return min(int(Emu(int(float(requested[:-2]) * 914400))), max_width)
    try:
        native = DocxImage.from_file(str(path)).width
    except Exception as exc:  # noqa: BLE001 - unreadable image: the caller reports it
        raise RenderError(f"image {path} cannot be read: {exc}") from None
    return min(int(native), int(max_width * 0.9))


def resolve_asset(path: str, base_dir: Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else (base_dir / p)


# ---- output -----------------------------------------------------------------------------------

def atomic_save(document, out: Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=str(out.parent))
    os.close(fd)
    try:
        document.save(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; deliverables get normal permissions
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def _umask() -> int:
    """The process umask, read without changing it where possible (os.umask is process-wide)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
