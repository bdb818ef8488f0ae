#!/usr/bin/env python3
"""Grid drift for check_deck.py: positions a few hundredths to a few tenths of an inch off the
grid are misalignments. The grid is the deck's own: where each slide's layout puts its title,
the left edges of the layouts' title and body placeholders, and the edge a clear majority of
slides use. Cover and section slides are compositions of their own and are not compared.
Findings are (slide, kind, severity, shape, message) tuples.
"""

from __future__ import annotations

from collections import Counter

import deck_rules as rules
from deck_measure import EMU_PER_IN

TOL = int(0.02 * EMU_PER_IN)
INSET_LR = 91440


def _fmt_in(emu: int) -> str:
    return f"{emu / EMU_PER_IN:.2f} in"


def layout_position(shape) -> tuple[int, int] | None:
    """Where the slide's layout puts this placeholder (the template's own grid), or None; also
    None on cover and section layouts, which are compositions of their own, not the grid."""
    if composed(shape.part.slide):
        return None
    try:
        base = shape._base_placeholder if shape.is_placeholder else None
        if base is not None and base.left is not None and base.top is not None:
            return int(base.left), int(base.top)
    except Exception:  # noqa: BLE001 - a placeholder without a layout counterpart
        pass
    return None


def composed(slide) -> bool:
    return slide.slide_layout._element.get("type") in ("title", "secHead")


def grid_lines(prs) -> set[int]:
    """The left edges the deck's layouts define: their title and body placeholders."""
    lines: set[int] = set()
    for slide in prs.slides:
        for ph in slide.slide_layout.placeholders:
            if rules.ph_type(ph) in (*rules.TITLE_TYPES, *rules.BODY_TYPES) and ph.left is not None:
                lines.update((int(ph.left), int(ph.left) + INSET_LR))
    return lines


def drift(titles, content_lefts, grid: set[int] | None = None) -> list[tuple]:
    """Positions a few hundredths to a few tenths of an inch off the grid are misalignments. The
    grid is the template's own: a title is compared with where its layout puts it (a title that
    sits where its layout's placeholder is cannot drift); content with the layouts' title/body
    edges and the edge a clear majority of slides use. Only the outlier is reported."""
    issues: list[tuple] = []
    small = int(0.4 * EMU_PER_IN)
    loose = [(si, x, y) for si, x, y, ref in titles if ref is None]
    for si, x, y, ref in titles:
        if ref is None:
            continue
        dx, dy = abs(x - ref[0]), abs(y - ref[1])
        if max(dx, dy) > TOL and dx < small and dy < small:
            issues.append((si, "grid-drift", "warning", "title",
                                f"title sits {_fmt_in(max(dx, dy))} off the position its layout gives it"))
    for si, dx, dy in _off_majority(loose):
        if max(dx, dy) > TOL and dx < small and dy < small:
            issues.append((si, "grid-drift", "warning", "title",
                                f"title sits {_fmt_in(max(dx, dy))} off the position the other slides use"))
    lines = set(grid or ())
    counts = Counter(x for _, x in content_lefts)
    if counts and len(content_lefts) >= 3:
        top, n = counts.most_common(1)[0]
        if n * 2 > len(content_lefts):
            lines.add(top)
    for si, x in content_lefts:
        if not lines:
            break
        near = min(abs(x - g) for g in lines)
        if TOL < near < small // 2:
            issues.append((si, "grid-drift", "warning", "content",
                                f"main content starts {_fmt_in(near)} off the nearest left edge of the grid "
                                "(the layouts' placeholders and the other slides)"))
    return issues


def _off_majority(points):
    """(slide, dx, dy) of titles without a layout position against the position a strict
    majority of them share; nothing when there is no clear majority (no outlier to name)."""
    if len(points) < 3:
        return []
    (pos, n), = Counter((x, y) for _, x, y in points).most_common(1)
    if n * 2 <= len(points):
        return []
    return [(si, abs(x - pos[0]), abs(y - pos[1])) for si, x, y in points]
