#!/usr/bin/env python3
"""Text slide kinds: title, section, bullets, two columns, comparison, table, image, quote,
closing. Each takes the Deck (deck_build.py) and one outline slide and returns the slide.

Content fills the slide by design: sizes are fitted from large to the body size and the spare
height goes between paragraphs, so three bullets do not sit in the top third of the slide.
Nothing is fitted below the body floor (16 pt bullets, 12 pt tables): what does not fit then is
reported by the checker, or split into continuation slides before building (outline_to_deck).
"""

from __future__ import annotations

import re
from pathlib import Path

from pptx.enum.shapes import PP_PLACEHOLDER
from pptx.enum.text import MSO_ANCHOR, PP_ALIGN
from pptx.util import Inches, Pt

import deck_cards as cards
import deck_inherit as inh
import deck_measure as dm
from deck_build import INSET_LR, INSET_TB, Deck, rgb, set_bullet
from deck_outline import norm_bullets

BULLET_SIZES = (20, 18, 16)  # body text 16-20 pt: the space is filled by layout, not by type size
NUMERIC = re.compile(r"^[\s+\-−±$¥€£~≈<>]*[\d.,]+\s*(%|‰|pt|x|k|m|bn|亿|万|元|倍)?\s*$", re.I)


def _spread(deck: Deck, paras, width: int, height: int, size: float, placeholder: bool) -> tuple[float, float]:
    """(points between top-level items, points before a sub-point): the spare height goes
    between the groups, so a sub-point stays with its parent and the list uses most of the
    height (capped: a loose list of three reads better than three lines pinned to the top, but
    not one spread like a table)."""
    tight = round(size * 0.3, 1)
    gaps = sum(1 for i, (_, level) in enumerate(paras) if i and level == 0)
    subs = sum(1 for i, (_, level) in enumerate(paras) if i and level > 0)
    if not gaps:
        return tight, tight
    used = deck.need(paras, width, size, placeholder, space=0.0) + subs * tight * 12700
    spare = max(0.0, height * 0.85 - used) / 12700
    return round(min(spare / gaps, size * 3.5), 1), tight


def fill_list(deck: Deck, shape, paras, rect, sizes=BULLET_SIZES, placeholder=True, bullets=True, colour=None):
    x, y, w, h = rect
    own = deck.templated and placeholder
    base = 0.0
    if own:  # the template's body size first (its layout's, else its master's), smaller only when it does not fit
        base = inh.inherited(shape, 0, "sz") or deck.tpl_body
        sizes = tuple(z for z in range(int(base), 15, -2)) or (16,)
    sizes = tuple(z for z in sizes if z <= deck.last_title_size - 2) or sizes[-1:]
    size = deck.fit(paras, w, h, sizes, placeholder, space=0.0) or sizes[-1]
    space, tight = _spread(deck, paras, w, h, size, placeholder)
    # the fit used no spacing: make sure the spacing still fits, else keep it tight
    gaps = sum(1 for i, (_, level) in enumerate(paras) if i and level == 0)
    subs = len(paras) - 1 - gaps
    if deck.need(paras, w, size, placeholder, space=0.0) + (gaps * space + subs * tight) * 12700 > h * 0.97:
        space = tight
    written: float | None = size
    if own and size >= base and _monotonic(shape, {lv for _, lv in paras}):
        written = None  # the template's own sizes fit and keep its levels in order
    deck.set_text(shape, paras, written, space=space, bullets=bullets, colour=None if own else (colour or deck.theme.text))
    for p in list(shape.text_frame.paragraphs)[1:]:
        if (p.level or 0) > 0:
            p.space_before = Pt(tight)
    return size


def _monotonic(shape, levels: set[int]) -> bool:
    """Whether the template's inherited sizes never grow with the level (a template whose body
    sets level 1 to 20 pt and leaves level 2 at the master's 28 pt does not)."""
    sizes = [inh.inherited(shape, lv, "sz") for lv in range(max(levels) + 1)] if levels else []
    known = [z for z in sizes if z is not None]
    return all(b <= a for a, b in zip(known, known[1:]))


def template_fit(deck: Deck, shape, paras, floor: float, **kw) -> float | None:
    """With a template, the size its placeholder gives the text when that fits the placeholder's
    box (None: nothing written), else the largest that does, down to `floor`."""
    if not shape.is_placeholder or shape.width is None:
        return None
    base = inh.inherited(shape, 0, "sz") or 18.0
    sizes = [base - 2 * i for i in range(40) if base - 2 * i >= floor] or [floor]
    size = deck.fit(paras, int(shape.width), int(shape.height), sizes, False, **kw) or sizes[-1]
    return None if size >= base else size


def heading(deck: Deck, shape, text: str, w: int, h: int, sizes, anchor, align=PP_ALIGN.LEFT) -> None:
    """A big heading (title, section, closing) fitted to its box; with a template, its own look."""
    size = deck.fit([(text, 0)], w, h, sizes, False, bold=True, heading=True) or sizes[-1]
    own = deck.templated
    if own:
        size = template_fit(deck, shape, [(text, 0)], 24, bold=True, heading=True)
    deck.set_text(shape, [(text, 0)], size, bold=None if own else deck.theme.heading_bold or size >= 36,
                  colour=None if own else deck.theme.title, align=None if own else align, bullets=False, heading=True)
    shape.text_frame.vertical_anchor = anchor


def title_slide(deck: Deck, s: dict):
    slide = deck.new_slide("title")
    title = slide.shapes.title
    t = deck.theme
    x, w = deck.M + Inches(0.35), deck.W - 2 * deck.M - Inches(0.35)
    ty, th = int(deck.H * 0.30), int(deck.H * 0.25)
    if not deck.templated:
        deck.place(title, x, ty, w, th)
        deck.rect(slide, deck.M, ty + Inches(0.1), Inches(0.12), int(deck.H * 0.42), t.accent, "Accent Bar")
    heading(deck, title, s["title"], w, th, (44, 40, 36, 32), MSO_ANCHOR.BOTTOM)
    keep = [title]
    lines = [x for x in [s.get("subtitle"), s.get("author"), s.get("date")] if x]
    if lines:
        sub = deck.placeholder(slide, PP_PLACEHOLDER.SUBTITLE, PP_PLACEHOLDER.BODY) or slide.shapes.add_textbox(0, 0, 1, 1)
        keep.append(sub)
        sy, sh = ty + th + int(deck.H * 0.03), int(deck.H * 0.2)
        if not deck.templated or not sub.is_placeholder:
            deck.place(sub, x, sy, w, sh)
        paras = [(line, 0) for chunk in lines for line in str(chunk).split("\n")]
        size = deck.fit(paras, w, sh, (22, 20, 18, 16), False) or 16
        if deck.templated:
            size = template_fit(deck, sub, paras, 14)
        deck.set_text(sub, paras, size, colour=None if deck.templated else t.muted,
                      align=None if deck.templated else PP_ALIGN.LEFT, bullets=False)
        sub.text_frame.vertical_anchor = MSO_ANCHOR.TOP
    deck.drop_unused(slide, keep)
    return slide


def section_slide(deck: Deck, s: dict, number: int):
    slide = deck.new_slide("section", "title_only")
    title = slide.shapes.title
    t = deck.theme
    x, w = deck.M, deck.W - 2 * deck.M
    ty, th = int(deck.H * 0.40), int(deck.H * 0.17)
    if not deck.templated:  # a coloured band with the section number, the title beside it
        band = int(deck.W * 0.3)
        deck.rect(slide, 0, 0, band, deck.H, t.accent, "Section Band")
        number_box = deck.textbox(slide, 0, int(deck.H * 0.3), band, int(deck.H * 0.4), [(f"{number:02d}", 0)], 80,
                                  "Section Number", colour="FFFFFF", bold=True, heading=True, align=PP_ALIGN.CENTER)
        number_box.text_frame.vertical_anchor = MSO_ANCHOR.MIDDLE
        x, w = band + deck.M, deck.W - band - 2 * deck.M
        deck.place(title, x, ty, w, th)
    heading(deck, title, s["title"], w, th, (40, 36, 32, 28), MSO_ANCHOR.TOP)
    keep = [title]
    if s.get("subtitle"):
        body = deck.placeholder(slide, PP_PLACEHOLDER.BODY)
        if body is None:
            body = slide.shapes.add_textbox(0, 0, 1, 1)
        keep.append(body)
        if not deck.templated or not body.is_placeholder:
            deck.place(body, x, ty + th + int(deck.H * 0.02), w, int(deck.H * 0.14))
        deck.set_text(body, [(s["subtitle"], 0)], None if deck.templated else 20,
                      colour=None if deck.templated else t.muted, bullets=False)
    deck.drop_unused(slide, keep)
    return slide


def bullets_slide(deck: Deck, s: dict):
    slide = deck.new_slide("content")
    title = deck.add_title(slide, s["title"])
    paras = norm_bullets(s.get("bullets"), "")
    body = deck.placeholder(slide, PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT)
    if body is None or not paras:
        deck.drop_unused(slide, [title])
        return slide
    if not deck.templated:
        deck.place(body, *deck.body_rect)
    rect = (int(body.left), int(body.top), int(body.width), int(body.height)) if deck.templated else deck.body_rect
    fill_list(deck, body, paras, rect)
    deck.drop_unused(slide, [title, body])
    return slide


def two_column_slide(deck: Deck, s: dict, boxed: bool = False):
    """Two columns; `boxed` (the comparison kind) draws them as two panels with coloured heads."""
    slide = deck.new_slide("two", "content")
    title = deck.add_title(slide, s["title"])
    t = deck.theme
    gap = int(deck.W * 0.03)
    col_w = (deck.body_w - gap) // 2
    bodies = deck.bodies(slide)
    keep = [title]
    panel_paras: list = []
    for ci, key in enumerate(("left", "right")):
        head = s.get(f"{key}_title")
        paras = norm_bullets(s.get(key), "")
        x = deck.M + ci * (col_w + gap)
        y, h = deck.body_top, deck.body_h
        if boxed and not deck.templated:
            panel_paras.append((x, head, paras))
            continue
        box = bodies[ci] if ci < len(bodies) else slide.shapes.add_textbox(x, y, col_w, h)
        keep.append(box)
        if not (deck.templated and box.is_placeholder):
            deck.place(box, x, y, col_w, h)
        rect = (int(box.left), int(box.top), int(box.width), int(box.height))
        all_paras = ([(head, 0)] if head else []) + paras
        fill_list(deck, box, all_paras or [("", 0)], rect, sizes=(20, 18, 16),
                  bullets=True if box.is_placeholder else "manual")
        if head:
            first = box.text_frame.paragraphs[0]
            for run in first.runs:
                run.font.bold = True
                run.font.color.rgb = rgb(deck.ink(t.palette[ci]))
            ppr = first._p.get_or_add_pPr()
            ppr.set("marL", "0")
            ppr.set("indent", "0")
            set_bullet(ppr, "a:buNone")
            deck.no_orphans(box)
    deck.drop_unused(slide, keep)
    if panel_paras:
        _panels(deck, slide, panel_paras, col_w)
    return slide


def _panels(deck: Deck, slide, columns, col_w: int) -> None:
    """The comparison kind: two panels with coloured heads, the text as large as they allow, as
    tall as the fuller one needs, centred in the body (deck_cards)."""
    t = deck.theme
    pad, head_h = Inches(0.2), Inches(0.85)
    inner = col_w - 2 * pad
    sizes = cards.card_sizes(deck)
    size = sizes[-1]
    for size in sizes:  # as large as the panels allow (deck_cards)
        if all(deck.need(p, inner, size, False, space=size * 0.6) <= deck.body_h - head_h - 2 * pad for _, _, p in columns):
            break
    need = max(deck.need(p, inner, size, False, space=size * 0.6) for _, _, p in columns)
    h = cards.card_height(head_h + need + 2 * pad, deck.body_h)
    y0 = cards.centred_top(deck, h)
    for ci, (x, head, paras) in enumerate(columns):
        colour = t.palette[ci]
        deck.rect(slide, x, y0, col_w, h, t.surface, f"Panel {ci + 1}")
        deck.rect(slide, x, y0, col_w, Inches(0.08), colour, f"Panel Rule {ci + 1}")
        top = y0 + pad
        if head:
            deck.textbox(slide, x + pad - INSET_LR, top, inner + 2 * INSET_LR, head_h - pad, [(head, 0)], 24,
                         f"Panel Head {ci + 1}", bold=True, colour=deck.ink(colour), heading=True)
        box = deck.textbox(slide, x + pad - INSET_LR, y0 + head_h + pad, inner + 2 * INSET_LR,
                           h - head_h - 2 * pad, [], None, f"Panel Text {ci + 1}")
        deck.set_text(box, paras or [("", 0)], size, colour=t.text, bullets="manual", space=size * 0.6)


def table_geometry(deck: Deck, cols: list[str], rows: list[list[str]], width: int, height: int):
    """(font size, column widths, row heights): content-sized columns, CJK-aware row heights."""
    fam = deck.fam()
    for size in (20, 18, 16, 14, 13, 12) if len(rows) <= 4 else (18, 16, 14, 13, 12):
        widths = dm.column_widths([cols, *rows], width, size, fam)
        heights = []
        for ri, row in enumerate([cols, *rows]):
            need = max(dm.cell_height([(c, size, deck.fam(ri == 0))], w - 2 * INSET_LR) for c, w in zip(row, widths))
            heights.append(need + 2 * INSET_TB)
        if sum(heights) <= height:
            # a short table gets roomier rows (up to 0.8 in) instead of a block in the top third
            target = min(height * 0.8, len(heights) * 731520)  # rows up to 0.8 in
            if sum(heights) < target:
                extra = (target - sum(heights)) / len(heights)
                heights = [int(h + extra) for h in heights]
            return size, widths, heights
    return size, widths, heights


ABOVE, BELOW = "1E7B34", "B3261E"  # on target / off target: green and red that read on white and tints


def emphasis(rule, cols: list[str], ci: int, value: str) -> str | None:
    """The colour of a cell the data emphasises: `"emphasis": {"column": "同比", "above": 15,
    "below": 13}` marks values at or above / at or below a target in that column."""
    if not isinstance(rule, dict) or ci >= len(cols) or cols[ci] != str(rule.get("column")):
        return None
    m = re.search(r"[-+−]?\d+(?:\.\d+)?", value.replace(",", ""))
    if not m:
        return None
    number = float(m.group().replace("−", "-"))
    if isinstance(rule.get("above"), (int, float)) and number >= rule["above"]:
        return ABOVE
    if isinstance(rule.get("below"), (int, float)) and number <= rule["below"]:
        return BELOW
    return None


def table_slide(deck: Deck, s: dict):
    slide = deck.titled(s)
    t = deck.theme
    data = s["table"]
    cols = [str(c) for c in data["columns"]]
    rows = [[("" if v is None else str(v)) for v in r] for r in data["rows"]]
    cap_h = int(deck.H * 0.07) if s.get("caption") else 0
    width = deck.body_w  # tables take the content width (a narrow one only looked unfinished)
    size, widths, heights = table_geometry(deck, cols, rows, width, deck.body_h - cap_h)
    frame = slide.shapes.add_table(len(rows) + 1, len(cols), deck.M, deck.body_top, width, sum(heights))
    frame.name = "Table"
    table = frame.table
    for ci, w in enumerate(widths):
        table.columns[ci].width = w
    for r, row in enumerate([cols, *rows]):
        table.rows[r].height = heights[r]
        for ci, value in enumerate(row):
            cell = table.cell(r, ci)
            cell.text = ""
            cell.margin_left = cell.margin_right = INSET_LR
            cell.margin_top = cell.margin_bottom = INSET_TB
            cell.vertical_anchor = MSO_ANCHOR.MIDDLE
            p = cell.text_frame.paragraphs[0]
            numeric = bool(NUMERIC.match(value))
            p.alignment = PP_ALIGN.CENTER if r == 0 else (PP_ALIGN.RIGHT if numeric else PP_ALIGN.LEFT)
            mark = emphasis(data.get("emphasis"), cols, ci, value) if r else None
            deck.add_runs(p, value, size, bold=(r == 0 or mark is not None),
                          colour=deck.on(t.accent) if r == 0 else (mark or t.text))
            cell.fill.solid()
            cell.fill.fore_color.rgb = rgb(t.accent if r == 0 else (t.surface if r % 2 == 0 else "FFFFFF"))
    if cap_h:
        caption(deck, slide, s["caption"], deck.body_top + sum(heights) + int(deck.H * 0.015))
    return slide


def image_slide(deck: Deck, s: dict, base: Path):
    has_title = bool(str(s.get("title", "")).strip())
    slide = deck.new_slide("title_only" if has_title else "blank", "title_only")
    keep = [deck.add_title(slide, s["title"])] if has_title else []
    deck.drop_unused(slide, keep)
    top = deck.body_top if has_title else deck.M
    cap_h = int(deck.H * 0.075) if s.get("caption") else 0
    box_w, box_h = deck.body_w, deck.body_bottom - top - cap_h
    pic = slide.shapes.add_picture(str(base / s["image"]), deck.M, top)
    ratio = min(box_w / pic.width, box_h / pic.height)
    pic.width, pic.height = int(pic.width * ratio), int(pic.height * ratio)
    pic.left = deck.M + (box_w - pic.width) // 2
    pic.top = top + (box_h - pic.height) // 2
    pic.name = "Picture"
    if cap_h:
        caption(deck, slide, s["caption"], pic.top + pic.height + int(deck.H * 0.012))
    return slide


def caption(deck: Deck, slide, text: str, y: int) -> None:
    h = int(deck.H * 0.06)
    box = deck.textbox(slide, deck.M, y, deck.body_w, h, [(str(text), 0)], 14, "Caption", colour=deck.theme.muted,
                       align=PP_ALIGN.CENTER)
    box.text_frame.vertical_anchor = MSO_ANCHOR.TOP


def quote_slide(deck: Deck, s: dict):
    slide = deck.new_slide("blank", "title_only")
    deck.drop_unused(slide, [])
    t = deck.theme
    x, w = deck.M + Inches(1.0), deck.W - 2 * deck.M - Inches(2.0)
    deck.textbox(slide, x - Inches(0.9), int(deck.H * 0.16), Inches(1.2), Inches(1.4), [("“", 0)], 96, "Quote Mark",
                 colour=deck.ink(t.accent), bold=True, heading=True)
    qy, qh = int(deck.H * 0.28), int(deck.H * 0.38)
    paras = [(str(s["quote"]), 0)]
    size = deck.fit(paras, w, qh, (32, 30, 28, 26, 24), False, heading=True) or 24
    box = deck.textbox(slide, x, qy, w, qh, paras, size, "Quote", colour=t.title, heading=True)
    box.text_frame.vertical_anchor = MSO_ANCHOR.MIDDLE
    if s.get("source"):
        deck.textbox(slide, x, qy + qh + Inches(0.15), w, Inches(0.6), [("— " + str(s["source"]), 0)], 18, "Quote Source",
                     colour=t.muted)
    return slide


def closing_slide(deck: Deck, s: dict):
    slide = deck.new_slide("title", "section", "title_only")
    title = slide.shapes.title
    t = deck.theme
    text = str(s.get("title") or ("谢谢" if deck.zh else "Thank you"))
    ty, th = int(deck.H * 0.34), int(deck.H * 0.18)
    if not deck.templated:
        deck.place(title, deck.M, ty, deck.body_w, th)
        deck.rect(slide, (deck.W - Inches(1.2)) // 2, ty - Inches(0.3), Inches(1.2), Inches(0.06), t.accent, "Accent Rule")
    heading(deck, title, text, deck.body_w, th, (44, 40, 36), MSO_ANCHOR.MIDDLE, PP_ALIGN.CENTER)
    keep = [title]
    lines = [(line, 0) for line in str(s.get("subtitle", "")).split("\n") if line.strip()]
    if lines:
        sub = deck.placeholder(slide, PP_PLACEHOLDER.SUBTITLE, PP_PLACEHOLDER.BODY) or slide.shapes.add_textbox(0, 0, 1, 1)
        keep.append(sub)
        if not deck.templated or not sub.is_placeholder:
            deck.place(sub, deck.M, ty + th + Inches(0.1), deck.body_w, int(deck.H * 0.2))
        deck.set_text(sub, lines, None if deck.templated else 20, colour=None if deck.templated else t.muted,
                      align=PP_ALIGN.CENTER, bullets=False)
    deck.drop_unused(slide, keep)
    return slide
