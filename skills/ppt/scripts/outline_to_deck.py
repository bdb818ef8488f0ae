#!/usr/bin/env python3
"""Outline (JSON or Markdown) -> an editable .pptx deck, then the geometry check.

    python outline_to_deck.py OUTLINE.json|OUTLINE.md OUT.pptx [--template T.pptx] [--size 16:9|4:3]
                              [--font "Calibri"] [--ea-font "Microsoft YaHei"] [--json]

Slides use the template's real layouts (Title Slide, Title and Content, Section Header, Two
Content, Title Only) with their placeholders, so the deck stays editable: text is text, tables
are tables, charts are native PowerPoint charts with their data inside, notes are speaker notes.
Text sizes are fitted to the boxes; what still does not fit is reported by the checker.

The outline format is described in ../references/outline_format.md.
Exit status: 0 deck written and clean; 3 deck written but the checker found layout errors (listed;
fix the outline and rerun); 2 nothing written (the outline is invalid: the message says where).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pptx import Presentation  # noqa: E402
from pptx.chart.data import CategoryChartData  # noqa: E402
from pptx.dml.color import RGBColor  # noqa: E402
from pptx.enum.chart import XL_CHART_TYPE, XL_LEGEND_POSITION  # noqa: E402
from pptx.enum.shapes import MSO_SHAPE  # noqa: E402
from pptx.enum.text import MSO_ANCHOR, PP_ALIGN  # noqa: E402
from pptx.oxml.ns import qn  # noqa: E402
from pptx.util import Emu, Inches, Pt  # noqa: E402

import check_deck  # noqa: E402
from deck_outline import OutlineError, norm_bullets, read_outline, slide_type, validate  # noqa: E402

CHART_TYPES = {
    "bar": XL_CHART_TYPE.BAR_CLUSTERED, "column": XL_CHART_TYPE.COLUMN_CLUSTERED,
    "stacked_bar": XL_CHART_TYPE.BAR_STACKED, "stacked_column": XL_CHART_TYPE.COLUMN_STACKED,
    "line": XL_CHART_TYPE.LINE_MARKERS, "pie": XL_CHART_TYPE.PIE, "doughnut": XL_CHART_TYPE.DOUGHNUT,
    "area": XL_CHART_TYPE.AREA,
}
TITLE_COLOR = RGBColor(0x1F, 0x38, 0x64)
TEXT_COLOR = RGBColor(0x26, 0x26, 0x26)
MUTED = RGBColor(0x6B, 0x6B, 0x6B)
ACCENT = RGBColor(0x2E, 0x75, 0xB6)


# ---- deck building ---------------------------------------------------------------------------

BULLET_KINDS = ("a:buNone", "a:buAutoNum", "a:buChar", "a:buBlip")


def set_bullet(ppr, tag: str, attrs: dict | None = None) -> None:
    """Replace the paragraph's bullet kind, keeping DrawingML's child order."""
    for kind in BULLET_KINDS:
        for old in ppr.findall(qn(kind)):
            ppr.remove(old)
    ppr.insert_element_before(ppr.makeelement(qn(tag), attrs or {}), "a:tabLst", "a:defRPr", "a:extLst")


class Deck:
    def __init__(self, template: Path | None, size: str, font: str, ea_font: str) -> None:
        self.font, self.ea_font = font, ea_font
        if template:
            self.prs = Presentation(str(template))
            ids = self.prs.slides._sldIdLst
            for sld in list(ids):
                self.prs.part.drop_rel(sld.rId)
                ids.remove(sld)
        else:
            self.prs = Presentation()
            if size == "16:9":
                self._widen(Inches(13.333))
        self.W, self.H = int(self.prs.slide_width), int(self.prs.slide_height)
        self.M = int(self.W * 0.045)
        self.title_top, self.title_h = int(self.H * 0.045), int(self.H * 0.13)
        self.rule_top = self.title_top + self.title_h + int(self.H * 0.008)
        self.body_top = int(self.H * 0.205)
        self.body_bottom = int(self.H * 0.915)
        self.body_h = self.body_bottom - self.body_top
        self.body_w = self.W - 2 * self.M
        self.layouts = {layout.name: layout for layout in self.prs.slide_layouts}

    def _widen(self, width: int) -> None:
        """Default template is 4:3; scale its layouts and master horizontally to the new width."""
        sx = width / self.prs.slide_width
        self.prs.slide_width = width
        for layout in self.prs.slide_layouts:
            for shape in layout.placeholders:
                if shape._element.spPr.find(qn("a:xfrm")) is not None:
                    shape.left, shape.width = int(shape.left * sx), int(shape.width * sx)
        for shape in self.prs.slide_master.shapes:
            shape.left, shape.width = int(shape.left * sx), int(shape.width * sx)

    def layout(self, *names: str):
        for name in names:
            if name in self.layouts:
                return self.layouts[name]
        return self.prs.slide_layouts[min(6, len(self.prs.slide_layouts) - 1)]

    # -- text helpers --
    def style_run(self, run, size: float, bold: bool = False, color: RGBColor | None = None) -> None:
        run.font.size = Pt(size)
        run.font.bold = bold
        run.font.name = self.font
        rpr = run._r.get_or_add_rPr()
        ea = rpr.find(qn("a:ea"))
        if ea is None:
            ea = rpr.makeelement(qn("a:ea"), {})
            latin = rpr.find(qn("a:latin"))
            rpr.insert_element_before(ea, "a:cs", "a:sym", "a:hlinkClick", "a:hlinkMouseOver", "a:rtl", "a:extLst")
        ea.set("typeface", self.ea_font)
        if color is not None:
            run.font.color.rgb = color

    def set_text(self, shape, paragraphs: list[tuple[str, int]], size: float, *, bold: bool = False,
                 color: RGBColor | None = TEXT_COLOR, align=None, bullets: bool | str = True) -> None:
        """bullets: True = the placeholder's own bullets, "manual" = bullet characters on a text box,
        False = plain paragraphs."""
        tf = shape.text_frame
        tf.word_wrap = True
        for idx, (text, level) in enumerate(paragraphs):
            p = tf.paragraphs[0] if idx == 0 else tf.add_paragraph()
            p.text = ""
            p.level = level if bullets else 0
            if align is not None:
                p.alignment = align
            if bullets == "manual":
                ppr = p._p.get_or_add_pPr()
                ppr.set("marL", str(int(285750 + 342900 * level)))
                ppr.set("indent", "-285750")
                set_bullet(ppr, "a:buChar", {"char": "•" if level == 0 else "–"})
                p.space_after = Pt(self.level_size(size, level) * 0.4)
            elif not bullets:
                ppr = p._p.get_or_add_pPr()
                ppr.set("marL", "0")
                ppr.set("indent", "0")
                set_bullet(ppr, "a:buNone")
            run = p.add_run()
            run.text = text
            self.style_run(run, self.level_size(size, level), bold=bold, color=color)

    @staticmethod
    def level_size(size: float, level: int) -> float:
        return max(10.0, size - 2 * level)

    def fit(self, paragraphs: list[tuple[str, int]], width: int, height: int, sizes, placeholder: bool) -> float:
        for size in sizes:
            paras = []
            for text, level in paragraphs:
                s = self.level_size(size, level)
                margin = int((0.375 + 0.42 * level) * 914400) if placeholder else 0
                paras.append((text, s, margin, s * 0.2 if placeholder else 0.0))
            need = check_deck.text_height(paras, width - 2 * check_deck.INSET_LR) + 2 * check_deck.INSET_TB
            if need <= height * 0.97:
                return size
        return sizes[-1]

    def place(self, shape, x: int, y: int, w: int, h: int) -> None:
        shape.left, shape.top, shape.width, shape.height = Emu(x), Emu(y), Emu(w), Emu(h)

    def drop_empty_placeholders(self, slide, keep: set[int]) -> None:
        for ph in list(slide.placeholders):
            if ph.placeholder_format.idx not in keep:
                ph._element.getparent().remove(ph._element)

    def add_title(self, slide, title: str) -> None:
        ph = slide.shapes.title
        if ph is None:
            ph = slide.shapes.add_textbox(0, 0, 1, 1)
        self.place(ph, self.M, self.title_top, self.body_w, self.title_h)
        size = self.fit([(title, 0)], self.body_w, self.title_h, (30, 28, 26, 24, 22, 20), False)
        self.set_text(ph, [(title, 0)], size, bold=True, color=TITLE_COLOR, align=PP_ALIGN.LEFT, bullets=False)
        ph.text_frame.vertical_anchor = MSO_ANCHOR.MIDDLE
        rule = slide.shapes.add_shape(MSO_SHAPE.RECTANGLE, self.M, self.rule_top, int(self.W * 0.08), int(self.H * 0.006))
        rule.fill.solid()
        rule.fill.fore_color.rgb = ACCENT
        rule.line.fill.background()
        rule.name = "Title Rule"

    def add_number(self, slide, n: int) -> None:
        box = slide.shapes.add_textbox(self.W - self.M - Inches(1), int(self.H * 0.93), Inches(1), int(self.H * 0.05))
        box.name = "Slide Number"
        self.set_text(box, [(str(n), 0)], 11, color=MUTED, align=PP_ALIGN.RIGHT, bullets=False)

    def notes(self, slide, text: str | None) -> None:
        if text:
            slide.notes_slide.notes_text_frame.text = str(text)

    # -- slide kinds --
    def title_slide(self, s: dict) -> object:
        slide = self.prs.slides.add_slide(self.layout("Title Slide"))
        title = slide.shapes.title
        ty, th = int(self.H * 0.28), int(self.H * 0.22)
        self.place(title, self.M, ty, self.body_w, th)
        size = self.fit([(s["title"], 0)], self.body_w, th, (40, 36, 32, 28, 24), False)
        self.set_text(title, [(s["title"], 0)], size, bold=True, color=TITLE_COLOR, align=PP_ALIGN.CENTER, bullets=False)
        title.text_frame.vertical_anchor = MSO_ANCHOR.BOTTOM
        sub_lines = [x for x in [s.get("subtitle"), s.get("author"), s.get("date")] if x]
        keep = {0}
        if sub_lines:
            sub = next((p for p in slide.placeholders if p.placeholder_format.idx == 1), None) or slide.shapes.add_textbox(0, 0, 1, 1)
            keep.add(sub.placeholder_format.idx if sub.is_placeholder else -1)
            sy, sh = ty + th + int(self.H * 0.04), int(self.H * 0.2)
            self.place(sub, self.M, sy, self.body_w, sh)
            paras = [(line, 0) for chunk in sub_lines for line in str(chunk).split("\n")]
            size = self.fit(paras, self.body_w, sh, (20, 18, 16, 14), False)
            self.set_text(sub, paras, size, color=MUTED, align=PP_ALIGN.CENTER, bullets=False)
            sub.text_frame.vertical_anchor = MSO_ANCHOR.TOP
        self.drop_empty_placeholders(slide, keep)
        return slide

    def section_slide(self, s: dict) -> object:
        slide = self.prs.slides.add_slide(self.layout("Section Header", "Title Only"))
        title = slide.shapes.title
        ty, th = int(self.H * 0.36), int(self.H * 0.16)
        self.place(title, self.M, ty, self.body_w, th)
        size = self.fit([(s["title"], 0)], self.body_w, th, (36, 32, 28, 24), False)
        self.set_text(title, [(s["title"], 0)], size, bold=True, color=TITLE_COLOR, align=PP_ALIGN.LEFT, bullets=False)
        title.text_frame.vertical_anchor = MSO_ANCHOR.BOTTOM
        keep = {0}
        if s.get("subtitle"):
            body = next((p for p in slide.placeholders if p.placeholder_format.idx == 1), None)
            if body is not None:
                keep.add(1)
                self.place(body, self.M, ty + th + int(self.H * 0.03), self.body_w, int(self.H * 0.12))
                self.set_text(body, [(s["subtitle"], 0)], 18, color=MUTED, align=PP_ALIGN.LEFT, bullets=False)
        self.drop_empty_placeholders(slide, keep)
        bar = slide.shapes.add_shape(MSO_SHAPE.RECTANGLE, self.M, ty - int(self.H * 0.03), int(self.W * 0.08), int(self.H * 0.008))
        bar.fill.solid()
        bar.fill.fore_color.rgb = ACCENT
        bar.line.fill.background()
        bar.name = "Section Rule"
        return slide

    def bullets_slide(self, s: dict) -> object:
        slide = self.prs.slides.add_slide(self.layout("Title and Content"))
        self.add_title(slide, s["title"])
        body = next((p for p in slide.placeholders if p.placeholder_format.idx == 1), None)
        paras = norm_bullets(s.get("bullets"), "")
        if body is None or not paras:
            self.drop_empty_placeholders(slide, {0})
            return slide
        self.place(body, self.M, self.body_top, self.body_w, self.body_h)
        size = self.fit(paras, self.body_w, self.body_h, (24, 22, 20, 18, 16, 14), True)
        self.set_text(body, paras, size)
        self.drop_empty_placeholders(slide, {0, 1})
        return slide

    def two_column_slide(self, s: dict) -> object:
        slide = self.prs.slides.add_slide(self.layout("Two Content", "Title and Content"))
        self.add_title(slide, s["title"])
        gap = int(self.W * 0.03)
        col_w = (self.body_w - gap) // 2
        cols = []
        for key in ("left", "right"):
            paras = norm_bullets(s.get(key), "")
            head = s.get(f"{key}_title")
            cols.append((head, paras))
        sizes = []
        for head, paras in cols:
            all_paras = ([(head, 0)] if head else []) + paras
            sizes.append(self.fit(all_paras or [("", 0)], col_w, self.body_h, (22, 20, 18, 16, 14), True))
        size = min(sizes)
        bodies = sorted((p for p in slide.placeholders if p.placeholder_format.idx != 0), key=lambda p: p.left)
        keep = {0}
        for ci, (head, paras) in enumerate(cols):
            box = bodies[ci] if ci < len(bodies) else slide.shapes.add_textbox(0, 0, 1, 1)
            if box.is_placeholder:
                keep.add(box.placeholder_format.idx)
            self.place(box, self.M + ci * (col_w + gap), self.body_top, col_w, self.body_h)
            all_paras = ([(head, 0)] if head else []) + paras
            self.set_text(box, all_paras or [("", 0)], size)
            if head:
                first = box.text_frame.paragraphs[0]
                first.runs[0].font.color.rgb = ACCENT
                first.runs[0].font.bold = True
                ppr = first._p.get_or_add_pPr()
                ppr.set("marL", "0")
                ppr.set("indent", "0")
                set_bullet(ppr, "a:buNone")
        self.drop_empty_placeholders(slide, keep)
        return slide

    def table_slide(self, s: dict) -> object:
        slide = self.prs.slides.add_slide(self.layout("Title Only", "Title and Content"))
        self.add_title(slide, s["title"])
        self.drop_empty_placeholders(slide, {0})
        t = s["table"]
        cols, rows = [str(c) for c in t["columns"]], [[("" if v is None else str(v)) for v in r] for r in t["rows"]]
        width = self.body_w if len(cols) > 2 else int(self.body_w * 0.7)
        x = self.M
        col_w = width // len(cols)
        size = 16
        for size in (18, 16, 14, 13, 12, 11, 10):
            h = 0
            for row in [cols, *rows]:
                need = max(check_deck.text_height([(c, size, 0, 0.0)], col_w - 2 * check_deck.INSET_LR) for c in row)
                h += need + 2 * check_deck.INSET_TB
            if h <= self.body_h * 0.97:
                break
        row_h = int((size * 1.2 * 12700) + 2 * check_deck.INSET_TB)
        frame = slide.shapes.add_table(len(rows) + 1, len(cols), x, self.body_top, width, row_h * (len(rows) + 1))
        frame.name = "Table"
        table = frame.table
        for ci in range(len(cols)):
            table.columns[ci].width = col_w
        for r, row in enumerate([cols, *rows]):
            table.rows[r].height = row_h
            for ci, value in enumerate(row):
                cell = table.cell(r, ci)
                cell.text = ""
                p = cell.text_frame.paragraphs[0]
                run = p.add_run()
                run.text = value
                numeric = bool(re.match(r"^[\s+\-−$¥€£]*[\d.,]+\s*(%|pt|x|k|m|bn)?\s*$", value, re.I))
                p.alignment = PP_ALIGN.CENTER if r == 0 else (PP_ALIGN.RIGHT if numeric else PP_ALIGN.LEFT)
                self.style_run(run, size, bold=(r == 0), color=None if r == 0 else TEXT_COLOR)
        if s.get("caption"):
            self._caption(slide, s["caption"], self.body_top + row_h * (len(rows) + 1) + int(self.H * 0.015))
        return slide

    def chart_slide(self, s: dict) -> object:
        slide = self.prs.slides.add_slide(self.layout("Title Only", "Title and Content"))
        self.add_title(slide, s["title"])
        self.drop_empty_placeholders(slide, {0})
        c = s["chart"]
        ctype = c.get("type", c.get("kind", "column"))
        data = CategoryChartData()
        data.categories = [str(x) for x in c["categories"]]
        for ser in c["series"]:
            data.add_series(str(ser.get("name", "")), ser["values"], number_format=c.get("number_format"))
        x, w = self.M, self.body_w
        side = norm_bullets(s.get("bullets"), "")
        if side:
            text_w = int(self.body_w * 0.36)
            gap = int(self.W * 0.03)
            box = slide.shapes.add_textbox(self.M, self.body_top, text_w, self.body_h)
            box.name = "Chart Notes"
            size = self.fit(side, text_w, self.body_h, (20, 18, 16, 14), True)
            self.set_text(box, side, size, bullets="manual")
            x, w = self.M + text_w + gap, self.body_w - text_w - gap
        cap_h = int(self.H * 0.06) if s.get("caption") else 0
        frame = slide.shapes.add_chart(CHART_TYPES[ctype], x, self.body_top, w, self.body_h - cap_h, data)
        frame.name = "Chart"
        chart = frame.chart
        chart.font.size = Pt(14)
        chart.font.name = self.font
        multi = len(c["series"]) > 1 or ctype in ("pie", "doughnut")
        chart.has_legend = bool(c.get("legend", multi))
        if chart.has_legend:
            chart.legend.position = XL_LEGEND_POSITION.BOTTOM
            chart.legend.include_in_layout = False
        if c.get("data_labels", ctype in ("pie", "doughnut")):
            plot = chart.plots[0]
            plot.has_data_labels = True
            labels = plot.data_labels
            labels.font.size = Pt(12)
            if ctype in ("pie", "doughnut"):
                labels.show_percentage = not c.get("number_format")
                labels.show_value = bool(c.get("number_format"))
            if c.get("number_format"):
                labels.number_format = c["number_format"]
                labels.number_format_is_linked = False
        if c.get("title"):
            chart.has_title = True
            chart.chart_title.text_frame.text = str(c["title"])
        else:
            chart.has_title = False
        if ctype not in ("pie", "doughnut"):
            for axis_key, attr in (("x_title", "category_axis"), ("y_title", "value_axis")):
                if c.get(axis_key):
                    axis = getattr(chart, attr)
                    axis.has_title = True
                    axis.axis_title.text_frame.text = str(c[axis_key])
        if cap_h:
            self._caption(slide, s["caption"], self.body_bottom - cap_h)
        return slide

    def image_slide(self, s: dict, base: Path) -> object:
        has_title = bool(str(s.get("title", "")).strip())
        slide = self.prs.slides.add_slide(self.layout("Title Only" if has_title else "Blank", "Title Only"))
        if has_title:
            self.add_title(slide, s["title"])
        self.drop_empty_placeholders(slide, {0} if has_title else set())
        top = self.body_top if has_title else self.M
        cap_h = int(self.H * 0.07) if s.get("caption") else 0
        box_w, box_h = self.body_w, self.body_bottom - top - cap_h
        pic = slide.shapes.add_picture(str(base / s["image"]), self.M, top)
        ratio = min(box_w / pic.width, box_h / pic.height)
        pic.width, pic.height = int(pic.width * ratio), int(pic.height * ratio)
        pic.left = self.M + (box_w - pic.width) // 2
        pic.top = top + (box_h - pic.height) // 2
        pic.name = "Picture"
        if cap_h:
            self._caption(slide, s["caption"], top + box_h + int(self.H * 0.01))
        return slide

    def _caption(self, slide, text: str, y: int) -> None:
        h = int(self.H * 0.055)
        box = slide.shapes.add_textbox(self.M, y, self.body_w, h)
        box.name = "Caption"
        self.set_text(box, [(str(text), 0)], 14, color=MUTED, align=PP_ALIGN.CENTER, bullets=False)

    def save(self, out: Path) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=str(out.parent))
        os.close(fd)
        try:
            self.prs.save(tmp)
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600; the deck gets normal permissions
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def build(outline: dict, out: Path, base: Path, template: Path | None = None, size: str = "16:9",
          font: str = "Calibri", ea_font: str = "Microsoft YaHei") -> int:
    deck = Deck(template, outline.get("size", size), outline.get("font", font), outline.get("ea_font", ea_font))
    for n, s in enumerate(outline["slides"], start=1):
        kind = slide_type(s)
        if kind == "title":
            slide = deck.title_slide(s)
        elif kind == "section":
            slide = deck.section_slide(s)
        elif kind == "two_column":
            slide = deck.two_column_slide(s)
        elif kind == "table":
            slide = deck.table_slide(s)
        elif kind == "chart":
            slide = deck.chart_slide(s)
        elif kind == "image":
            slide = deck.image_slide(s, base)
        else:
            slide = deck.bullets_slide(s)
        if kind not in ("title", "section"):
            deck.add_number(slide, n)
        deck.notes(slide, s.get("notes"))
    deck.save(out)
    return len(outline["slides"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outline")
    ap.add_argument("out")
    ap.add_argument("--template")
    ap.add_argument("--size", choices=("16:9", "4:3"), default="16:9")
    ap.add_argument("--font", default="Calibri")
    ap.add_argument("--ea-font", default="Microsoft YaHei")
    ap.add_argument("--json", action="store_true", help="print the check report as JSON")
    args = ap.parse_args(argv)
    src, out = Path(args.outline), Path(args.out)
    if out.suffix.lower() != ".pptx":
        print("ERROR: the output file must end in .pptx", file=sys.stderr)
        return 2
    try:
        outline = read_outline(src)
    except (OSError, OutlineError) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    base = src.resolve().parent
    problems = validate(outline, base)
    if problems:
        print("ERROR: the outline has problems, nothing was written:\n" + "\n".join(f"- {p}" for p in problems), file=sys.stderr)
        return 2
    template = Path(args.template) if args.template else None
    if template and not template.is_file():
        print(f"ERROR: template not found: {template}", file=sys.stderr)
        return 2
    count = build(outline, out, base, template, args.size, args.font, args.ea_font)
    report = check_deck.check(out)
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=1))
    else:
        print(f"wrote {out} ({count} slides)")
        print(check_deck.format_report(report))
    if report["errors"]:
        print(f"The deck was written but has {len(report['errors'])} layout errors: change the outline "
              "(shorter text, split the slide, fewer rows) and run this again.")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
