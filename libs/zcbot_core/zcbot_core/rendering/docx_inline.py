"""Inline Markdown -> Word runs: bold, emphasis, code, sub/superscripts, links, footnote marks;
chemical formulas by rule (`formulas.py`) get real subscripts; a number and its unit never part,
nor a number range at its dash.

Emphasis in Chinese is not a slanted glyph: CJK fonts have no italic, so Word and LibreOffice
would shear the glyphs (a "synthetic italic"). CJK text in an emphasised span is set in the
font's bold weight instead (a weight the CJK fonts have; the emphasis dots 着重号, `w:em`, are
not drawn by LibreOffice 7.4, so a reader of the PDF would see no emphasis at all); Latin text in
the same span stays italic. Inline code is set in the code font on a light grey shading, so it reads as
code inside body text.
"""

from __future__ import annotations

import re
from typing import Any

from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.oxml import OxmlElement
from docx.oxml.ns import qn
from docx.shared import Pt, RGBColor

from .common import set_run_fonts
from .formulas import split_formulas
from .mdparse import Span, parse_inline

# ------------------------------------------------------------------------------

def chem_split(span: Span) -> list[Span]:
    """Split chemical formulas in a span (the rule is `formulas.split_formulas`) so their counts
    become subscripts and ion charges superscripts."""
    if span.code or span.sub or span.sup or span.note:
        return [span]
    pieces = split_formulas(span.text)
    if len(pieces) == 1 and not pieces[0][1]:
        return [span]
    return [Span(text, span.bold, span.italic, False, kind == "sub", kind == "sup", span.link) for text, kind in pieces]


def _hyperlink(paragraph, url: str) -> Any:
    r_id = paragraph.part.relate_to(url, RT.HYPERLINK, is_external=True)
    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), r_id)
    paragraph._p.append(link)
    return link


# "10 mS/cm", "30 μm", "5 %": a number and its unit never part at a line end (no-break space).
# "1945-1976", "2–10 nm": no line break after the dash of a number range (WORD JOINER).
_RANGE = re.compile(r"(?<=\d)([-–—])(?=\d)")
_ISO_DATE = re.compile(r"\d{4}-\d{1,2}-\d{1,2}")


def keep_ranges(text: str) -> str:
    """A word joiner after the dash of a number range (ISO dates are left as written)."""
    dates = [m.span() for m in _ISO_DATE.finditer(text)]
    return _RANGE.sub(lambda m: m.group(1) if any(a < m.start() < b for a, b in dates) else m.group(1) + "\u2060", text)


_NUMBER_UNIT = re.compile(r"(\d) (?=[A-Za-zμΩ°%‰℃][A-Za-z/²³]{0,3}(?![A-Za-z]))")


_CJK_RUN = re.compile(r"([\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f]+)")
# rPr children that must follow w:shd (OOXML schema order).
_RPR_AFTER_SHD = ("w:fitText", "w:vertAlign", "w:rtl", "w:cs", "w:em", "w:lang", "w:eastAsianLayout",
                  "w:specVanish", "w:oMath")
CODE_FILL = "EEEEEE"
CODE_COLOR = "9C2B2B"


def _rpr_child(run, tag: str, after: tuple[str, ...], **attrs: str) -> None:
    el = OxmlElement(tag)
    for key, value in attrs.items():
        el.set(qn(f"w:{key}"), value)
    run._element.get_or_add_rPr().insert_element_before(el, *after)


def emphasis_pieces(text: str) -> list[tuple[str, str]]:
    """An emphasised text cut into (piece, how): 'italic' for Latin, 'bold' for CJK text."""
    return [(piece, "bold" if _CJK_RUN.fullmatch(piece) else "italic") for piece in _CJK_RUN.split(text) if piece]


def add_spans(paragraph, text: str, *, code_font: str = "Consolas", chem: bool = True, size: float | None = None,
              bold: bool | None = None, italic: bool | None = None, link_color: str = "1F4E79", note=None) -> None:
    """Append `text` (inline markdown) to a paragraph as formatted runs (`italic`: the whole text
    emphasised, e.g. a quote).

    `note(paragraph, note_id) -> bool` places a footnote mark; without one (or when it returns
    False) the mark stays as written, `[^id]`."""
    spans = parse_inline(text)
    if chem:
        spans = [piece for s in spans for piece in chem_split(s)]
    for span in spans:
        if span.note:
            if note is not None and note(paragraph, span.note):
                continue
            span = Span(f"[^{span.note}]", span.bold, span.italic)
        text = span.text if span.code else keep_ranges(_NUMBER_UNIT.sub("\\1\u00a0", span.text))
        emphasised = (span.italic or italic) and not span.code
        for piece, how in emphasis_pieces(text) if emphasised else [(text, "")]:
            _add_run(paragraph, piece, how, span, bold=bold, size=size, code_font=code_font, link_color=link_color)


def _add_run(paragraph, text: str, how: str, span: Span, *, bold: bool | None, size: float | None, code_font: str,
             link_color: str) -> None:
    run = paragraph.add_run(text)
    if span.bold or bold or how == "bold":
        run.bold = True
    if how == "italic":
        run.italic = True
    if span.code:
        set_run_fonts(run, code_font, None)
        run.font.color.rgb = RGBColor.from_string(CODE_COLOR)
        _rpr_child(run, "w:shd", _RPR_AFTER_SHD, val="clear", color="auto", fill=CODE_FILL)
    if span.sub:
        run.font.subscript = True
    if span.sup:
        run.font.superscript = True
    if size is not None:
        run.font.size = Pt(size)
    if span.link and re.match(r"^(https?|mailto):", span.link):
        run.font.underline = True
        run.font.color.rgb = RGBColor.from_string(link_color)
        link = _hyperlink(paragraph, span.link)
        link.append(run._r)  # move the run inside the hyperlink element
