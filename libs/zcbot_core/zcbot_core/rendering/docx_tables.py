"""Content-sized table columns: widths from the cells' text, so "项目" does not get half a table and
a formula column is not broken across lines (python-docx + stdlib only)."""

from __future__ import annotations

import re

from docx.shared import Cm, Pt

# A header wraps between its words, never inside one ("电化学窗 / 口" was seen): CJK runs between
# spaces and brackets count as words.
_WORDS = re.compile(r"[\s()（）/]+")


def display_width(text: str) -> int:
    """Width in half-width cells: a CJK character (or full-width form) counts two."""
    return sum(2 if "\u2e80" <= ch <= "\u9fff" or "\uf900" <= ch <= "\uffef" else 1 for ch in text)


def column_widths(rows: list[list[str]], total: int, header_weight: float = 0.6,
                  shrink_to_fit: float | None = None) -> list[int]:
    """Content-sized column widths (EMU) summing to `total`: each column gets a share by its
    longest cell (header counted at `header_weight`: it may wrap), floored so short columns stay
    readable and capped so one long column cannot squeeze the rest into a letter per line; a
    column is at least as wide as its header's longest word.
    `shrink_to_fit` (the font size in pt): a table whose content is narrower than `total` gets
    its natural width instead (at least half of `total`), rather than being stretched across."""
    ncols = max(len(r) for r in rows)
    weights = []
    for c in range(ncols):
        cells = [display_width(r[c]) if c < len(r) else 0 for r in rows]
        body = max(cells[1:], default=0)
        word = max((display_width(t) for t in _WORDS.split(rows[0][c] if c < len(rows[0]) else "")), default=0)
        weights.append(min(max(body, cells[0] * header_weight, 6, word + 2), 60))
    if shrink_to_fit:
        natural = int(sum(max(w, cells_w) for w, cells_w in zip(weights, [display_width(h) for h in rows[0]]))
                      * Pt(shrink_to_fit * 0.55) + ncols * Cm(0.5))
        total = max(min(natural, total), total // 2)
    scale = total / sum(weights)
    widths = [int(w * scale) for w in weights]
    widths[-1] += total - sum(widths)
    return widths


def set_column_widths(table, widths: list[int]) -> None:
    table.autofit = False
    for c, width in enumerate(widths):
        table.columns[c].width = width
        for cell in table.columns[c].cells:
            cell.width = width
