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
                  shrink_to_fit: float | None = None, size: float | None = None) -> list[int]:
    """Content-sized column widths (EMU) summing to `total`: each column gets a share by its
    longest cell, floored so short columns stay readable and capped so one long column cannot
    squeeze the rest into a letter per line. Headers are kept on one line when every column's
    natural width fits (`size`: the font size in pt; a Chinese header breaks between any two
    characters, "的稳定 / 性", so a header only wraps when it must); otherwise a header counts at
    `header_weight` and its column is at least as wide as its longest word.
    `shrink_to_fit` (the font size in pt): a table whose content is narrower than `total` gets
    its natural width instead (at least half of `total`), rather than being stretched across."""
    ncols = max(len(r) for r in rows)

    def weights_at(hw: float) -> list[float]:
        out = []
        for c in range(ncols):
            cells = [display_width(r[c]) if c < len(r) else 0 for r in rows]
            body = max(cells[1:], default=0)
            word = max((display_width(t) for t in _WORDS.split(rows[0][c] if c < len(rows[0]) else "")), default=0)
            out.append(min(max(body, cells[0] * hw, 6, word + 2), 60))
        return out

    size = shrink_to_fit or size
    full = weights_at(1.0)
    natural = int(sum(full) * Pt((size or 10.5) * 0.55) + ncols * Cm(0.5))  # with room to spare
    snug = int(sum(full) * Pt((size or 10.5) * 0.52) + ncols * Cm(0.38))  # the text and Word's cell margins
    weights = full if size and snug <= total else weights_at(header_weight)
    if shrink_to_fit:
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
