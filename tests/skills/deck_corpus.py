"""The checker's fixture corpus: decks with one known defect each (made with python-pptx the way
a careless script or a hand edit makes them), and the clean fixture outlines.

`DEFECTS` maps a defect name to (builder, expected (slide, kind, severity)). Every defect deck is
otherwise clean, so a test can demand exactly the expected findings and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lxml import etree
from pptx import Presentation
from pptx.chart.data import CategoryChartData
from pptx.dml.color import RGBColor
from pptx.enum.chart import XL_CHART_TYPE
from pptx.enum.shapes import MSO_SHAPE
from pptx.oxml.ns import qn
from pptx.util import Inches, Pt
from skillkit import FIXTURES

CLEAN_OUTLINES = sorted(p for p in (FIXTURES / "decks").glob("*.json") if p.stem != "adversarial")
CJK_CELL = "采用原子层沉积在正极颗粒表面包覆厚度约五纳米的铌酸锂层以抑制界面副反应"


def _deck():
    prs = Presentation()
    prs.slide_width = Inches(13.333)
    return prs


def _blank(prs):
    return prs.slides.add_slide(prs.slide_layouts[6])


def _box(slide, x, y, w, h, text: str, size: float = 18, colour: str | None = None, name: str | None = None):
    box = slide.shapes.add_textbox(Inches(x), Inches(y), Inches(w), Inches(h))
    tf = box.text_frame
    tf.word_wrap = True
    body = tf._txBody.find(qn("a:bodyPr"))
    for child in list(body):
        body.remove(child)  # a fixed box: no auto-grow
    for i, line in enumerate(text.split("\n")):
        p = tf.paragraphs[0] if i == 0 else tf.add_paragraph()
        r = p.add_run()
        r.text = line
        r.font.size = Pt(size)
        r.font.name = "Arial"
        if colour:
            r.font.color.rgb = RGBColor.from_string(colour)
    if name:
        box.name = name
    return box


def _table(slide, rows: list[list[str]], x, y, w, size=16, row_h=0.4):
    frame = slide.shapes.add_table(len(rows), len(rows[0]), Inches(x), Inches(y), Inches(w), Inches(row_h * len(rows)))
    for r, row in enumerate(rows):
        frame.table.rows[r].height = Inches(row_h)
        for c, value in enumerate(row):
            cell = frame.table.cell(r, c)
            cell.text = value
            for p in cell.text_frame.paragraphs:
                for run in p.runs:
                    run.font.size = Pt(size)
    return frame


def overflow_text(prs):
    _box(_blank(prs), 1, 1, 3, 0.8, "A paragraph that cannot fit in a small box at twenty-four points, "
         "whatever the renderer does with it. " * 2, 24)


def overflow_table(prs):
    _table(_blank(prs), [["项目", "说明"]] + [["改性", CJK_CELL * 2]] * 6, 0.6, 1.2, 8)


def caption_over_table(prs):
    """The caption sits where a 1.2 em estimate ends the table; CJK rows render taller."""
    slide = _blank(prs)
    rows = [["项目", "说明"]] + [["界面", CJK_CELL]] * 3
    _table(slide, rows, 0.6, 1.0, 6.0, size=16, row_h=0.3)
    lines = 2  # each body cell wraps to two lines at 16 pt in a 3 in column
    naive = 0.1 + 16 * 1.2 * lines / 72 + 0.1
    _box(slide, 0.6, 1.0 + 0.4 + 3 * naive, 6.0, 0.4, "表 1  数据来源：课题组实测", 14, name="Caption")


def table_in_footer(prs):
    slide = _blank(prs)
    _table(slide, [["Metric", "Q2", "Q3"], ["Revenue", "14.0", "15.4"], ["Margin", "39%", "41%"]], 0.6, 5.9, 8, 16, 0.45)


def group_off_slide(prs):
    """A group dragged to the right: its children keep their own coordinates (chOff), so only
    mapping them through the group transform shows them off the slide."""
    slide = _blank(prs)
    a = slide.shapes.add_shape(MSO_SHAPE.RECTANGLE, Inches(1), Inches(2), Inches(3), Inches(1))
    b = _box(slide, 1, 3.2, 3, 0.6, "Grouped label", 16)
    group = slide.shapes.add_group_shape([a, b])
    group.left = Inches(11.5)


def overlap(prs):
    slide = _blank(prs)
    _box(slide, 1, 1, 5, 1, "First box with a line of text", 20)
    _box(slide, 1.5, 1.2, 5, 1, "Second box on top of it", 20)


def off_slide(prs):
    _box(_blank(prs), 12.0, 3, 2.5, 0.6, "past the edge", 16)


def small_font(prs):
    _box(_blank(prs), 1, 1, 8, 1, "Footnote-sized body text that nobody in the room can read", 9)


def too_many_bullets(prs):
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "Everything"
    body = slide.placeholders[1]
    body.left, body.top, body.width, body.height = Inches(0.6), Inches(1.6), Inches(12), Inches(5.3)
    tf = body.text_frame
    for i in range(11):
        p = tf.paragraphs[0] if i == 0 else tf.add_paragraph()
        r = p.add_run()
        r.text = f"Point {i + 1}"
        r.font.size = Pt(16)
    slide.shapes.title.text_frame.paragraphs[0].runs[0].font.size = Pt(32)


def long_text(prs):
    _box(_blank(prs), 0.6, 0.6, 12, 6.2, "经营情况说明。" * 50, 14)


def title_smaller_than_body(prs):
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "A long title shrunk until it fits"
    slide.shapes.title.text_frame.paragraphs[0].runs[0].font.size = Pt(20)
    body = slide.placeholders[1]
    body.text_frame.text = "Body text at twenty-four points"
    body.text_frame.paragraphs[0].runs[0].font.size = Pt(24)


def white_on_white(prs):
    _box(_blank(prs), 1, 1, 8, 1, "Invisible conclusion", 24, colour="FFFFFF")


def crowded_labels(prs):
    slide = _blank(prs)
    data = CategoryChartData()
    data.categories = [f"华东区域第{i}分公司" for i in range(1, 13)]
    data.add_series("收入", list(range(1, 13)))
    frame = slide.shapes.add_chart(XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(0.6), Inches(1), Inches(6), Inches(4), data)
    frame.chart.font.size = Pt(14)


def empty_placeholder(prs):
    slide = prs.slides.add_slide(prs.slide_layouts[5])  # Title Only, title left empty
    _box(slide, 1, 2, 6, 1, "Content without a title", 20)


def per_char_wrap(prs):
    """Two-character labels in a column too narrow for them: set one character per line."""
    frame = _table(_blank(prs), [["项目", "说明"], ["背景", "固态电池界面问题"], ["方法", "原子层沉积包覆"]], 0.6, 1.2, 6.0, 16, 0.8)
    frame.table.columns[0].width = Inches(0.45)
    frame.table.columns[1].width = Inches(5.55)


ORPHAN_TEXT = "这是一段会留下孤字的话"


def orphan_char(prs):
    """Eleven characters in a box ten and a half wide: the last one alone on its line."""
    _box(_blank(prs), 1, 1, 3.12, 1.2, ORPHAN_TEXT, 20, name="Orphan")


def level_inversion(prs):
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "Findings"
    slide.shapes.title.text_frame.paragraphs[0].runs[0].font.size = Pt(32)
    tf = slide.placeholders[1].text_frame
    for i, (text, level, size) in enumerate((("Main point", 0, 18), ("A detail set larger than its point", 1, 24))):
        p = tf.paragraphs[0] if i == 0 else tf.add_paragraph()
        p.level = level
        r = p.add_run()
        r.text = text
        r.font.size = Pt(size)


def half_empty(prs):
    """A title and two short lines pinned under it: the lower 70 % of the slide is empty."""
    slide = prs.slides.add_slide(prs.slide_layouts[5])  # Title Only
    slide.shapes.title.text = "Two points only"
    _box(slide, 0.6, 1.7, 12, 0.9, "First point\nSecond point", 20)


def narrow_table(prs):
    """A table at half the content width whose cells wrap: the 70 %-wide tables of the issue."""
    _table(_blank(prs), [["Item", "Notes"], ["Coating", "Atomic layer deposition of a five nanometre niobate layer"],
                         ["Cells", "Pouch cells of one ampere-hour cycled at half C for five hundred cycles"]],
           0.6, 1.2, 6.0, 16, 1.0)


def wide_bar_labels(prs):
    """Bar-chart category labels taking half the chart's width."""
    data = CategoryChartData()
    data.categories = ["华东区域渠道合作伙伴收入合计", "华南区域渠道合作伙伴收入合计", "西部区域渠道合作伙伴收入合计"]
    data.add_series("收入", (6.2, 4.1, 1.8))
    frame = _blank(prs).shapes.add_chart(XL_CHART_TYPE.BAR_CLUSTERED, Inches(0.6), Inches(1), Inches(6), Inches(4.5), data)
    frame.chart.font.size = Pt(14)


def half_empty_card(prs):
    """A tall card with two short lines at its top: the lower two thirds of the card are empty."""
    slide = _blank(prs)
    card = slide.shapes.add_shape(MSO_SHAPE.RECTANGLE, Inches(0.6), Inches(1.0), Inches(5.5), Inches(5.2))
    card.fill.solid()
    card.fill.fore_color.rgb = RGBColor.from_string("EEF2F7")
    card.line.fill.background()
    _box(slide, 0.8, 1.2, 5.1, 1.0, "15.4 亿\n季度收入", 24, name="Card Text")


def equation_does_not_add_up(prs):
    """A slide whose own arithmetic is wrong: 12 + 30 is not 40."""
    _box(_blank(prs), 0.6, 1.0, 12, 1.0, "新增客户：12 + 30 = 40 家", 24)


def growth_label_mismatch(prs):
    """'+38 %' on the 2025 bar, while 9.8 -> 15.2 is +55 %."""
    data = CategoryChartData()
    data.categories = ["2022", "2023", "2024", "2025"]
    data.add_series("收入", (4.0, 5.1, 9.8, 15.2))
    frame = _blank(prs).shapes.add_chart(XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(0.6), Inches(1), Inches(9), Inches(5), data)
    label = frame.chart.plots[0].series[0].points[3].data_label
    label.has_text_frame = True
    label.text_frame.text = "+38 %"


# Some defect slides also show a second, true finding of the space rules (a narrow table whose
# cells wrap; a slide with one short line under its title): listed with them.
DEFECTS: dict[str, tuple[Callable, set[tuple[int, str, str]]]] = {
    "overflow_text": (overflow_text, {(1, "overflow", "error")}),
    "overflow_table": (overflow_table, {(1, "overflow", "error"), (1, "table-width", "warning")}),
    "caption_over_table": (caption_over_table, {(1, "overlap", "error"), (1, "table-width", "warning")}),
    "table_in_footer": (table_in_footer, {(1, "footer", "error")}),
    "group_off_slide": (group_off_slide, {(1, "off-slide", "error")}),
    "overlap": (overlap, {(1, "overlap", "error")}),
    "off_slide": (off_slide, {(1, "off-slide", "error")}),
    "small_font": (small_font, {(1, "readability", "warning")}),
    "too_many_bullets": (too_many_bullets, {(1, "readability", "warning")}),
    "long_text": (long_text, {(1, "readability", "warning")}),
    "title_smaller_than_body": (title_smaller_than_body, {(1, "readability", "warning"), (1, "empty-area", "warning")}),
    "white_on_white": (white_on_white, {(1, "low-contrast", "error")}),
    "crowded_labels": (crowded_labels, {(1, "chart", "warning")}),
    "empty_placeholder": (empty_placeholder, {(1, "empty-placeholder", "warning")}),
    "per_char_wrap": (per_char_wrap, {(1, "per-char-wrap", "error"), (1, "table-width", "warning")}),
    "orphan_char": (orphan_char, {(1, "orphan", "warning")}),
    "half_empty": (half_empty, {(1, "empty-area", "warning")}),
    "narrow_table": (narrow_table, {(1, "table-width", "warning")}),
    "wide_bar_labels": (wide_bar_labels, {(1, "chart", "warning")}),
    "half_empty_card": (half_empty_card, {(1, "card-fill", "warning")}),
    "equation_does_not_add_up": (equation_does_not_add_up, {(1, "formula", "error")}),
    "growth_label_mismatch": (growth_label_mismatch, {(1, "formula", "warning")}),
    "level_inversion": (level_inversion, {(1, "level-inversion", "warning"), (1, "empty-area", "warning")}),
}


def build_defects(folder: Path) -> dict[str, Path]:
    out = {}
    for name, (make, _) in DEFECTS.items():
        prs = _deck()
        make(prs)
        path = folder / f"defect-{name}.pptx"
        prs.save(str(path))
        out[name] = path
    return out


def measurement_deck(path: Path) -> list[dict]:
    """Auto-growing text boxes and tables whose heights LibreOffice decides: what the checker's
    estimate is compared against. Returns one entry per measured shape (its name and kind)."""
    prs = _deck()
    slide = _blank(prs)
    cases = []
    texts = {
        "zh": "固态电解质界面稳定性研究进展与挑战分析，包括界面副反应机理和包覆层设计",
        "en": "Interface stability of solid electrolytes: side reactions, coatings and full-cell results",
        "mix": "Li6PS5Cl 电解质在 0.5 C 下循环 500 次后容量保持率 82%，优于对照组",
    }
    x = 0.2
    for lang, text in texts.items():
        for size, width in ((14, 2.0), (20, 2.6)):
            name = f"box-{lang}-{size}"
            box = _box(slide, x, 0.2, width, 0.3, text, size, name=name)
            box.text_frame.word_wrap = True
            body = box.text_frame._txBody.find(qn("a:bodyPr"))
            etree.SubElement(body, qn("a:spAutoFit"))
            cases.append({"name": name, "kind": "text"})
            x += width + 0.05
    slide2 = _blank(prs)
    for i, (lang, cell) in enumerate((("zh", CJK_CELL), ("en", texts["en"]), ("mix", texts["mix"]))):
        frame = _table(slide2, [["项目" if lang != "en" else "Item", "说明" if lang != "en" else "Notes"]] + [["A", cell]] * 3,
                       0.3 + i * 4.3, 0.3, 4.1, size=14, row_h=0.2)
        frame.table.columns[0].width = Inches(0.9)
        frame.table.columns[1].width = Inches(3.2)
        frame.name = f"table-{lang}"
        cases.append({"name": frame.name, "kind": "table"})
    prs.save(str(path))
    return cases
