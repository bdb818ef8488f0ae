"""Two checker rules of issue 38, table-driven: numbers on a slide that contradict each other
(deck_formulas.py: equations, rates, multiples, shares, total rows, chart growth labels), and
cards whose text fills only part of them (deck_space.card_fill), judged per row of equal cards."""

from __future__ import annotations

import sys

import pytest
from pptx import Presentation
from pptx.chart.data import CategoryChartData
from pptx.enum.chart import XL_CHART_TYPE
from pptx.util import Inches
from skillkit import SKILLS

sys.path.insert(0, str(SKILLS / "ppt" / "scripts"))
import deck_formulas as formulas  # noqa: E402  (the skill's own modules, plain files next to each other)
import deck_space as space  # noqa: E402

IN = 914400

# text -> the severity of the finding, or None for a consistent (or unverifiable) claim
TEXT_CASES = [
    ("新增客户：12 + 30 = 40 家", "error"),
    ("12 + 30 = 42", None),
    ("3 × 4 = 13", "error"),
    ("3 × 4 = 12", None),
    ("100 − 30 = 70", None),
    ("2.5 + 3.7 = 6.1", "error"),
    ("1/3 = 0.33", None),
    ("8 + 12 + 30 = 50 亿", None),
    ("从 10.2 亿增长到 14.1 亿（+38%）", None),
    ("从 10.2 亿增长到 14.1 亿（+45%）", "warning"),
    ("revenue from 120 to 150 (+25%)", None),
    ("revenue from 120 to 150 (+20%)", "warning"),
    ("周期从 30 天缩短到 24 天，下降 20%", None),
    ("周期从 30 天缩短到 24 天，下降 30%", "warning"),
    ("渠道数量从 48 家精简到 31 家（-25%）", "warning"),
    ("由 4.0 提升至 15.2，达到原来的 3.8 倍", None),
    ("由 4.0 提升至 15.2，达到原来的 3.2 倍", "warning"),
    ("企业客户 8.9 亿，占 15.4 亿的 58%", None),
    ("企业客户 8.9 亿，占 15.4 亿的 68%", "warning"),
    ("42 of 120 (35%)", None),
    ("42 of 120 (45%)", "warning"),
    # not claims the rule can check: left alone
    ("毛利率从 39.1% 提升到 41.2%（+2.1 个百分点）", None),
    ("收入 15.4 亿元，同比 +18%", None),
    ("from 2022 to 2025, revenue grew 55%", None),
    ("会议 2026-11-30，版本 1.2", None),
    ("三周缩短到一周", None),
]


@pytest.mark.parametrize("text,severity", TEXT_CASES)
def test_text_claims(text, severity):
    found = formulas.text_findings(text)
    assert [s for s, _ in found] == ([severity] if severity else []), found


TOTAL_CASES = [
    ([["区域", "收入", "同比"], ["华东", "6.2", "+21%"], ["华南", "4.1", "+17%"], ["合计", "10.3", "+19%"]], None),
    ([["区域", "收入", "同比"], ["华东", "6.2", "+21%"], ["华南", "4.1", "+17%"], ["合计", "11.3", "+19%"]], "11.3"),
    ([["Region", "Deals"], ["East", "12"], ["South", "30"], ["Total", "40"]], "40"),
    ([["Region", "Deals"], ["East", "12"], ["South", "30"], ["Total", "42"]], None),
    ([["项目", "说明"], ["A", "进行中"], ["合计", "2 项"]], None),  # text, not a column of numbers
]


@pytest.mark.parametrize("rows,flagged", TOTAL_CASES)
def test_total_rows(rows, flagged):
    msg = formulas.table_total(rows)
    assert (msg is None) == (flagged is None), msg
    if flagged:
        assert flagged in msg


@pytest.mark.parametrize("label,flagged", [("+55 %", False), ("+55.1%", False), ("+38 %", True), ("-55%", True)])
def test_chart_growth_labels(label, flagged):
    prs = Presentation()
    data = CategoryChartData()
    data.categories = ["2022", "2023", "2024", "2025"]
    data.add_series("收入", (4.0, 5.1, 9.8, 15.2))
    slide = prs.slides.add_slide(prs.slide_layouts[6])
    frame = slide.shapes.add_chart(XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(1), Inches(1), Inches(6), Inches(4), data)
    point = frame.chart.plots[0].series[0].points[3].data_label
    point.has_text_frame = True
    point.text_frame.text = label
    found = formulas.slide_findings(slide.shapes)
    assert bool(found) == flagged, found
    if flagged:
        assert "9.8 → 15.2 is +55.1%" in found[0][3]


def _card(y: float, h: float, text_h: float, x: float = 0.6, name: str = "Card Text"):
    """A card at (x, y) h tall with a text block text_h tall at its top: (panel, box)."""
    return (int(x * IN), int(y * IN), int(3 * IN), int(h * IN)), (name, (int(x * IN), int((y + 0.1) * IN),
                                                                            int(3 * IN), int(text_h * IN)), "text")


@pytest.mark.parametrize("cards,expected", [
    ([(1.5, 4.0, 3.2)], 0),                       # a full card
    ([(1.5, 4.0, 1.2)], 1),                       # text in its top third
    ([(1.5, 4.0, 2.2)], 1),                       # over half, but the lower 42 % empty
    ([(1.5, 4.0, 3.2), (1.5, 4.0, 1.2)], 0),      # a row of equal cards: judged by the fullest
    ([(1.5, 4.0, 1.2), (1.5, 4.0, 1.0)], 1),      # ... one finding for the row
    ([(1.5, 4.0, 1.2), (1.5, 3.0, 1.0)], 2),      # different heights: not a row
    ([(0.0, 7.0, 1.0)], 0),                       # a full-height band (section number): the layout's
    ([(1.5, 0.8, 0.2)], 0),                       # a badge, not a card
])
def test_card_fill_rows(cards, expected):
    panels, boxes = [], []
    for i, (y, h, text_h) in enumerate(cards):
        panel, box = _card(y, h, text_h, x=0.6 + 3.5 * i, name=f"Card Text {i + 1}")
        panels.append(panel)
        boxes.append(box)
    found = space.card_fill(boxes, panels, int(7.5 * IN))
    assert len(found) == expected, found
    assert all(f[:2] == ("card-fill", "warning") for f in found)
