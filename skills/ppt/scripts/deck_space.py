#!/usr/bin/env python3
"""How a slide uses its space, for check_deck.py: a content slide whose content stops in the
upper half of the body (the lower half empty), a table much narrower than the content area
while its cells wrap. Findings are (kind, severity, shape, message) tuples.
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
