#!/usr/bin/env python3
"""Designed blocks for slides that would otherwise be a short list or lack their last line
(python-pptx): numbered rows that share the body height, a takeaway panel beside them, and the
source line under the content.

- `rows_slide`: 2-5 plain points (no sub-points) as numbered rows ("01" in the accent colour, a
  hairline between rows) evenly over the body, body text 16-20 pt: a short list fills the slide
  by layout, not by a larger type size. With a `takeaway` the rows take the left 64 % and the
  takeaway sits in a panel on the right. On a user's template the rows fill the body area of its
  content layout, in its colours; lists with sub-points stay in its body placeholder.
- `source_line`: "来源：…" / "Source: …" at the foot of the content area, 12 pt, muted.
"""

from __future__ import annotations

from pptx.enum.text import MSO_ANCHOR, PP_ALIGN
from pptx.util import Inches, Pt

import deck_build
import deck_cards as cards
from deck_build import Deck
from deck_outline import norm_bullets

ROW_SIZES = (20, 18, 16)
SOURCE_H = 0.055  # share of the slide height the source line takes


def fits_rows(deck: Deck, s: dict) -> bool:
    """A short list of plain points."""
    paras = norm_bullets(s.get("bullets"), "")
    return 2 <= len(paras) <= 5 and all(level == 0 for _, level in paras) and all(len(t) <= 90 for t, _ in paras)


def rows_slide(deck: Deck, s: dict):
    slide = deck.titled(s)
    t = deck.theme
    paras = [text for text, _ in norm_bullets(s.get("bullets"), "")]
    n = len(paras)
    x, w = deck.M, deck.body_w  # on a template: its content layout's body area (Deck._template_geometry)
    if s.get("takeaway"):
        panel_w = int(deck.body_w * 0.32)
        gap = int(deck.W * 0.025)
        w = deck.body_w - panel_w - gap
        takeaway_panel(deck, slide, deck.M + deck.body_w - panel_w, panel_w, str(s["takeaway"]))
    num_w = Inches(0.95)
    text_w = w - num_w
    row_h = deck.body_h // n
    size = ROW_SIZES[-1]
    for size in ROW_SIZES:
        if size <= deck.last_title_size - 2 and all(deck.need([(p, 0)], text_w, size, False) <= row_h * 0.9 for p in paras):
            break
    for i, text in enumerate(paras):
        y = deck.body_top + i * row_h
        if i:
            deck.rect(slide, x, y, w, Pt(0.75), t.muted if not t.from_template else t.surface, f"Row Rule {i}")
        number = deck.textbox(slide, x, y, num_w, row_h, [(f"{i + 1:02d}", 0)], 28, f"Row Number {i + 1}", bold=True,
                              colour=deck.ink(t.accent), heading=True)
        number.text_frame.vertical_anchor = MSO_ANCHOR.MIDDLE
        box = deck.textbox(slide, x + num_w, y, text_w, row_h, [(text, 0)], size, f"Row Text {i + 1}", colour=t.text)
        box.text_frame.vertical_anchor = MSO_ANCHOR.MIDDLE
    return slide


def takeaway_panel(deck: Deck, slide, px: int, panel_w: int, text: str):
    """The slide's conclusion in a tinted panel, in the accent colour, bold: the text as large as
    the panel allows, the panel as tall as its text needs, centred on the rows (deck_cards)."""
    inner = panel_w - Inches(0.5)
    size = deck.fit([(text, 0)], inner + 2 * deck_build.INSET_LR, deck.body_h, cards.card_sizes(deck), False, bold=True) or 16
    panel_h = cards.card_height(deck.need([(text, 0)], inner + 2 * deck_build.INSET_LR, size, False, bold=True), deck.body_h)
    panel = deck.rect(slide, px, cards.centred_top(deck, panel_h), panel_w, panel_h, deck.theme.surface, "Takeaway")
    tf = panel.text_frame
    tf.vertical_anchor = MSO_ANCHOR.MIDDLE
    tf.margin_left = tf.margin_right = Inches(0.25)
    deck.set_text(panel, [(text, 0)], size, bold=True, colour=deck.ink(deck.theme.accent), align=PP_ALIGN.LEFT,
                  bullets=False)
    return panel


def reserve_source(deck: Deck, s: dict):
    """Shrink the body for a slide that has a source line; returns the rect to restore."""
    saved = deck.body_rect
    if s.get("source") and str(s.get("type", "")) not in ("title", "section", "closing", "quote"):
        x, y, w, h = saved
        deck.body_rect = (x, y, w, h - int(deck.H * SOURCE_H))
    return saved


def source_line(deck: Deck, slide, s: dict) -> None:
    text = str(s.get("source") or "").strip()
    if not text or str(s.get("type", "")) in ("title", "section", "closing", "quote"):
        return
    if not text.lower().startswith(("来源", "资料来源", "数据来源", "source", "注", "note")):
        text = ("来源：" if deck.zh else "Source: ") + text
    y = deck.body_bottom + int(deck.H * 0.012)
    box = deck.textbox(slide, deck.M, y, deck.body_w, int(deck.H * SOURCE_H) - int(deck.H * 0.012), [(text, 0)], 12,
                       "Source", colour=deck.theme.muted, align=PP_ALIGN.LEFT)
    box.text_frame.vertical_anchor = MSO_ANCHOR.TOP
    for shape in slide.placeholders:  # a template's body placeholder ends above the source line
        if shape.placeholder_format.idx and shape.top is not None and shape.top + shape.height > y and shape.top < y:
            shape.left, shape.top, shape.width, shape.height = shape.left, shape.top, shape.width, y - shape.top


CONTENT_KINDS = ("title", "section", "closing", "quote", "summary")


def summary_points(slides: list[dict], at: int, kind_of) -> list:
    """An executive summary: its own bullets, else the action titles of the content slides after
    it (up to 5), so the answer comes first and reads like the deck's storyline."""
    own = slides[at].get("bullets")
    if own:
        return own
    return [str(s.get("title", "")) for s in slides[at + 1:]
            if kind_of(s) not in CONTENT_KINDS and str(s.get("title", "")).strip()][:5]


def tracker(deck: Deck, slide, section: str | None) -> None:
    """The current section's name, small and muted, above the title (themes only: a template
    places its own headers)."""
    if not section or deck.templated:
        return
    y = int(deck.H * 0.012)
    h = deck.title_rect[1] - y
    if h < Inches(0.2):
        return
    box = deck.textbox(slide, deck.M, y, deck.body_w, h, [(section, 0)], 11, "Section Tracker", colour=deck.theme.muted,
                       align=PP_ALIGN.RIGHT)
    box.text_frame.vertical_anchor = MSO_ANCHOR.BOTTOM
