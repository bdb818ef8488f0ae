#!/usr/bin/env python3
"""Geometry checker for .pptx decks (python-pptx + stdlib).

    python check_deck.py deck.pptx [--json]

Finds what breaks a slide without anyone having to look at it:
- overflow      text or a table that needs more height than it has (measured as LibreOffice lays
                it out: deck_measure.py; table rows grow with CJK-aware line heights) -> error
- off-slide     a shape reaching past the slide edge (groups in slide coordinates) -> error
- overlap       two content shapes covering each other, measured by the height text and tables
                really use (a caption printed over a table's grown last row) -> error
- footer        content reaching into the footer band (slide number, footer) -> error
- low-contrast  text hardly distinguishable from what is behind it (white on white) -> error below
                2:1, warning below 3:1 (large text) / 4.5:1 (body text)
- readability   body text under 12 pt, more than 8 bullets, a very long text box, a title smaller
                than the body text -> warning
- chart         crowded category labels, too little data -> warning
- card-fill     a card or panel whose text covers under half its height (half empty) -> warning
- formula       numbers that contradict each other: a written equation that does not add up ->
                error; a rate, share, multiple, total row or chart growth label that its values
                do not give -> warning (deck_formulas.py)
- grid drift    titles/content starting a little off the position most slides use -> warning
- empty placeholders -> warning
Exit status: 0 no errors, 1 errors found, 2 the file could not be read. With --json stdout is one
JSON document on every path (also usage errors and unreadable files).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pptx import Presentation  # noqa: E402
from pptx.enum.shapes import MSO_SHAPE_TYPE, PP_PLACEHOLDER  # noqa: E402
from pptx.oxml.ns import qn  # noqa: E402

import deck_formulas as formulas  # noqa: E402
import deck_grid as grid  # noqa: E402
import deck_inherit as inh  # noqa: E402
import deck_measure as dm  # noqa: E402
import deck_rules as rules  # noqa: E402
import deck_space as space  # noqa: E402
from deck_measure import EMU_PER_IN, EMU_PER_PT, text_height, wrapped_lines  # noqa: E402,F401 - used by callers
from deck_read import (  # noqa: E402,F401
    DEFAULT_SIZE_PT,
    INSET_LR,
    INSET_TB,
    _anchor,
    _insets,
    _master_sizes,
    _wrap_mode,
    cell_lines,
    paragraphs_of,
    table_height,
)

TOL = int(0.02 * EMU_PER_IN)  # 0.02 in
FOOTER_BAND = 0.925            # below this share of the slide height sit slide number and footer
MIN_BODY_PT = 12
MAX_BULLETS = 8
LONG_TEXT_LATIN = 700          # characters in one text box: beyond, it is a document, not a slide
LONG_TEXT_CJK = 260


@dataclass
class Issue:
    slide: int
    kind: str
    severity: str  # error | warning
    shape: str
    message: str


def _overlap(a, b) -> int:
    x = max(0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
    y = max(0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))
    return x * y


def _fmt_in(emu: int) -> str:
    return f"{emu / EMU_PER_IN:.2f} in"


FOOTER_TYPES = (PP_PLACEHOLDER.SLIDE_NUMBER, PP_PLACEHOLDER.FOOTER, PP_PLACEHOLDER.DATE)


def _is_footer(shape) -> bool:
    return rules.ph_type(shape) in FOOTER_TYPES or shape.name.split(" ")[0] in ("Slide", "Footer", "Date") and \
        shape.name.startswith(("Slide Number", "Footer", "Date"))


class SlideCheck:
    """One slide's pass: every shape measured once, then the pairwise and slide-level rules."""

    def __init__(self, si: int, slide, ctx: dict) -> None:
        self.si, self.slide, self.ctx = si, slide, ctx
        self.issues: list[Issue] = []
        self.boxes: list[tuple[str, tuple[int, int, int, int], str]] = []
        self.cmap = inh.colour_map(slide)
        # filled shapes, in z-order: the master's and the layout's first (a cover panel, a band)
        self.fills: list[tuple[tuple[int, int, int, int], str | None]] = rules.backdrop(slide, ctx["theme"], self.cmap)
        self.main_content: tuple[int, int] | None = None
        self.panels: list[tuple[int, int, int, int]] = []
        self.title_sizes: list[float] = []
        self.body_sizes: list[float] = []

    def add(self, kind: str, severity: str, shape: str, message: str) -> None:
        self.issues.append(Issue(self.si, kind, severity, shape, message))

    def run(self) -> None:
        sw, sh = self.ctx["sw"], self.ctx["sh"]
        for shape, rect in rules.walk(self.slide.shapes):
            if rect is None:
                continue
            x, y, w, h = rect
            name = shape.name
            if x < -TOL or y < -TOL or x + w > sw + TOL or y + h > sh + TOL:
                self.add("off-slide", "error", name, f"'{name}' reaches past the slide edge (box {_fmt_in(x)},{_fmt_in(y)} "
                         f"size {_fmt_in(w)}x{_fmt_in(h)} on a {_fmt_in(sw)}x{_fmt_in(sh)} slide)")
            if shape.has_text_frame:
                kind, used = self.text(shape, rect)
            elif getattr(shape, "has_table", False) and shape.has_table:
                need = table_height(shape.table, self.ctx["master"], self.ctx["theme"])
                used, kind = (x, y, w, max(h, need)), "table"
                self.table_typography(shape)
                narrow = space.narrow_table(shape, self.ctx["content_w"], list(cell_lines(shape.table, self.ctx["theme"])))
                if narrow:
                    self.add(*narrow)
                if y + need > sh + TOL:
                    self.add("overflow", "error", name, f"table '{name}' grows to about {_fmt_in(need)} tall and runs off the "
                             "slide bottom: fewer rows, shorter cells or a smaller font")
            elif getattr(shape, "has_chart", False) and shape.has_chart:
                kind, used = "chart", rect
                self.chart(shape)
            elif shape.shape_type == MSO_SHAPE_TYPE.PICTURE:
                kind, used = "picture", rect
                self.fills.append((rect, None))  # text on a photo: its colour is not judged
                if w * h >= 0.9 * sw * sh:
                    continue  # a background picture, under everything on purpose
            else:
                kind, used = None, rect
            fill = rules.own_fill(shape, self.ctx["theme"], self.cmap) if shape.shape_type == MSO_SHAPE_TYPE.AUTO_SHAPE else None
            if fill:
                self.fills.append((rect, fill))
                self.panels.append(rect)
                if self.main_content is None or w * h > self.main_content[1]:
                    self.main_content = (x, w * h)  # a panel or card is where its content starts
            if kind is None:
                continue
            footer = _is_footer(shape)
            bottom = used[1] + used[3]
            if not footer and kind in ("text", "table", "chart", "picture") and sh * FOOTER_BAND + TOL < bottom <= sh + TOL \
                    and used[1] < sh * FOOTER_BAND:  # (running off the slide is already an overflow)
                self.add("footer", "error", name, f"'{name}' ({kind}) reaches {_fmt_in(used[1] + used[3] - int(sh * FOOTER_BAND))} "
                         "into the footer band (slide number / footer): move it up or make it smaller")
            if footer:
                continue
            self.boxes.append((name, used, kind))
            if kind in ("text", "table", "chart", "picture") and (self.main_content is None or w * h > self.main_content[1]):
                self.main_content = (x, w * h)
        self.pairs()
        if self.title_sizes and self.body_sizes and min(self.title_sizes) < max(self.body_sizes):
            self.add("readability", "warning", "title", f"the title ({min(self.title_sizes):.0f} pt) is smaller than the body "
                     f"text ({max(self.body_sizes):.0f} pt): shorten the title instead of shrinking it")
        if not grid.composed(self.slide):
            empty = space.empty_area(self.boxes, self.panels, sh, FOOTER_BAND)
            if empty:
                self.add(*empty)
        for finding in space.card_fill(self.boxes, self.panels, sh):
            self.add(*finding)
        for finding in formulas.slide_findings([shape for shape, _ in rules.walk(self.slide.shapes)]):
            self.add(*finding)

    def text(self, shape, rect):
        x, y, w, h = rect
        name, sh = shape.name, self.ctx["sh"]
        paras = paragraphs_of(shape, self.ctx["master"], self.ctx["theme"])
        if not any(t.strip() for t, *_ in paras):
            if shape.is_placeholder and not _is_footer(shape):
                self.add("empty-placeholder", "warning", name,
                         f"'{name}' is an empty placeholder (shows a prompt text in edit view); fill it or delete it")
            return None, rect
        left_in, right_in, top_in, bottom_in = _insets(shape.text_frame)
        wrap, grows = _wrap_mode(shape.text_frame)
        if not wrap:  # one line per paragraph, as wide as its text
            need_w = max(dm.text_em(t, fam) * sz * EMU_PER_PT for t, sz, _, _, fam, _ in paras) + left_in + right_in
            if x + need_w > self.ctx["sw"] + TOL:
                self.add("overflow", "error", name, f"text in '{name}' does not wrap and runs about "
                         f"{_fmt_in(int(x + need_w - self.ctx['sw']))} past the right edge of the slide: shorten it or let it wrap")
            need = text_height(paras, 10 ** 12) + top_in + bottom_in
        else:
            need = text_height(paras, w - left_in - right_in) + top_in + bottom_in
        if grows:  # the box grows with its text: only the slide bottom limits it
            if y + need > sh + TOL:
                self.add("overflow", "error", name, f"text in '{name}' grows to about {_fmt_in(need)} and runs off the slide bottom")
            h = max(h, need)
        elif need > h * 1.05 + 0.03 * EMU_PER_IN:
            self.add("overflow", "error", name, f"text in '{name}' needs about {_fmt_in(need)} of height but the box is "
                     f"{_fmt_in(h)}: shorten or split the text, or make the box larger")
        if wrap and not _vertical(shape.text_frame):
            self.typography(shape, paras, w - left_in - right_in)
        used_h = min(h, need)
        anchor = _anchor(shape)
        top = y if anchor == "t" else y + h - used_h if anchor == "b" else y + (h - used_h) // 2
        used = (x, top, w, used_h)
        if _is_footer(shape):
            return "text", used
        self.readability(shape, paras)
        self.contrast(shape, used, paras)
        if rules.is_title(shape):
            self.ctx["titles"].append((self.si, x, y, grid.layout_position(shape)))
            self.title_sizes.append(max(sz for t, sz, *_ in paras if t.strip()))
            return "title", used
        if rules.ph_type(shape) in rules.BODY_TYPES:
            self.body_sizes.append(max(sz for t, sz, *_ in paras if t.strip()))
        return "text", used

    def readability(self, shape, paras) -> None:
        name = shape.name
        small = [sz for t, sz, *_ in paras if t.strip() and sz < MIN_BODY_PT]
        if small:
            self.add("readability", "warning", name, f"'{name}' uses {min(small):.0f} pt text: under {MIN_BODY_PT} pt is hard "
                     "to read from the back of a room")
        items = [t for t, *_ in paras if t.strip()]
        if len(items) > MAX_BULLETS:
            self.add("readability", "warning", name, f"'{name}' has {len(items)} bullets (more than {MAX_BULLETS}): split the "
                     "slide or move detail to the notes")
        self.levels(shape, paras)
        text = "".join(items)
        cjk = sum(1 for c in text if dm.is_wide(c))
        if cjk > LONG_TEXT_CJK or len(text) - cjk > LONG_TEXT_LATIN:
            self.add("readability", "warning", name, f"'{name}' holds {len(text)} characters: a slide is not a page; keep the "
                     "point on the slide and move the rest to the notes")

    def typography(self, shape, paras, width: int) -> None:
        """CJK line breaking as it renders: a label set one character per line (a column too
        narrow for it) is an error; a lone character on a paragraph's last line a warning."""
        for text, size, margin, _, fam, *_ in paras:
            if text.strip() and self.line_breaks(shape.name, text, dm.wrap(text, width - margin, size, fam), f"'{shape.name}'"):
                return

    def table_typography(self, shape) -> None:
        for ri, ci, text, lines in cell_lines(shape.table, self.ctx["theme"]):
            if self.line_breaks(shape.name, text, lines, f"table '{shape.name}', row {ri + 1}, column {ci + 1}"):
                return

    def line_breaks(self, name: str, text: str, lines: list[str], where: str) -> bool:
        if dm.per_character(lines):
            self.add("per-char-wrap", "error", name, f"'{text[:20]}' ({where}) is set one character per line "
                     f"({len(lines)} lines): widen the column or box, or shorten the label")
            return True
        if dm.orphan(lines):
            self.add("orphan", "warning", name, f"'{text[:20]}…' ({where}) leaves '{dm.core(lines[-1])}' alone on its "
                     "last line: shorten or reword it")
            return True
        return False

    def levels(self, shape, paras) -> None:
        """A sub-level rendered larger than the level it belongs to (a template's untouched
        level-2 size under a shrunk level 1) inverts the list's hierarchy."""
        parents: dict[int, float] = {}
        for (text, size, *_), p in zip(paras, shape.text_frame.paragraphs):
            if not text.strip():
                continue
            level = p.level or 0
            parent = parents.get(level - 1)
            if parent is not None and size > parent + 0.5:
                self.add("level-inversion", "warning", shape.name, f"in '{shape.name}' a level-{level + 1} item is "
                         f"{size:.0f} pt under a {parent:.0f} pt level-{level} item: sub-points must not be larger")
                return
            parents = {k: v for k, v in parents.items() if k < level}
            parents[level] = size

    def contrast(self, shape, used, paras) -> None:
        theme = self.ctx["theme"]
        fg = rules.text_colour(shape, theme, self.cmap)
        bg = rules.own_fill(shape, theme, self.cmap)
        if bg is None:
            cx, cy = used[0] + used[2] // 2, used[1] + used[3] // 2
            under = [c for r, c in self.fills if r[0] <= cx <= r[0] + r[2] and r[1] <= cy <= r[1] + r[3]]
            bg = under[-1] if under else self.ctx["background"](self.slide, self.cmap)
        if bg is None:  # on a picture: the colour behind the text is unknown
            return
        ratio = rules.contrast(fg, bg)
        size = max(sz for t, sz, *_ in paras if t.strip())
        need = 3.0 if size >= 18 else 4.5
        if ratio < 2.0:
            self.add("low-contrast", "error", shape.name, f"text in '{shape.name}' (#{fg}) on #{bg} has a contrast of "
                     f"{ratio:.1f}:1: it is practically invisible")
        elif ratio < need:
            self.add("low-contrast", "warning", shape.name, f"text in '{shape.name}' (#{fg}) on #{bg} has a contrast of "
                     f"{ratio:.1f}:1 (needs {need:.1f}:1 at {size:.0f} pt)")

    def chart(self, shape) -> None:
        name = shape.name
        try:
            plot = shape.chart.plots[0]
            cats = list(plot.categories)
            values = [v for s in plot.series for v in s.values if v is not None]
            if not values or (len(cats) < 2 and len(list(plot.series)) < 2):
                self.add("chart", "warning", name, f"chart '{name}' has too little data to be worth a chart")
        except Exception:  # noqa: BLE001
            return
        why = rules.crowded_labels(shape)
        if why:
            self.add("chart", "warning", name, f"chart '{name}': {why}")

    def pairs(self) -> None:
        boxes = self.boxes
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                (na, ra, ka), (nb, rb, kb) = boxes[i], boxes[j]
                inter = _overlap(ra, rb)
                smaller = min(ra[2] * ra[3], rb[2] * rb[3]) or 1
                if inter > 0.04 * smaller and inter > (0.1 * EMU_PER_IN) ** 2:
                    grown = " as rendered (the table grows with its text)" if "table" in (ka, kb) else ""
                    self.add("overlap", "error", f"{na} / {nb}", f"'{na}' ({ka}) and '{nb}' ({kb}) overlap by "
                             f"{100 * inter / smaller:.0f}% of the smaller one{grown}")


def _vertical(text_frame) -> bool:
    body = text_frame._txBody.find(qn("a:bodyPr"))
    return body is not None and (body.get("vert") or "horz") != "horz"


def check(path: str | Path) -> dict:
    prs = Presentation(str(path))
    sw, sh = int(prs.slide_width), int(prs.slide_height)
    theme = rules.ThemeInfo(prs)
    lefts = [int(ph.left) for slide in prs.slides for ph in slide.slide_layout.placeholders
             if rules.ph_type(ph) in rules.TITLE_TYPES and ph.left is not None and 0 < int(ph.left) < sw // 4]
    margin = min(lefts) if lefts else int(sw * 0.045)
    ctx = {"sw": sw, "sh": sh, "master": _master_sizes(prs), "theme": theme, "titles": [], "content_w": sw - 2 * margin,
           "background": lambda slide, cmap=None: rules.background(slide, theme, cmap)}
    issues: list[Issue] = []
    content_lefts: list[tuple[int, int]] = []
    for si, slide in enumerate(prs.slides, start=1):
        one = SlideCheck(si, slide, ctx)
        one.run()
        issues += one.issues
        if one.main_content is not None and not grid.composed(slide):
            content_lefts.append((si, one.main_content[0]))
    issues.extend(Issue(*finding) for finding in grid.drift(ctx["titles"], content_lefts, grid.grid_lines(prs)))
    issues.sort(key=lambda i: (i.slide, i.severity != "error"))
    errors = [asdict(i) for i in issues if i.severity == "error"]
    warnings = [asdict(i) for i in issues if i.severity == "warning"]
    return {"file": str(path), "slides": len(prs.slides), "slide_size_in": [round(sw / EMU_PER_IN, 3), round(sh / EMU_PER_IN, 3)],
            "errors": errors, "warnings": warnings}


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

    def fail(message: str) -> int:
        if as_json:  # stdout stays one JSON document on every path
            print(json.dumps({"ok": False, "error": message, "errors": [], "warnings": []}, ensure_ascii=False))
        else:
            print(f"ERROR: {message}", file=sys.stderr)
        return 2

    if len(args) != 1:
        return fail("usage: check_deck.py DECK.pptx [--json]")
    try:
        report = check(args[0])
    except Exception as exc:  # noqa: BLE001 - unreadable file: say so
        return fail(f"cannot read {args[0]} as a .pptx deck: {exc}")
    report["ok"] = not report["errors"]
    print(json.dumps(report, ensure_ascii=False, indent=1) if as_json else format_report(report))
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
