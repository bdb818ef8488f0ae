"""The layout engine: bullets slides classified into the kind a designer would use (numbers ->
KPI cards, dates -> timeline, steps -> process, a quote, heads with sub-points -> comparison or
cards), short lists as numbered rows that fill the body, action titles at 24 pt over 16-20 pt
body text, the key datum annotated on its bar, source lines, pies only when they read; the
outline's `type` always wins."""

from __future__ import annotations

import sys

import pytest
from pptx import Presentation
from pptx.util import Pt
from skillkit import FIXTURES, SKILLS

SCRIPTS = SKILLS / "ppt" / "scripts"
sys.path.insert(0, str(SCRIPTS))
import check_deck  # noqa: E402
import outline_to_deck  # noqa: E402
from deck_classify import classify  # noqa: E402
from deck_outline import read_outline  # noqa: E402

DECKS = FIXTURES / "decks"


@pytest.mark.parametrize(("bullets", "kind"), [
    (["季度收入：15.4 亿元", "毛利率：41.2%（提升 2.1 个百分点）", "客户流失率：2.7%"], "kpis"),
    (["15.4 bn revenue", "41% gross margin", "2.7% churn"], "kpis"),
    (["2026 Q1：客户门户上线", "2026 Q2：数据看板", "2026 Q3：开放 API"], "timeline"),
    (["10 月：门户", "11 月：看板"], "timeline"),
    (["第一步：诊断现状", "第二步：设计方案", "第三步：试点推广"], "process"),
    (["Step 1: detect", "Step 2: fix"], "process"),
    (["“新平台让续约从三周缩短到一周。” —— 某银行 CIO"], "quote"),
    (["优势", {"text": "增长稳定", "level": 1}, "风险", {"text": "回款延迟", "level": 1}], "comparison"),
    (["扩客", {"text": "a", "level": 1}, "降本", {"text": "b", "level": 1}, "续约", {"text": "c", "level": 1}], "cards"),
    (["收入 15.4 亿元，同比 +18%", "毛利率 41.2%", "流失率 2.7%", "企业客户是增长主力，云成本优化贡献了大部分毛利改善"], "kpis"),
    (["完成华东、华南两个区域的渠道整合", "云资源成本同比下降 9%"], None),
    (["Li10GeP2S12 室温电导率达 12 mS/cm，接近液态电解质", "与 LiCoO2 正极接触时发生界面副反应"], None),
    (["Revenue grew 18% year over year", {"text": "Enterprise +32%", "level": 1}, "Churn fell below 3%"], None),
])
def test_bullets_are_classified(bullets, kind):
    slide = classify({"title": "t", "bullets": bullets, "notes": "n", "source": "s"})
    assert slide.get("type") == kind
    if kind:  # notes and the source line travel with the slide (a quote's source is its attribution)
        assert slide["notes"] == "n" and slide["source"] == ("某银行 CIO" if kind == "quote" else "s")


def test_numbers_with_a_sentence_become_cards_with_a_takeaway():
    slide = classify({"title": "t", "bullets": ["收入 15.4 亿元，同比 +18%", "毛利率 41.2%", "企业客户是增长主力"]})
    assert [k["value"] for k in slide["kpis"]] == ["15.4 亿元", "41.2%"]
    assert slide["kpis"][0] == {"value": "15.4 亿元", "label": "收入", "note": "同比 +18%"}
    assert slide["takeaway"] == "企业客户是增长主力"


def test_the_outline_forces_a_kind():
    s = {"type": "bullets", "title": "t", "bullets": ["季度收入：15.4 亿元", "毛利率：41.2%"]}
    assert classify(s) is s


def test_timeline_steps_get_a_head_and_text():
    slide = classify({"title": "t", "bullets": ["2026 Q1：客户门户上线，自助开通与账单", "2026 Q2：数据看板"]})
    assert slide["steps"][0] == {"label": "2026 Q1", "title": "客户门户上线", "text": "自助开通与账单"}


@pytest.fixture(scope="module")
def consulting(tmp_path_factory):
    out = tmp_path_factory.mktemp("layout") / "consulting.pptx"
    outline_to_deck.build(read_outline(DECKS / "consulting.json"), out, DECKS)
    return out, Presentation(str(out)), check_deck.check(out)


def _names(slide) -> set[str]:
    return {sh.name for sh in slide.shapes}


def test_consulting_deck_is_laid_out_by_kind(consulting):
    _, prs, report = consulting
    assert report["errors"] == [] and report["warnings"] == [], report
    slides = prs.slides
    assert {"KPI 1", "KPI 3", "KPI Text 2"} <= _names(slides[3])
    assert {"Row Number 1", "Row Text 3", "Row Rule 2", "Takeaway"} <= _names(slides[4])
    assert {"Step Marker 3"} <= _names(slides[6]) and "Step Label 1" not in _names(slides[6])  # process
    assert {"Step Label 3", "Timeline"} <= _names(slides[7])


def test_action_titles_over_body_text_of_16_to_20_pt(consulting):
    _, prs, _ = consulting
    for slide in [sl for i, sl in enumerate(prs.slides) if i not in (0, 2, len(prs.slides) - 1)]:
        title = max(r.font.size.pt for p in slide.shapes.title.text_frame.paragraphs for r in p.runs)
        assert 22 <= title <= 24
    rows = [sh for sh in prs.slides[4].shapes if sh.name.startswith("Row Text")]
    sizes = {r.font.size.pt for sh in rows for p in sh.text_frame.paragraphs for r in p.runs}
    assert sizes and all(16 <= z <= 20 for z in sizes)
    # the rows share the body: the last one ends at the body's bottom
    assert max(sh.top + sh.height for sh in rows) > prs.slide_height * 0.8


def test_source_line_sits_under_the_content(consulting):
    _, prs, _ = consulting
    for index in (3, 5):
        slide = prs.slides[index]
        source = next(sh for sh in slide.shapes if sh.name == "Source")
        assert source.text_frame.text.startswith("来源：")
        assert source.top + source.height <= prs.slide_height * check_deck.FOOTER_BAND
        others = [sh for sh in slide.shapes if sh.name not in ("Source", "Slide Number") and sh.top > prs.slide_height * 0.2]
        assert all(sh.top + sh.height <= source.top for sh in others), [sh.name for sh in others]


def test_the_key_datum_is_annotated_on_its_bar(consulting):
    _, prs, _ = consulting
    chart = next(sh.chart for sh in prs.slides[5].shapes if sh.has_chart)
    label = chart.plots[0].series[0].points[3].data_label
    assert label.has_text_frame and label.text_frame.text == "+55 %"
    assert label.text_frame.paragraphs[0].runs[0].font.size == Pt(16)


def test_takeaway_names_the_highlighted_category(tmp_path):
    outline = read_outline(DECKS / "zh_report.json")
    deck = tmp_path / "zh.pptx"
    outline_to_deck.build(outline, deck, DECKS)
    chart = next(sh.chart for sh in Presentation(str(deck)).slides[3].shapes if sh.has_chart)
    # "Q3 收入 15.4 亿元…": the Q3 column of the last series carries its value
    point = chart.plots[0].series[1].points[3]
    assert point.data_label.text_frame.text == "15.4"


def test_a_pie_that_would_not_read_becomes_sorted_bars(consulting):
    _, prs, _ = consulting
    chart = next(sh.chart for sh in prs.slides[8].shapes if sh.has_chart)
    assert "BAR" in str(chart.chart_type)
    values = list(chart.plots[0].series[0].values)
    assert values == sorted(values)  # the largest share on top


def test_table_emphasis_comes_from_the_data(consulting):
    _, prs, _ = consulting
    table = next(sh.table for sh in prs.slides[9].shapes if sh.has_table)
    marks = {table.cell(r, 0).text: (table.cell(r, 2).text_frame.paragraphs[0].runs[0].font.bold,
                                     str(table.cell(r, 2).text_frame.paragraphs[0].runs[0].font.color.rgb))
             for r in range(1, 5)}
    assert marks["华东"] == marks["华南"] == (True, "1E7B34")  # at or above the 15 % target
    assert marks["华北"] == (True, "B3261E")  # at or below 12 %
    assert marks["西部"][0] is False


def test_executive_summary_and_section_tracker(consulting):
    _, prs, _ = consulting
    summary = prs.slides[1]
    rows = [sh.text_frame.text.replace("\u00a0", " ") for sh in summary.shapes if sh.name.startswith("Row Text")]
    titles = [sl.shapes.title.text_frame.text.replace("\u00a0", " ") for sl in list(prs.slides)[3:8]]
    assert rows == titles  # the storyline: the action titles of the slides that follow
    trackers = [sh.text_frame.text for sl in prs.slides for sh in sl.shapes if sh.name == "Section Tracker"]
    assert trackers == ["增长诊断"] * 7  # every content slide after the section, not the summary before it


def test_long_bar_labels_go_on_two_lines(tmp_path):
    """Category labels that would take over 28 % of a bar chart are broken in two (LibreOffice
    and PowerPoint honour the break), so the bars keep the width; the checker agrees."""
    cats = ["华东区域渠道合作伙伴收入合计", "华南区域渠道合作伙伴收入合计", "西部区域渠道合作伙伴收入合计"]
    outline = {"slides": [{"title": "渠道收入集中在华东", "chart": {"type": "bar", "categories": cats,
                                                             "series": [{"name": "收入", "values": [6.2, 4.1, 1.8]}]},
                           "takeaway": "华东贡献过半"}]}  # the chart shares the slide with the panel
    deck = tmp_path / "bars.pptx"
    outline_to_deck.build(outline, deck, tmp_path)
    chart = next(sh.chart for sh in Presentation(str(deck)).slides[0].shapes if sh.has_chart)
    labels = list(chart.plots[0].categories)
    assert labels[0] == "华东区域渠道合\n作伙伴收入合计" and all("\n" in t for t in labels)
    report = check_deck.check(deck)
    assert report["errors"] == [] and report["warnings"] == [], report
