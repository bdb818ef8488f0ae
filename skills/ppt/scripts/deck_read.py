#!/usr/bin/env python3
"""Reading a deck's text as it will render (python-pptx + stdlib), for check_deck.py: each
paragraph's text (runs, fields, breaks), size (run, paragraph, layout, master), font family,
margins and spacing; a table's height with CJK-aware rows.
"""

from __future__ import annotations

from pptx.enum.shapes import MSO_SHAPE_TYPE
from pptx.oxml.ns import qn

import deck_inherit as inh
import deck_measure as dm
import deck_rules as rules
from deck_measure import EMU_PER_IN

DEFAULT_SIZE_PT = 18.0
# Default text-frame insets (python-pptx / PowerPoint): 0.1 in left/right, 0.05 in top/bottom.
INSET_LR = 91440
INSET_TB = 45720


def _master_sizes(prs) -> dict[str, list[float]]:
    """Default font sizes (pt) of the first master: title, and body per level."""
    ns = {"a": "http://schemas.openxmlformats.org/drawingml/2006/main",
          "p": "http://schemas.openxmlformats.org/presentationml/2006/main"}
    sizes = {"title": [44.0], "body": [32.0, 28.0, 24.0, 20.0, 20.0], "other": [18.0]}
    try:
        tx = prs.slide_masters[0]._element.find("p:txStyles", ns)
        for key, tag in (("title", "p:titleStyle"), ("body", "p:bodyStyle"), ("other", "p:otherStyle")):
            style = tx.find(tag, ns)
            if style is None:
                continue
            found = []
            for lvl in range(1, 10):
                d = style.find(f"a:lvl{lvl}pPr/a:defRPr", ns)
                if d is not None and d.get("sz"):
                    found.append(int(d.get("sz")) / 100.0)
            if found:
                sizes[key] = found
    except Exception:  # noqa: BLE001 - fall back to PowerPoint defaults
        pass
    return sizes


def _layout_size(shape, level: int) -> float | None:
    """A placeholder's size inherited through its own, its layout's and its master's list
    styles and the master's text styles (deck_inherit)."""
    try:
        return inh.inherited(shape, level, "sz")
    except Exception:  # noqa: BLE001 - a shape outside a slide
        return None


def _font_scale(text_frame) -> tuple[float, float]:
    body = text_frame._txBody.find(qn("a:bodyPr"))
    auto = body.find(qn("a:normAutofit")) if body is not None else None
    if auto is None:
        return 1.0, 1.0
    scale = int(auto.get("fontScale", "100000")) / 100000.0
    reduce = int(auto.get("lnSpcReduction", "0")) / 100000.0
    return scale, 1.0 - reduce


def _insets(text_frame) -> tuple[int, int, int, int]:
    def val(v, default):
        return int(v) if v is not None else default
    return (val(text_frame.margin_left, INSET_LR), val(text_frame.margin_right, INSET_LR),
            val(text_frame.margin_top, INSET_TB), val(text_frame.margin_bottom, INSET_TB))


def _para_text(p) -> str:
    """Runs, fields (slide numbers) and line breaks, as shown."""
    parts = []
    for el in p._p:
        if el.tag in (qn("a:r"), qn("a:fld")):
            t = el.find(qn("a:t"))
            parts.append(t.text or "" if t is not None else "")
        elif el.tag == qn("a:br"):
            parts.append("\n")
    return "".join(parts)


def _para_font(p, theme: rules.ThemeInfo, heading: bool) -> tuple[list[float], str, bool]:
    sizes, face, bold = [], None, False
    for el in p._p:
        if el.tag not in (qn("a:r"), qn("a:fld")):
            continue
        rpr = el.find(qn("a:rPr"))
        if rpr is None:
            continue
        if rpr.get("sz"):
            sizes.append(int(rpr.get("sz")) / 100.0)
        latin = rpr.find(qn("a:latin"))
        if latin is not None and face is None:
            face = latin.get("typeface")
        bold = bold or rpr.get("b") == "1"
    return sizes, dm.family(theme.font(face, heading), bold), bold


def paragraphs_of(shape, master: dict, theme: rules.ThemeInfo | None = None) -> list[tuple]:
    """(text, size_pt, left margin, space before, family, line spacing) of each paragraph."""
    theme = theme or rules.ThemeInfo(shape.part.package.presentation_part.presentation)
    tf = shape.text_frame
    title = rules.is_title(shape)
    scale, spacing = _font_scale(tf)
    out = []
    for p in tf.paragraphs:
        text = _para_text(p)
        level = p.level or 0
        sizes, fam, _ = _para_font(p, theme, title)
        if sizes:
            size = max(sizes)
        elif p.font.size is not None:
            size = p.font.size.pt
        elif shape.is_placeholder:
            size = _layout_size(shape, level)
            if size is None:
                table = master["title"] if title else master["body"]
                size = table[min(level, len(table) - 1)]
        else:
            size = DEFAULT_SIZE_PT
        size *= scale
        margin = 0
        ppr = p._p.find(qn("a:pPr"))
        if ppr is not None and ppr.get("marL") is not None:
            margin = int(ppr.get("marL"))
        elif shape.is_placeholder and not title:
            margin = int((0.375 + 0.42 * level) * EMU_PER_IN)
        if ppr is not None and ppr.get("marR") is not None:
            margin += int(ppr.get("marR"))  # a right indent narrows the line the same way
        before = 0.0 if title else size * 0.2 if shape.is_placeholder else 0.0
        if p.space_before is not None:
            before = p.space_before.pt
        line = spacing
        if p.line_spacing is not None and isinstance(p.line_spacing, float):
            line *= p.line_spacing
        out.append((text, size, margin, before, fam, line))
    return out


def _wrap_mode(text_frame) -> tuple[bool, bool]:
    """(wraps, grows): `wrap="none"` text never wraps; `spAutoFit` boxes grow with their text."""
    body = text_frame._txBody.find(qn("a:bodyPr"))
    if body is None:
        return True, False
    return body.get("wrap") != "none", body.find(qn("a:spAutoFit")) is not None


def _anchor(shape) -> str:
    """The vertical anchor: the shape's own, else its layout's and master's placeholder's."""
    holder = shape
    for _ in range(3):
        body = holder._element.find(f"{qn('p:txBody')}/{qn('a:bodyPr')}")
        if body is not None and body.get("anchor"):
            return body.get("anchor")
        try:
            holder = holder._base_placeholder if holder.is_placeholder else None
        except Exception:  # noqa: BLE001 - the end of the chain
            holder = None
        if holder is None:
            break
    if rules.is_title(shape):
        return "ctr"
    return "ctr" if shape.shape_type == MSO_SHAPE_TYPE.AUTO_SHAPE else "t"


def table_height(table, master=None, theme: rules.ThemeInfo | None = None) -> int:
    """The rendered height: each row as tall as its tallest cell, lines as tall as their fonts."""
    total = 0
    for row in table.rows:
        row_h = int(row.height or 0)
        for ci, cell in enumerate(row.cells):
            width = int(table.columns[ci].width) if ci < len(table.columns) else 0
            paras = []
            for p in cell.text_frame.paragraphs:
                sizes, fam, _ = _para_font(p, theme, False) if theme else ([], "dejavu", False)
                paras.append((_para_text(p), max(sizes) if sizes else DEFAULT_SIZE_PT, fam))
            ml = cell.margin_left if cell.margin_left is not None else INSET_LR
            mr = cell.margin_right if cell.margin_right is not None else INSET_LR
            mt = cell.margin_top if cell.margin_top is not None else INSET_TB
            mb = cell.margin_bottom if cell.margin_bottom is not None else INSET_TB
            need = dm.cell_height(paras, width - int(ml) - int(mr)) + int(mt) + int(mb)
            row_h = max(row_h, need)
        total += row_h
    return total




def cell_lines(table, theme: rules.ThemeInfo):
    """(row, column, text, lines) of every non-empty cell paragraph, wrapped in its column."""
    for ri, row in enumerate(table.rows):
        for ci, cell in enumerate(row.cells):
            width = int(table.columns[ci].width) if ci < len(table.columns) else 0
            ml = cell.margin_left if cell.margin_left is not None else INSET_LR
            mr = cell.margin_right if cell.margin_right is not None else INSET_LR
            for p in cell.text_frame.paragraphs:
                text = _para_text(p)
                if not text.strip():
                    continue
                sizes, fam, _ = _para_font(p, theme, False)
                size = max(sizes) if sizes else DEFAULT_SIZE_PT
                yield ri, ci, text, dm.wrap(text, width - int(ml) - int(mr), size, fam)
