#!/usr/bin/env python3
"""Geometry checker for .pptx decks (python-pptx + stdlib).

    python check_deck.py deck.pptx [--json]

Finds what breaks a slide without anyone having to look at it:
- overflow   text that needs more height than its box (estimated from font size, box width and
             wrapping, CJK counted as full-width) -> error
- off-slide  a shape reaching past the slide edge -> error
- overlap    two content shapes covering each other (text measured by the height it really uses,
             so a tall but half-empty box does not count) -> error
- grid drift titles/content starting a little off the position most slides use -> warning
- small font text under 10 pt; empty placeholders; degenerate charts -> warning
Exit status: 0 no errors, 1 errors found, 2 the file could not be read.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from pptx import Presentation
from pptx.enum.shapes import MSO_SHAPE_TYPE, PP_PLACEHOLDER

EMU_PER_PT = 12700
EMU_PER_IN = 914400
DEFAULT_SIZE_PT = 18.0
LINE_FACTOR = 1.2
# Default text-frame insets (python-pptx / PowerPoint): 0.1 in left/right, 0.05 in top/bottom.
INSET_LR = 91440
INSET_TB = 45720
TOL = int(0.02 * EMU_PER_IN)  # 0.02 in


@dataclass
class Issue:
    slide: int
    kind: str
    severity: str  # error | warning
    shape: str
    message: str


# ---- text measurement ------------------------------------------------------------------------

def char_em(ch: str) -> float:
    """Approximate advance width of a character in ems (deliberately a little generous)."""
    if ch == " ":
        return 0.28
    if unicodedata.east_asian_width(ch) in ("W", "F"):
        return 1.0
    if ch.isupper() or ch in "mwMW@%&":
        return 0.64
    if ch.isdigit():
        return 0.55
    if ch.isalpha():
        return 0.52
    return 0.36


def _tokens(text: str) -> list[str]:
    """Break opportunities: every wide character alone, Latin words with their trailing spaces."""
    tokens: list[str] = []
    word = ""
    for ch in text:
        if unicodedata.east_asian_width(ch) in ("W", "F"):
            if word:
                tokens.append(word)
                word = ""
            tokens.append(ch)
        elif ch == " ":
            word += ch
            tokens.append(word)
            word = ""
        else:
            word += ch
    if word:
        tokens.append(word)
    return tokens


def wrapped_lines(text: str, width_emu: int, size_pt: float) -> int:
    """Lines `text` needs in a column `width_emu` wide at `size_pt` (greedy wrapping)."""
    if width_emu <= 0:
        return max(1, len(text))
    em = size_pt * EMU_PER_PT
    lines = 0
    for hard_line in text.split("\n") or [""]:
        lines += 1
        used = 0.0
        for tok in _tokens(hard_line):
            w = sum(char_em(c) for c in tok) * em
            w_visible = sum(char_em(c) for c in tok.rstrip()) * em
            if used and used + w_visible > width_emu:
                lines += 1
                used = 0.0
            if w_visible > width_emu:  # a single token longer than the line: breaks inside
                extra = int(w_visible // width_emu)
                lines += extra
                used = w_visible - extra * width_emu
                continue
            used += w
    return lines


def text_height(paragraphs: list[tuple[str, float, int, float]], width_emu: int) -> int:
    """Height in EMU of paragraphs given as (text, size_pt, left_margin_emu, space_before_pt)."""
    total = 0.0
    for i, (text, size, margin, before) in enumerate(paragraphs):
        lines = wrapped_lines(text, width_emu - margin, size)
        total += lines * size * LINE_FACTOR * EMU_PER_PT
        if i:
            total += before * EMU_PER_PT
    return int(total)


# ---- reading the deck ------------------------------------------------------------------------

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


def _is_title(shape) -> bool:
    if not shape.is_placeholder:
        return False
    try:
        return shape.placeholder_format.type in (PP_PLACEHOLDER.TITLE, PP_PLACEHOLDER.CENTER_TITLE, PP_PLACEHOLDER.VERTICAL_TITLE)
    except Exception:  # noqa: BLE001
        return False


def _font_scale(text_frame) -> float:
    body = text_frame._txBody.find("{http://schemas.openxmlformats.org/drawingml/2006/main}bodyPr")
    if body is None:
        return 1.0
    auto = body.find("{http://schemas.openxmlformats.org/drawingml/2006/main}normAutofit")
    if auto is not None and auto.get("fontScale"):
        return int(auto.get("fontScale")) / 100000.0
    return 1.0


def _insets(text_frame) -> tuple[int, int, int, int]:
    def val(v, default):
        return int(v) if v is not None else default
    return (val(text_frame.margin_left, INSET_LR), val(text_frame.margin_right, INSET_LR),
            val(text_frame.margin_top, INSET_TB), val(text_frame.margin_bottom, INSET_TB))


def paragraphs_of(shape, master: dict[str, list[float]]) -> list[tuple[str, float, int, float]]:
    """(text, size_pt, left margin, space before) of each paragraph, sizes resolved as well as we can."""
    tf = shape.text_frame
    title = _is_title(shape)
    scale = _font_scale(tf)
    out = []
    for p in tf.paragraphs:
        text = "".join(r.text for r in p.runs) if p.runs else p.text
        level = p.level or 0
        sizes = [r.font.size.pt for r in p.runs if r.font.size is not None]
        if sizes:
            size = max(sizes)
        elif p.font.size is not None:
            size = p.font.size.pt
        elif shape.is_placeholder:
            table = master["title"] if title else master["body"]
            size = table[min(level, len(table) - 1)]
        else:
            size = DEFAULT_SIZE_PT
        size *= scale
        margin = 0
        if shape.is_placeholder and not title:
            margin = int((0.375 + 0.42 * level) * EMU_PER_IN)
        before = 0.0 if title else size * 0.2 if shape.is_placeholder else 0.0
        if p.space_before is not None:
            before = p.space_before.pt
        out.append((text, size, margin, before))
    return out


def _wrap_mode(text_frame) -> tuple[bool, bool]:
    """(wraps, grows): `wrap="none"` text never wraps; `spAutoFit` boxes grow with their text."""
    body = text_frame._txBody.find("{http://schemas.openxmlformats.org/drawingml/2006/main}bodyPr")
    if body is None:
        return True, False
    grows = body.find("{http://schemas.openxmlformats.org/drawingml/2006/main}spAutoFit") is not None
    return body.get("wrap") != "none", grows


def _anchor(shape) -> str:
    body = shape.text_frame._txBody.find("{http://schemas.openxmlformats.org/drawingml/2006/main}bodyPr")
    anchor = body.get("anchor") if body is not None else None
    if anchor:
        return anchor
    return "ctr" if _is_title(shape) else "t"


def _rect(shape) -> tuple[int, int, int, int] | None:
    try:
        if shape.left is None or shape.top is None or shape.width is None or shape.height is None:
            return None
        return int(shape.left), int(shape.top), int(shape.width), int(shape.height)
    except Exception:  # noqa: BLE001
        return None


def _overlap(a, b) -> int:
    x = max(0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
    y = max(0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))
    return x * y


def _walk(shapes):
    for shape in shapes:
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _walk(shape.shapes)
        else:
            yield shape


def _fmt_in(emu: int) -> str:
    return f"{emu / EMU_PER_IN:.2f} in"


def table_height(table, master) -> int:
    total = 0
    for row in table.rows:
        row_h = int(row.height or 0)
        for ci, cell in enumerate(row.cells):
            width = int(table.columns[ci].width) if ci < len(table.columns) else 0
            tf = cell.text_frame
            paras = []
            for p in tf.paragraphs:
                sizes = [r.font.size.pt for r in p.runs if r.font.size is not None]
                paras.append(("".join(r.text for r in p.runs), max(sizes) if sizes else DEFAULT_SIZE_PT, 0, 0.0))
            need = text_height(paras, width - 2 * INSET_LR) + 2 * INSET_TB
            row_h = max(row_h, need)
        total += row_h
    return total


def check(path: str | Path) -> dict:
    prs = Presentation(str(path))
    sw, sh = int(prs.slide_width), int(prs.slide_height)
    master = _master_sizes(prs)
    issues: list[Issue] = []
    titles: list[tuple[int, int, int, str]] = []  # slide, left, top, layout
    content_lefts: list[tuple[int, int, str]] = []
    slide_area = sw * sh
    for si, slide in enumerate(prs.slides, start=1):
        boxes: list[tuple[str, tuple[int, int, int, int], str]] = []  # name, used rect, kind
        layout = slide.slide_layout.name
        main_content: tuple[int, int] | None = None
        for shape in _walk(slide.shapes):
            rect = _rect(shape)
            if rect is None:
                continue
            name = shape.name
            x, y, w, h = rect
            if x < -TOL or y < -TOL or x + w > sw + TOL or y + h > sh + TOL:
                issues.append(Issue(si, "off-slide", "error", name,
                                    f"'{name}' reaches past the slide edge (box {_fmt_in(x)},{_fmt_in(y)} size "
                                    f"{_fmt_in(w)}x{_fmt_in(h)} on a {_fmt_in(sw)}x{_fmt_in(sh)} slide)"))
            kind = "shape"
            used = rect
            if shape.has_text_frame:
                paras = paragraphs_of(shape, master)
                has_text = any(t.strip() for t, *_ in paras)
                if not has_text:
                    if shape.is_placeholder:
                        issues.append(Issue(si, "empty-placeholder", "warning", name,
                                            f"'{name}' is an empty placeholder (shows a prompt text in edit view); fill it or delete it"))
                    continue
                left_in, right_in, top_in, bottom_in = _insets(shape.text_frame)
                wrap, grows = _wrap_mode(shape.text_frame)
                if not wrap:  # one line per paragraph, as wide as its text
                    need_w = max(sum(char_em(c) for c in t) * sz * EMU_PER_PT for t, sz, *_ in paras) + left_in + right_in
                    if x + need_w > sw + TOL:
                        issues.append(Issue(si, "overflow", "error", name,
                                            f"text in '{name}' does not wrap and runs about {_fmt_in(int(x + need_w - sw))} past the "
                                            "right edge of the slide: shorten it or let it wrap in a narrower box"))
                    wide = 10 ** 12
                    need = text_height(paras, wide) + top_in + bottom_in
                else:
                    need = text_height(paras, w - left_in - right_in) + top_in + bottom_in
                if grows:  # the box grows with its text: only the slide bottom limits it
                    if y + need > sh + TOL:
                        issues.append(Issue(si, "overflow", "error", name,
                                            f"text in '{name}' grows to about {_fmt_in(need)} and runs off the slide bottom"))
                    h = max(h, need)
                elif need > h * 1.05 + 0.03 * EMU_PER_IN:
                    issues.append(Issue(si, "overflow", "error", name,
                                        f"text in '{name}' needs about {_fmt_in(need)} of height but the box is {_fmt_in(h)}: "
                                        "shorten or split the text, or make the box larger"))
                for text, size, *_ in paras:
                    if text.strip() and size < 10:
                        issues.append(Issue(si, "small-font", "warning", name, f"'{name}' uses {size:.0f} pt text, hard to read"))
                        break
                used_h = min(h, need)
                anchor = _anchor(shape)
                top = y if anchor == "t" else y + h - used_h if anchor == "b" else y + (h - used_h) // 2
                used = (x, top, w, used_h)
                kind = "text"
                if _is_title(shape):
                    titles.append((si, x, y, layout))
                    kind = "title"
            elif getattr(shape, "has_table", False) and shape.has_table:
                need = table_height(shape.table, master)
                used = (x, y, w, max(h, need))
                if y + need > sh + TOL:
                    issues.append(Issue(si, "overflow", "error", name,
                                        f"table '{name}' grows to about {_fmt_in(need)} tall and runs off the slide bottom: "
                                        "fewer rows, shorter cells or a smaller font"))
                kind = "table"
            elif getattr(shape, "has_chart", False) and shape.has_chart:
                kind = "chart"
                try:
                    plot = shape.chart.plots[0]
                    cats = list(plot.categories)
                    values = [v for s in plot.series for v in s.values if v is not None]
                    if not values or (len(cats) < 2 and len(list(plot.series)) < 2):
                        issues.append(Issue(si, "chart", "warning", name, f"chart '{name}' has too little data to be worth a chart"))
                except Exception:  # noqa: BLE001
                    pass
            elif shape.shape_type == MSO_SHAPE_TYPE.PICTURE:
                kind = "picture"
                if w * h >= 0.9 * slide_area:
                    continue  # a background picture, under everything on purpose
            else:
                continue  # lines, decorative autoshapes without text
            boxes.append((name, used, kind))
            if kind in ("text", "table", "chart", "picture") and (main_content is None or w * h > main_content[1]):
                main_content = (x, w * h)
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                (na, ra, ka), (nb, rb, kb) = boxes[i], boxes[j]
                inter = _overlap(ra, rb)
                smaller = min(ra[2] * ra[3], rb[2] * rb[3]) or 1
                if inter > 0.04 * smaller and inter > (0.1 * EMU_PER_IN) ** 2:
                    issues.append(Issue(si, "overlap", "error", f"{na} / {nb}",
                                        f"'{na}' ({ka}) and '{nb}' ({kb}) overlap by {100 * inter / smaller:.0f}% of the smaller one"))
        if main_content is not None:
            content_lefts.append((si, main_content[0], layout))
    issues.extend(_drift(titles, content_lefts))
    issues.sort(key=lambda i: (i.slide, i.severity != "error"))
    errors = [asdict(i) for i in issues if i.severity == "error"]
    warnings = [asdict(i) for i in issues if i.severity == "warning"]
    return {"file": str(path), "slides": len(prs.slides), "slide_size_in": [round(sw / EMU_PER_IN, 3), round(sh / EMU_PER_IN, 3)],
            "errors": errors, "warnings": warnings}


def _drift(titles, content_lefts) -> list[Issue]:
    """Positions a few hundredths to a few tenths of an inch off the usual one are misalignments."""
    issues: list[Issue] = []
    small = int(0.4 * EMU_PER_IN)
    if len(titles) >= 3:
        # Across all slides: big differences are different layouts on purpose, small ones are drift.
        mode_x = Counter(x for _, x, _, _ in titles).most_common(1)[0][0]
        mode_y = Counter(y for _, _, y, _ in titles).most_common(1)[0][0]
        for si, x, y, layout in titles:
            dx, dy = abs(x - mode_x), abs(y - mode_y)
            if dx >= small or dy >= small:
                continue
            if dx > TOL or dy > TOL:
                issues.append(Issue(si, "grid-drift", "warning", "title",
                                    f"title sits {_fmt_in(max(dx, dy))} off the position the other slides use"))
    lefts = [x for _, x, _ in content_lefts]
    if len(lefts) >= 3:
        mode = Counter(lefts).most_common(1)[0][0]
        for si, x, _ in content_lefts:
            if TOL < abs(x - mode) < small // 2:
                issues.append(Issue(si, "grid-drift", "warning", "content",
                                    f"main content starts {_fmt_in(abs(x - mode))} off the left edge most slides use"))
    return issues


def format_report(report: dict) -> str:
    lines = [f"{report['file']}: {report['slides']} slides, {len(report['errors'])} errors, {len(report['warnings'])} warnings"]
    for issue in report["errors"]:
        lines.append(f"  ERROR   slide {issue['slide']}: [{issue['kind']}] {issue['message']}")
    for issue in report["warnings"]:
        lines.append(f"  warning slide {issue['slide']}: [{issue['kind']}] {issue['message']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in args
    args = [a for a in args if a != "--json"]
    if len(args) != 1:
        print("usage: check_deck.py DECK.pptx [--json]", file=sys.stderr)
        return 2
    try:
        report = check(args[0])
    except Exception as exc:  # noqa: BLE001 - unreadable file: say so
        print(f"ERROR: cannot read {args[0]} as a .pptx deck: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, ensure_ascii=False, indent=1) if as_json else format_report(report))
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
