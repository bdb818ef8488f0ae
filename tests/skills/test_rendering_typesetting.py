"""Documents set as a grant office or a consulting firm expects (issue 38), read back from the
.docx: no line break inside a citation range or a page range, header columns as wide as their
longest word, lists and their lead-in kept on one page, the author's name (not the byline) in the
file's properties, a brief's caption flush with its table, one date, an undefined footnote that
stops a brief, Chinese emphasis in bold (no synthetic italic), inline code set apart."""

from __future__ import annotations

from docx import Document
from docx.enum.text import WD_ALIGN_PARAGRAPH
from docx.shared import Cm, Pt
from skillkit import SKILLS, run_script

from zcbot_core.rendering import markdown_to_docx

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
WJ = "\u2060"
BRIEF = SKILLS / "brief" / "scripts" / "render_brief.py"


def _doc(tmp_path, md: str, profile: str = "proposal"):
    out = tmp_path / f"{profile}.docx"
    report = markdown_to_docx(md, out, profile=profile)
    return report, Document(str(out))


def test_ranges_do_not_break_at_their_dash(tmp_path):
    md = "副反应严重[4-6]，见文献[2,3]。厚度 2–10 nm。\n\n## 参考文献\n\n- Ohta N. Electrochem Commun, 2007, 9: 1486-1490.\n"
    _, doc = _doc(tmp_path, md)
    body = doc.paragraphs[0]
    sup = [r.text for r in body.runs if r.font.superscript]
    assert sup == [f"{WJ}[4-{WJ}6]", f"{WJ}[2,{WJ}3]"]  # "寿命[4-" / "6]" was seen on the render
    assert f"2–{WJ}10" in body.text
    ref = next(p for p in doc.paragraphs if "Ohta" in p.text)
    assert f"1486-{WJ}1490" in ref.text
    _, doc = _doc(tmp_path, "会议 2026-12-01 10:30 召开。\n", "brief")
    assert "2026-12-01" in doc.paragraphs[0].text  # dates are left as written


def test_header_columns_are_as_wide_as_their_longest_word(tmp_path):
    long_note = "界面副反应导致阻抗持续上升，需要进一步的原位表征与长期循环验证" * 2
    md = f"表: 窗口\n\n| 电化学窗口 (V) | 说明 |\n|---|---|\n| 1.7 | {long_note} |\n"
    _, doc = _doc(tmp_path, md)
    table = doc.tables[0]
    size = 10.5  # the proposal's table size
    margins = Cm(0.19 * 2)  # Word's default cell margins, left + right
    assert table.columns[0].width - margins >= Pt(5 * size)  # "电化学窗口" on one line, not "电化学窗 / 口"
    assert table.columns[1].width > 3 * table.columns[0].width  # the long text still takes the rest
    # When every column fits at its natural width, no header wraps: a Chinese header would break
    # between any two characters ("的稳定 / 性" was seen).
    md = ("表: 性能\n\n| 电解质 | 室温电导率 (mS/cm) | 电化学窗口 (V) | 对空气中 H2O 的稳定性 |\n|---|---:|---:|---|\n"
          "| Li10GeP2S12 | 12.0 | 1.7–2.1 | 较差，释放 H2S |\n")
    _, doc = _doc(tmp_path, md)
    table = doc.tables[0]
    header = "对空气中 H2O 的稳定性"
    need = Pt(size * (8 + 0.55 * 5)) + margins  # 8 Chinese characters, 'H2O' and two spaces
    assert table.columns[3].width >= need, (header, table.columns[3].width, need)


def test_lists_keep_with_their_lead_in(tmp_path):
    three = "\n".join(f"{i}. 第 {i} 项研究内容" for i in range(1, 4))
    nine = "\n".join(f"- 要点 {i}" for i in range(1, 10))
    long_lead = "本项目拟解决的关键科学问题是硫化物电解质与高电压正极界面副反应的热力学驱动力，研究内容包括："
    md = f"研究内容包括：\n\n{three}\n\n另一段。\n\n{nine}\n\n{long_lead}\n\n{three}\n"
    _, doc = _doc(tmp_path, md)
    paras = doc.paragraphs
    keeps = [bool(p.paragraph_format.keep_with_next) for p in paras]
    assert keeps[0:4] == [True, True, True, False]  # the lead-in and a short list on one page
    assert keeps[4] is False  # "另一段。" does not end with a colon
    assert keeps[5:14] == [True, False, False, False, False, False, False, True, False]  # no lone first/last item
    lead = next(i for i, p in enumerate(paras) if p.text == long_lead)
    assert keeps[lead] is False  # a two-line lead-in may end a page rather than pull its heading over


def test_author_property_is_the_name_not_the_byline(tmp_path):
    md = "---\ntitle: 硫化物电解质界面研究\nauthor: 张三（某某大学材料科学与工程学院）\n---\n\n## 立项依据\n\n正文。\n"
    _, doc = _doc(tmp_path, md)
    assert doc.core_properties.author == "张三"
    assert doc.core_properties.last_modified_by == "张三"
    assert any(p.text == "张三（某某大学材料科学与工程学院）" for p in doc.paragraphs[:4])  # the cover keeps the byline


def test_caption_lines_up_with_its_table(tmp_path):
    md = "---\ntitle: 周报\n---\n\n## 指标\n\n表: 关键指标\n\n| 指标 | 今日 |\n|---|---:|\n| 专利 | 42 |\n"
    _, doc = _doc(tmp_path, md, "brief")
    caption = next(p for p in doc.paragraphs if p.style.name == "Caption")
    assert caption.alignment == WD_ALIGN_PARAGRAPH.LEFT
    tbl_pr = doc.tables[0]._tbl.tblPr
    assert tbl_pr.find(f"{W}jc").get(f"{W}val") in ("left", "start")
    assert int(tbl_pr.find(f"{W}tblInd").get(f"{W}w")) == 108  # the border on the text margin, not hung out
    _, doc = _doc(tmp_path, md.replace("title: 周报", "title: 报告"), "proposal")
    caption = next(p for p in doc.paragraphs if p.style.name == "Caption")
    assert caption.alignment is None or caption.alignment == WD_ALIGN_PARAGRAPH.CENTER  # centred, as its table
    assert doc.styles["Caption"].paragraph_format.alignment == WD_ALIGN_PARAGRAPH.CENTER


def test_one_date_under_the_title(tmp_path):
    for title in ("固态电池日报 · 2026-11-30", "固态电池日报（2026年11月30日）", "日报 2026/11/30"):
        md = f"---\ntitle: {title}\ndate: 2026-11-30\nauthor: 情报组\n---\n\n## 要点\n\n正文。\n"
        _, doc = _doc(tmp_path, md, "brief")
        assert doc.paragraphs[1].text == "情报组", title
    md = "---\ntitle: 固态电池日报\ndate: 2026-11-30\nauthor: 情报组\n---\n\n## 要点\n\n正文。\n"
    _, doc = _doc(tmp_path, md, "brief")
    assert doc.paragraphs[1].text == "情报组 · 2026-11-30"


def test_undefined_footnote_stops_a_brief(tmp_path):
    (tmp_path / "b.md").write_text("---\ntitle: 日报\n---\n\n## 要点\n\n- 中试线投产[^1]。\n", encoding="utf-8")
    run = run_script(BRIEF, "b.md", cwd=tmp_path)
    assert run.returncode == 2, run.text
    assert "[^1]" in run.stderr and "not defined" in run.stderr and "[^1]: text" in run.stderr
    assert not (tmp_path / "b.docx").exists() and not (tmp_path / "b.pdf").exists()


def test_chinese_emphasis_is_bold_never_a_synthetic_italic(tmp_path):
    _, doc = _doc(tmp_path, "这是*尤其重要的 key point*，以及 _首批良率_。\n", "brief")
    runs = doc.paragraphs[0].runs
    assert [(r.text, bool(r.bold), bool(r.italic)) for r in runs if r.bold or r.italic] == [
        ("尤其重要的", True, False), (" key point", False, True), ("首批良率", True, False)]
    _, doc = _doc(tmp_path, "---\nlang: en\n---\n\n> A quote with 中文 inside.\n", "paper")
    quote = next(p for p in doc.paragraphs if "quote" in p.text)
    assert not any(r.italic and any("\u4e00" <= ch <= "\u9fff" for ch in r.text) for r in quote.runs)
    assert any(r.italic for r in quote.runs)


def test_inline_code_is_set_apart(tmp_path):
    _, doc = _doc(tmp_path, "数据在 `ssb.csv` 中。\n", "brief")
    code = next(r for r in doc.paragraphs[0].runs if r.text == "ssb.csv")
    body = next(r for r in doc.paragraphs[0].runs if r.text.startswith("数据在"))
    shd = code._r.rPr.find(f"{W}shd")
    assert shd is not None and shd.get(f"{W}fill") not in (None, "auto", "FFFFFF")
    assert code._r.rPr.rFonts.get(f"{W}ascii") == "Consolas"
    assert code.font.color.rgb is not None and body.font.color.rgb is None


def test_nsfc_numbering_follows_the_official_outline(tmp_path):
    md = ("---\ntitle: 申请书\nnumbering: nsfc\n---\n\n## 立项依据与研究内容\n\n### 项目的立项依据\n\n#### 研究现状\n\n正文。\n\n"
          "#### 存在问题\n\n### 项目的研究内容\n\n## 研究基础与工作条件\n\n### 研究基础\n\n## 参考文献\n\n- A. 2020.\n")
    _, doc = _doc(tmp_path, md)
    assert [p.text for p in doc.paragraphs if p.style.name.startswith("Heading")] == [
        "（一）立项依据与研究内容", "1．项目的立项依据", "（1）研究现状", "（2）存在问题", "2．项目的研究内容",
        "（二）研究基础与工作条件", "1．研究基础", "参考文献"]
