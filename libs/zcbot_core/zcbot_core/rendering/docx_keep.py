"""What stays together on a page, and one date under a title (python-docx + stdlib only).

- A short list (up to `SHORT_LIST` items) is kept on one page; a longer one never leaves its
  first or its last item alone on a page (a list item stranded on the next page was seen).
- A one-line paragraph that introduces a list, a table or a figure ("研究内容包括：") stays with
  it; a longer one may end a page (keeping it would pull its heading and leave a gap).
- A title that already carries the date ("日报 · 2026-11-30", "2026年11月30日周报") gets no second
  date in the byline.
"""

from __future__ import annotations

import re

from docx.text.paragraph import Paragraph

SHORT_LIST = 6
LEAD_IN_CHARS = 30  # about one line of Chinese body text at 12 pt on A4
_LEAD_IN_END = re.compile(r"[:：]\s*$")
_DATE = re.compile(r"(\d{4})\s*[-/.年]\s*(\d{1,2})\s*[-/.月]\s*(\d{1,2})\s*日?")


def list_keeps(count: int) -> set[int]:
    """Indexes of the items that keep with the next one."""
    if count <= SHORT_LIST:
        return set(range(count - 1))
    return {0, count - 2}


def keep_lead_in(document) -> None:
    """The last body paragraph, when it ends with a colon, keeps with what follows."""
    body = document.element.body
    last = body[-1] if len(body) else None
    if last is not None and last.tag.endswith("}sectPr"):
        last = last.getprevious()
    if last is None or not last.tag.endswith("}p"):
        return
    text = "".join(t.text or "" for t in last.iter() if t.tag.endswith("}t"))
    if _LEAD_IN_END.search(text) and len(text) <= LEAD_IN_CHARS:
        Paragraph(last, document._body).paragraph_format.keep_with_next = True


def _dates(text: str) -> set[tuple[int, int, int]]:
    return {(int(y), int(m), int(d)) for y, m, d in _DATE.findall(text)}


def same_date_in(date: str, title: str) -> bool:
    """`date` (any of 2026-11-30, 2026/11/30, 2026.11.30, 2026年11月30日) is already in `title`."""
    wanted = _dates(date)
    return bool(wanted) and wanted <= _dates(title)
