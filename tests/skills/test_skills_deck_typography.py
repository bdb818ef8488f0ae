"""CJK typography in decks: kinsoku line breaking in the measure, numbers kept with their unit,
short labels never set one character per line, a lone last character avoided by the builder and
reported by the checker — and all of it compared with what LibreOffice renders (pdftotext lines
of the rendered PDF: the lines LibreOffice really broke)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from deck_corpus import ORPHAN_TEXT, build_defects
from pptx import Presentation
from pptx.util import Inches, Pt
from skillkit import FIXTURES, SKILLS, have_office

SCRIPTS = SKILLS / "ppt" / "scripts"
sys.path.insert(0, str(SCRIPTS))
import check_deck  # noqa: E402
import deck_measure as dm  # noqa: E402
import outline_to_deck  # noqa: E402
from deck_outline import read_outline  # noqa: E402

EM = 24 * dm.EMU_PER_PT


def test_closing_punctuation_never_starts_a_line():
    lines = dm.wrap("完成任务目标的九成，", int(8.6 * EM), 24)
    assert lines == ["完成任务目标的九", "成，"]  # the comma takes the character before it along
    assert not any(line[0] in dm.NO_START for line in dm.wrap("（注）数据来源：财务部。另见附表，", int(5.5 * EM), 24))
    assert all(not line.endswith("（") for line in dm.wrap("收入结构（企业客户）占比", int(4.5 * EM), 24))


def test_numbers_keep_their_unit():
    assert dm.glue("增长到原来的 3.8 倍") == "增长到原来的 3.8\u00a0倍"
    assert dm.glue("增长到原来的3.8倍") == "增长到原来的3.8\u2060倍"
    assert dm.glue("2026 年 10 月") == "2026\u00a0年 10\u00a0月"
    # formulas, model names and Latin words stay as written
    assert dm.glue("Li6PS5Cl 电解质，GPT4 模型") == "Li6PS5Cl 电解质，GPT4 模型"
    for width in range(6, 12):
        lines = dm.wrap(dm.glue("收入增长达到原来的3.8倍"), int(width * EM), 24)
        assert "倍" not in [dm.core(line) for line in lines], (width, lines)


def test_short_labels_get_their_width():
    rows = [["项目", "背景", "方法", "说明"], ["甲", "乙", "丙", "采用原子层沉积在正极颗粒表面包覆铌酸锂层以抑制界面副反应" * 3]]
    widths = dm.column_widths(rows, int(8 * dm.EMU_PER_IN), 16)
    for col in range(3):
        assert dm.wrap(rows[0][col], widths[col] - 2 * 91440, 16) == [rows[0][col]]


def test_builder_pushes_a_lone_last_character_down(tmp_path):
    outline = {"slides": [{"title": "孤字", "bullets": [ORPHAN_TEXT * 4 + "好"]}]}
    deck = tmp_path / "orphan.pptx"
    outline_to_deck.build(outline, deck, tmp_path)
    report = check_deck.check(deck)
    assert not [i for i in report["errors"] + report["warnings"] if i["kind"] in ("orphan", "per-char-wrap")], report


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """The defect decks, a clean deck and number/unit boxes rendered by LibreOffice to PDF."""
    if not have_office():
        pytest.skip("LibreOffice (soffice) and pdftoppm are not installed: the render comparison needs them")
    from zcbot_core.rendering import to_pdf_many

    folder = tmp_path_factory.mktemp("typo")
    defects = build_defects(folder)
    clean = folder / "zh.pptx"
    outline_to_deck.build(read_outline(FIXTURES / "decks" / "zh_report.json"), clean, FIXTURES / "decks")
    prs = Presentation()
    prs.slide_width = Inches(13.333)
    for text in ("增长达到原来的3.8倍", dm.glue("增长达到原来的3.8倍")):
        slide = prs.slides.add_slide(prs.slide_layouts[6])
        box = slide.shapes.add_textbox(Inches(0.5), Inches(0.5), Inches(3.2), Inches(1.5))
        box.text_frame.word_wrap = True
        run = box.text_frame.paragraphs[0].add_run()
        run.text = text
        run.font.size = Pt(24)
    prs.save(str(folder / "units.pptx"))
    sources = {"per_char": defects["per_char_wrap"], "orphan": defects["orphan_char"], "clean": clean,
               "units": folder / "units.pptx"}
    pdfs = dict(zip(sources, to_pdf_many(list(sources.values()), folder / "pdf")))
    return {"src": sources, "pdf": pdfs}


def _lines(pdf, page: int | None = None) -> list[str]:
    args = ["pdftotext", *(["-f", str(page), "-l", str(page)] if page else []), str(pdf), "-"]
    text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [dm.core(line) for line in text.splitlines() if dm.core(line)]


def test_checker_findings_are_what_libreoffice_renders(rendered):
    lines = _lines(rendered["pdf"]["per_char"])
    assert lines[lines.index("项"):lines.index("项") + 2] == ["项", "目"]  # one character per line, as reported
    assert [e["kind"] for e in check_deck.check(rendered["src"]["per_char"])["errors"]] == ["per-char-wrap"]
    lines = _lines(rendered["pdf"]["orphan"])
    assert lines[-1] == ORPHAN_TEXT[-1] and "".join(lines).endswith(ORPHAN_TEXT)
    assert [w["kind"] for w in check_deck.check(rendered["src"]["orphan"])["warnings"]] == ["orphan"]


def test_clean_deck_renders_without_lone_characters(rendered):
    """No line of the rendered Chinese report is one lone CJK character (the checker agrees)."""
    lone = [line for line in _lines(rendered["pdf"]["clean"]) if len(line) == 1 and dm.is_wide(line)]
    assert lone == []
    report = check_deck.check(rendered["src"]["clean"])
    assert not [i for i in report["errors"] + report["warnings"] if i["kind"] in ("orphan", "per-char-wrap")]


def test_glued_unit_stays_on_its_line_in_the_render(rendered):
    plain, glued = _lines(rendered["pdf"]["units"], 1), _lines(rendered["pdf"]["units"], 2)
    assert plain[-1] == "倍"  # what the issue saw: the unit alone on the next line
    assert glued[-1] != "倍" and glued[-1].endswith("倍")
