#!/usr/bin/env python3
"""How a slide uses its space, for check_deck.py: a content slide whose content stops in the
upper half of the body (the lower half empty), a table much narrower than the content area
while its cells wrap, a card or panel whose text fills only part of it (card-fill). Findings are (kind, severity, shape, message) tuples.
"""

from __future__ import annotations

from deck_measure import EMU_PER_IN

EMPTY_SHARE = 0.6     # content ending above this share of the body height leaves its lower part empty
NARROW_TABLE = 0.75   # a table under this share of the content width, with wrapped cells


def empty_area(boxes, panels, slide_h: int, footer_band: float) -> tuple | None:
    """boxes: (name, used rect, kind) as measured; panels: rects of the slide's filled shapes."""
    titles = [r for _, r, kind in boxes if kind == "title"]
    if not titles:
        return None  # no title: a picture, quote or free composition, judged by eye
    top = max(r[1] + r[3] for r in titles)
    floor = int(slide_h * footer_band)
    content = [r for _, r, kind in boxes if kind != "title" and r[1] >= top - EMU_PER_IN * 0.1] + \
        [r for r in panels if r[1] >= top - EMU_PER_IN * 0.1]
    if not content or floor <= top:
        return None
    lowest = max(r[1] + r[3] for r in content)
    used = (lowest - top) / (floor - top)
    if used >= EMPTY_SHARE:
        return None
    return ("empty-area", "warning", "slide", f"the content ends {100 * used:.0f}% of the way down the body; the lower "
            f"{(floor - lowest) / EMU_PER_IN:.1f} in are empty: a layout that fills the slide (rows, cards, a takeaway, "
            "a chart) or more content")


def narrow_table(shape, content_w: int, lines) -> tuple | None:
    """`lines`: (row, column, text, wrapped lines) of the table's cells."""
    width = int(shape.width)
    if width >= content_w * NARROW_TABLE:
        return None
    wrapped = [text for _, _, text, ls in lines if len(ls) > 1]
    if not wrapped:
        return None
    return ("table-width", "warning", shape.name, f"table '{shape.name}' is {100 * width / content_w:.0f}% of the content "
            f"width while {len(wrapped)} cells wrap ('{wrapped[0][:12]}…'): give it the full width")


CARD_FILL = 0.5       # a card's text spanning less than this share of its height leaves it half empty
CARD_EMPTY_BELOW = 0.4  # ... or the text ending above the lower 40 % of the card
CARD_MIN_H = 1.2      # inches: smaller filled shapes are rules, bars and badges, not cards


def card_fill(boxes, panels, slide_h: int) -> list[tuple]:
    """Cards and panels (filled shapes) whose text covers less than CARD_FILL of their height,
    measured from the highest to the lowest line of text inside them, or leaves more than
    CARD_EMPTY_BELOW of the card empty under it. A row of equal cards (same top and height) is
    judged by its fullest card: equal cards hold unequal texts by design. A card holding a chart,
    table or picture is judged by that content, not its text."""
    rows: dict[tuple[int, int], list[tuple[float, float, str]]] = {}
    step = int(EMU_PER_IN * 0.05)
    for x, y, w, h in panels:
        if h < CARD_MIN_H * EMU_PER_IN or w < CARD_MIN_H * EMU_PER_IN or h > slide_h * 0.8:
            continue  # a rule or badge; a band or cover panel (its text is placed by the layout)
        inside = [(name, r, kind) for name, r, kind in boxes
                  if x <= r[0] + r[2] // 2 <= x + w and y <= r[1] + r[3] // 2 <= y + h]
        texts = [(name, r) for name, r, kind in inside if kind == "text"]
        if not texts or len(texts) < len(inside):
            continue
        top = min(r[1] for _, r in texts)
        bottom = max(r[1] + r[3] for _, r in texts)
        rows.setdefault((round(y / step), round(h / step)), []).append(((bottom - top) / h, (y + h - bottom) / h, texts[0][0]))
    found = []
    for cards in rows.values():
        share, below, name = max(cards)
        if share >= CARD_FILL and below <= CARD_EMPTY_BELOW:
            continue
        which = f"the card behind '{name}'" if len(cards) == 1 else f"the fullest of {len(cards)} cards ('{name}')"
        found.append(("card-fill", "warning", name, f"the text in {which} fills {100 * share:.0f}% of its height, the "
                      f"lower {100 * below:.0f}% empty: size the text to the card (larger type, or a smaller card)"))
    return found
