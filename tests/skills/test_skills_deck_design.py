"""The deck design system: themes written into the master, real slide-number fields, the
palette in native charts, horizontal axis titles, the hierarchy kept, content-sized tables,
formulas as subscripts, the layout vocabulary, and the user's own template."""

from __future__ import annotations

import json
import sys

import pytest
from lxml import etree
from pptx import Presentation
from pptx.dml.color import RGBColor
from pptx.enum.shapes import MSO_SHAPE, PP_PLACEHOLDER
from pptx.opc.constants import RELATIONSHIP_TYPE as RT
from pptx.oxml.ns import qn
from pptx.util import Inches
from skillkit import FIXTURES, SKILLS, run_script

SCRIPTS = SKILLS / "ppt" / "scripts"
sys.path.insert(0, str(SCRIPTS))
import deck_themes  # noqa: E402
import outline_to_deck  # noqa: E402
from deck_outline import read_outline  # noqa: E402

A = "http://schemas.openxmlformats.org/drawingml/2006/main"
DECKS = FIXTURES / "decks"


def _build(tmp_path, name: str, **kw) -> Presentation:
    out = tmp_path / f"{name}-{kw.get('theme') or 'own'}.pptx"
    outline_to_deck.build(read_outline(DECKS / f"{name}.json"), out, DECKS, **kw)
    return Presentation(str(out))


def _theme_xml(prs):
    return etree.fromstring(prs.slide_master.part.part_related_by(RT.THEME).blob)


@pytest.mark.parametrize("theme", sorted(deck_themes.THEMES))
def test_theme_is_written_into_master_and_layouts(tmp_path, theme):
    t = deck_themes.THEMES[theme]
    prs = _build(tmp_path, "zh_report", theme=theme)
    root = _theme_xml(prs)
    assert root.find(f".//{{{A}}}minorFont/{{{A}}}latin").get("typeface") == t.latin
    assert root.find(f".//{{{A}}}minorFont/{{{A}}}ea").get("typeface") == t.ea
    assert root.find(f".//{{{A}}}majorFont/{{{A}}}ea").get("typeface") == t.head_ea
    assert root.find(f".//{{{A}}}clrScheme/{{{A}}}accent1/{{{A}}}srgbClr").get("val") == t.palette[0]
    title_style = prs.slide_master._element.find(qn("p:txStyles")).find(qn("p:titleStyle"))
    d = title_style.find(f"{qn('a:lvl1pPr')}/{qn('a:defRPr')}")
    assert d.get("lang") == "zh-CN" and d.get("sz") == str(int(t.title_size * 100))
    # every run says its language; the layouts carry the theme's title geometry
    langs = {r.get("lang") for s in prs.slides for r in s._element.iter(qn("a:rPr"))}
    assert langs == {"zh-CN"}
    layout = next(lay for lay in prs.slide_layouts if lay._element.get("type") == "titleOnly")
    content = prs.slides[4]  # a bullets slide
    assert layout.placeholders[0].left == content.shapes.title.left and layout.placeholders[0].top == content.shapes.title.top


def test_english_deck_is_english(tmp_path):
    prs = _build(tmp_path, "en_review")
    assert {r.get("lang") for s in prs.slides for r in s._element.iter(qn("a:rPr"))} == {"en-US"}
    assert prs.slides[-1].shapes.title.text_frame.text == "Questions"


def test_slide_numbers_are_fields(tmp_path):
    prs = _build(tmp_path, "zh_report")
    kinds = [s.get("type", "") for s in read_outline(DECKS / "zh_report.json")["slides"]]
    for slide, kind in zip(prs.slides, kinds):
        fields = [f for f in slide._element.iter(qn("a:fld")) if f.get("type") == "slidenum"]
        assert len(fields) == (0 if kind in ("title", "section", "closing") else 1), kind
        numbers = [sh for sh in slide.placeholders if sh.placeholder_format.type == PP_PLACEHOLDER.SLIDE_NUMBER]
        assert len(numbers) == len(fields)  # in the layout's slide-number placeholder


def test_charts_use_the_palette_and_horizontal_axis_titles(tmp_path):
    prs = _build(tmp_path, "zh_report")
    palette = deck_themes.THEMES["corporate"].palette
    chart = next(sh.chart for sh in prs.slides[3].shapes if sh.has_chart)
    fills = [str(s.format.fill.fore_color.rgb) for s in chart.plots[0].series]
    assert fills == list(palette[:2])
    body = chart.value_axis.axis_title.text_frame._txBody.find(qn("a:bodyPr"))
    assert body.get("rot") == "0" and body.get("vert") == "horz"
    assert chart.value_axis.axis_title.text_frame.text == "收入（亿元）"
    doughnut = next(sh.chart for sh in prs.slides[9].shapes if sh.has_chart)
    assert [str(p.format.fill.fore_color.rgb) for p in doughnut.plots[0].series[0].points] == list(palette[:4])


def test_titles_stay_above_body_and_long_lists_continue(tmp_path):
    prs = _build(tmp_path, "adversarial")
    titles = [s.shapes.title.text_frame.text for s in prs.slides]
    assert titles[1:4] == ["十五条要点", "十五条要点（续）", "十五条要点（续）"]
    for slide in prs.slides:
        title = max(r.font.size.pt for p in slide.shapes.title.text_frame.paragraphs for r in p.runs)
        body = [r.font.size.pt for sh in slide.placeholders if sh.placeholder_format.idx == 1
                for p in sh.text_frame.paragraphs for r in p.runs]
        assert not body or title > max(body), (title, body)
        assert not body or min(body) >= 16


def test_tables_are_content_sized_with_formulas_kept_whole(tmp_path):
    prs = _build(tmp_path, "adversarial")
    table = next(sh.table for sh in prs.slides[-1].shapes if sh.has_table)
    widths = [c.width for c in table.columns]
    assert widths[1] > 3 * widths[0] and widths[1] > 3 * widths[2]  # the description gets the room
    import deck_measure as dm

    for col, text in ((0, "界面改性"), (2, "Li10GeP2S12")):
        need = dm.text_em(text, "sans") * 12 * dm.EMU_PER_PT  # at the smallest table size
        assert need < widths[col]
    runs = [(r.text, r._r.get_or_add_rPr().get("baseline")) for p in table.cell(3, 2).text_frame.paragraphs for r in p.runs]
    assert runs == [("Li", None), ("10", "-25000"), ("GeP", None), ("2", "-25000"), ("S", None), ("12", "-25000")]


def test_layout_vocabulary(tmp_path):
    prs = _build(tmp_path, "zh_report")
    names = [{sh.name for sh in s.shapes} for s in prs.slides]
    assert {"KPI 1", "KPI 3", "KPI Text 2", "Takeaway"} <= names[1]
    assert {"Section Number"} <= names[2]
    assert {"Chart", "Takeaway"} <= names[3]
    assert {"Card 1", "Card 3", "Card Head 2", "Card Text 3"} <= names[5]
    assert {"Table", "Caption"} <= names[6]
    assert {"Timeline", "Step Marker 1", "Step Marker 4", "Step Label 4"} <= names[7]
    assert {"Panel 1", "Panel 2", "Panel Head 2"} <= names[8]
    assert {"Quote", "Quote Mark", "Quote Source"} <= names[10]
    layouts = [s.slide_layout.name for s in prs.slides]
    assert layouts[0] == layouts[-1] == "Title Slide" and layouts[2] == "Section Header" and layouts[4] == "Title and Content"
    # the number keeps its unit: a no-break space, so "亿" never starts a line alone
    assert "15.4\u00a0亿" in next(sh for sh in prs.slides[1].shapes if sh.name == "KPI Text 1").text_frame.text
    # the rule under a title starts where the title's text starts, not at its box
    slide = prs.slides[4]
    rule = next(sh for sh in slide.shapes if sh.name == "Title Rule")
    assert rule.left == slide.shapes.title.left + slide.shapes.title.text_frame.margin_left


def corporate_template(path):
    """A sample organisation template: Chinese layout names, its own fonts and brand colour, a
    brand bar on the master."""
    prs = Presentation()
    names = {"title": "封面", "obj": "标题和正文", "secHead": "章节页", "twoObj": "左右两栏", "titleOnly": "仅标题", "blank": "空白"}
    for layout in prs.slide_layouts:
        if layout._element.get("type") in names:
            layout.name = names[layout._element.get("type")]
    part = prs.slide_master.part.part_related_by(RT.THEME)
    root = etree.fromstring(part.blob)
    accent = root.find(f".//{{{A}}}clrScheme/{{{A}}}accent1")
    for child in list(accent):
        accent.remove(child)
    etree.SubElement(accent, f"{{{A}}}srgbClr", val="C00000")
    for tag in ("majorFont", "minorFont"):
        root.find(f".//{{{A}}}{tag}/{{{A}}}latin").set("typeface", "Georgia")
        root.find(f".//{{{A}}}{tag}/{{{A}}}ea").set("typeface", "KaiTi")
    part._blob = etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)
    scratch = prs.slides.add_slide(prs.slide_layouts[6])
    bar = scratch.shapes.add_shape(MSO_SHAPE.RECTANGLE, 0, 0, prs.slide_width, Inches(0.15))
    bar.fill.solid()
    bar.fill.fore_color.rgb = RGBColor(0xC0, 0, 0)
    bar.name = "Brand Bar"
    prs.slide_master.shapes._spTree.append(bar._element)
    ids = prs.slides._sldIdLst
    prs.part.drop_rel(ids[0].rId)
    ids.remove(ids[0])
    prs.save(str(path))
    return path


def test_deck_on_the_users_template_uses_its_placeholders(tmp_path):
    template = corporate_template(tmp_path / "公司模板.pptx")
    run = run_script(SCRIPTS / "outline_to_deck.py", str(DECKS / "zh_report.json"), "deck.pptx", "--template", str(template),
                     "--json", cwd=tmp_path)
    report = json.loads(run.stdout)
    assert run.returncode == 0 and report["errors"] == [], run.text
    prs, tpl = Presentation(str(tmp_path / "deck.pptx")), Presentation(str(template))
    assert prs.slide_width == tpl.slide_width
    assert {s.slide_layout.name for s in prs.slides} <= {lay.name for lay in tpl.slide_layouts}
    assert prs.slides[4].slide_layout.name == "标题和正文"
    assert any(sh.name == "Brand Bar" for sh in prs.slide_master.shapes)
    for slide in prs.slides:
        if slide.shapes.title is not None and slide.shapes.title.text_frame.text:
            assert slide.shapes.title.is_placeholder
            # the template's geometry: the slide's title has no position of its own
            assert slide.shapes.title._element.spPr.find(qn("a:xfrm")) is None
        texts = [sh for sh in slide.shapes if sh.has_text_frame and not sh.is_placeholder and sh.text_frame.text.strip()]
        assert not any(sh.name in ("Title", "TextBox") for sh in texts)
    bullets = prs.slides[4]
    body = next(sh for sh in bullets.placeholders if sh.placeholder_format.type in (PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT))
    assert body.text_frame.paragraphs[0].runs[0].text.startswith("完成华东")
    # no fonts forced over the template's; native charts in the template's brand colour
    faces = {el.get("typeface") for s in prs.slides for el in s._element.iter(qn("a:latin"), qn("a:ea"))}
    assert faces <= {None}
    chart = next(sh.chart for sh in prs.slides[3].shapes if sh.has_chart)
    assert str(chart.plots[0].series[0].format.fill.fore_color.rgb) == "C00000"
