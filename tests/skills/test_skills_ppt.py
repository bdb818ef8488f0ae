"""The ppt skill's scripts on fixed inputs: outline -> deck (read back with python-pptx) and the
geometry checker on crafted bad decks."""

from __future__ import annotations

import json

from pptx import Presentation
from pptx.chart.chart import Chart
from pptx.enum.chart import XL_CHART_TYPE
from pptx.util import Inches, Pt
from skillkit import SKILLS, run_script

OUTLINE_TO_DECK = SKILLS / "ppt" / "scripts" / "outline_to_deck.py"
CHECK_DECK = SKILLS / "ppt" / "scripts" / "check_deck.py"


def _titles(prs) -> list[str]:
    """Titles as read, with the no-break space that keeps a number with its unit read as a space."""
    return [s.shapes.title.text_frame.text.replace("\u00a0", " ") if s.shapes.title is not None else "" for s in prs.slides]


def test_outline_json_builds_an_editable_deck(deck_run):
    path, run = deck_run
    assert run.returncode == 0, run.text
    assert "0 errors" in run.stdout
    prs = Presentation(str(path))
    assert len(prs.slides) == 8
    assert round(prs.slide_width / prs.slide_height, 2) == round(16 / 9, 2)
    assert _titles(prs) == ["2026 年第三季度经营回顾", "业绩概览", "Highlights", "Revenue by quarter", "Revenue mix",
                            "Key metrics", "Two views", "Architecture"]
    layouts = [s.slide_layout.name for s in prs.slides]
    assert layouts[:3] == ["Title Slide", "Section Header", "Title and Content"]
    assert layouts[6] == "Two Content"

    # Bullets live in the body placeholder, with levels.
    body = next(p for p in prs.slides[2].placeholders if p.placeholder_format.idx == 1)
    paras = body.text_frame.paragraphs
    assert paras[0].runs[0].text.startswith("Revenue grew 18%")
    assert [p.level for p in paras][:3] == [0, 1, 1]

    # Native charts with their data inside the file.
    charts: list[Chart] = [sh.chart for s in prs.slides for sh in s.shapes if sh.has_chart]
    assert len(charts) == 2
    column, pie = charts
    assert column.chart_type == XL_CHART_TYPE.COLUMN_CLUSTERED
    assert list(column.plots[0].categories) == ["Q4", "Q1", "Q2", "Q3"]
    assert [s.name for s in column.series] == ["2025", "2026"]
    assert list(column.series[1].values) == [12, 13.5, 14, 15.4]
    assert pie.chart_type == XL_CHART_TYPE.PIE

    # A real table, a picture, speaker notes.
    table = next(sh.table for sh in prs.slides[5].shapes if sh.has_table)
    assert table.cell(0, 0).text == "Metric" and table.cell(2, 2).text == "63%"
    assert any(sh.shape_type == 13 for sh in prs.slides[7].shapes)  # MSO_SHAPE_TYPE.PICTURE
    assert prs.slides[0].notes_slide.notes_text_frame.text == "Welcome everyone."
    assert prs.slides[2].notes_slide.notes_text_frame.text == "Stress the enterprise growth."
    assert prs.slides[3].notes_slide.notes_text_frame.text == "Numbers in USD millions."


def test_markdown_outline(task_folder):
    run = run_script(OUTLINE_TO_DECK, "outline.md", "md-deck.pptx", cwd=task_folder)
    assert run.returncode == 0, run.text
    prs = Presentation(str(task_folder / "md-deck.pptx"))
    assert _titles(prs) == ["项目中期汇报", "研究进展", "主要成果", "性能对比", "月度进度"]
    assert prs.slides[2].notes_slide.notes_text_frame.text == "强调吸附量超过了任务书指标。"
    assert any(sh.has_table for sh in prs.slides[3].shapes)
    chart = next(sh.chart for sh in prs.slides[4].shapes if sh.has_chart)
    assert chart.chart_type == XL_CHART_TYPE.LINE_MARKERS
    assert prs.slides[4].notes_slide.notes_text_frame.text == "进度按计划推进。"


def test_invalid_outline_writes_nothing_and_says_where(task_folder):
    bad = {"slides": [{"title": "Chart", "chart": {"type": "column", "categories": ["a", "b"],
                                                   "series": [{"name": "s", "values": [1]}]}},
                      {"title": "Pic", "image": "missing.png"}]}
    (task_folder / "bad.json").write_text(json.dumps(bad))
    run = run_script(OUTLINE_TO_DECK, "bad.json", "bad.pptx", cwd=task_folder)
    assert run.returncode == 2
    assert "slide 1" in run.stderr and "needs 2 values" in run.stderr
    assert "slide 2" in run.stderr and "missing.png" in run.stderr
    assert not (task_folder / "bad.pptx").exists()
    for banned in ("pip install", "apt-get", "brew "):
        assert banned not in run.text


def test_crowded_slides_are_split_or_reported_never_silently_shrunk(task_folder):
    long = "This bullet is far too long for any slide and keeps going with more words to fill the box " * 3
    outline = {"slides": [{"title": "Crowded", "bullets": [long] * 8}, {"title": "Fine", "bullets": ["short"]}]}
    (task_folder / "crowded.json").write_text(json.dumps(outline))
    run = run_script(OUTLINE_TO_DECK, "crowded.json", "crowded.pptx", "--json", cwd=task_folder)
    report = json.loads(run.stdout)  # --json: nothing but the JSON document
    assert run.returncode == 0, run.text
    kinds = [(w["kind"], w["slide"]) for w in report["warnings"]]
    assert ("split", 1) in kinds and ("readability", 1) in kinds, kinds
    prs = Presentation(str(task_folder / "crowded.pptx"))
    assert _titles(prs) == ["Crowded", "Crowded (cont.)", "Fine"]
    sizes = {r.font.size.pt for s in list(prs.slides)[:2] for sh in s.placeholders if sh.placeholder_format.idx == 1
             for p in sh.text_frame.paragraphs for r in p.runs}
    assert min(sizes) >= 16  # the floor: never shrunk below

    outline = {"slides": [{"title": "Wall of text", "bullets": [long * 12]}]}
    (task_folder / "wall.json").write_text(json.dumps(outline))
    run = run_script(OUTLINE_TO_DECK, "wall.json", "wall.pptx", cwd=task_folder)
    assert run.returncode == 3, run.text
    assert "[overflow]" in run.stdout and "slide 1" in run.stdout
    assert (task_folder / "wall.pptx").is_file()


def _crafted(task_folder):
    from pptx import Presentation as New

    prs = New()
    prs.slide_width = Inches(13.333)
    slide = prs.slides.add_slide(prs.slide_layouts[6])
    box = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(3), Inches(1))
    box.text_frame.word_wrap = True
    box.text_frame._txBody.bodyPr.remove(box.text_frame._txBody.bodyPr[0])  # no auto-grow: a fixed box
    box.text_frame.text = "A paragraph that cannot fit in a three by one inch box at twenty-four points. " * 3
    for run in box.text_frame.paragraphs[0].runs:
        run.font.size = Pt(24)
    slide.shapes.add_textbox(Inches(12.5), Inches(6), Inches(2), Inches(1)).text_frame.text = "off the edge"
    slide.shapes.add_textbox(Inches(1.2), Inches(1.05), Inches(2.5), Inches(0.6)).text_frame.text = "on top"
    path = task_folder / "crafted.pptx"
    prs.save(str(path))
    return path


def test_checker_flags_crafted_overflow_overlap_and_off_slide(task_folder):
    _crafted(task_folder)
    run = run_script(CHECK_DECK, "crafted.pptx", "--json", cwd=task_folder)
    assert run.returncode == 1
    report = json.loads(run.stdout)
    kinds = {e["kind"] for e in report["errors"]}
    assert {"overflow", "overlap", "off-slide"} <= kinds
    overflow = next(e for e in report["errors"] if e["kind"] == "overflow")
    assert overflow["slide"] == 1 and "TextBox 1" in overflow["shape"]


def test_checker_is_clean_on_generated_deck_and_flags_drift(deck_run, task_folder):
    path, _ = deck_run
    run = run_script(CHECK_DECK, str(path), "--json", cwd=task_folder)
    assert run.returncode == 0, run.text
    assert json.loads(run.stdout)["errors"] == []

    prs = Presentation(str(path))
    prs.slides[2].shapes.title.left += Inches(0.15)  # nudge one title off the grid
    prs.save(str(task_folder / "drift.pptx"))
    run = run_script(CHECK_DECK, "drift.pptx", "--json", cwd=task_folder)
    warnings = json.loads(run.stdout)["warnings"]
    assert any(w["kind"] == "grid-drift" and w["slide"] == 3 for w in warnings), warnings


def test_checker_reports_unreadable_file(task_folder):
    (task_folder / "junk.pptx").write_bytes(b"not a zip")
    run = run_script(CHECK_DECK, "junk.pptx", cwd=task_folder)
    assert run.returncode == 2 and "cannot read" in run.stderr
    for args in (("junk.pptx", "--json"), ("--json",), ("a.pptx", "b.pptx", "--json")):
        run = run_script(CHECK_DECK, *args, cwd=task_folder)
        assert run.returncode == 2
        report = json.loads(run.stdout)  # pure JSON on the error paths too
        assert report["ok"] is False and report["error"]


def test_template_layouts_are_used(deck_run, task_folder):
    deck, _ = deck_run
    run = run_script(OUTLINE_TO_DECK, "outline.md", "templated.pptx", "--template", str(deck), cwd=task_folder)
    assert run.returncode == 0, run.text
    prs = Presentation(str(task_folder / "templated.pptx"))
    assert len(prs.slides) == 5  # the template's own slides are dropped
    assert prs.slide_width == Presentation(str(deck)).slide_width
