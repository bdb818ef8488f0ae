"""Decks on users' branded templates, checked right: the clean fixture outlines built on a corpus
of templates (dark covers with white titles, a colour-map override, a light cover, moved
placeholders with an inverted level-2 size, 4:3) without a single false finding, while the
checker still catches what is really wrong on them (dark text on the dark cover, a level-2 item
larger than level 1, a title nudged off its layout's position)."""

from __future__ import annotations

import sys

import pytest
from deck_corpus import CLEAN_OUTLINES
from deck_templates import TEMPLATES, build_templates
from pptx import Presentation
from pptx.dml.color import RGBColor
from pptx.enum.shapes import PP_PLACEHOLDER
from pptx.util import Inches
from skillkit import SKILLS

SCRIPTS = SKILLS / "ppt" / "scripts"
sys.path.insert(0, str(SCRIPTS))
import check_deck  # noqa: E402
import deck_inherit  # noqa: E402
import deck_rules  # noqa: E402
import outline_to_deck  # noqa: E402
from deck_outline import read_outline  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every clean outline on every template: {(template, outline): (deck path, report)}."""
    folder = tmp_path_factory.mktemp("templates")
    templates = build_templates(folder / "tpl")
    out = {}
    for name, tpl in templates.items():
        for outline in CLEAN_OUTLINES:
            deck = folder / f"{name}-{outline.stem}.pptx"
            outline_to_deck.build(read_outline(outline), deck, outline.parent, template=tpl)
            out[(name, outline.stem)] = (deck, check_deck.check(deck))
    return {"templates": templates, "decks": out}


def test_clean_decks_on_every_template_have_no_false_findings(built):
    assert len(built["decks"]) == len(TEMPLATES) * len(CLEAN_OUTLINES) >= 15
    findings = {key: [(i["slide"], i["kind"], i["message"]) for i in rep["errors"] + rep["warnings"]]
                for key, (_, rep) in built["decks"].items()}
    assert all(not f for f in findings.values()), {k: v for k, v in findings.items() if v}


def _title_colour(path, index: int) -> str:
    prs = Presentation(str(path))
    theme = deck_rules.ThemeInfo(prs)
    slide = prs.slides[index]
    return deck_rules.text_colour(slide.shapes.title, theme, deck_inherit.colour_map(slide))


def test_colours_resolve_through_layout_master_and_colour_map(built):
    decks = built["decks"]
    # white through the layout placeholder's list style, and through the cover's colour map
    assert _title_colour(decks[("dark_cover", "zh_report")][0], 0) == "FFFFFF"
    assert _title_colour(decks[("dark_cover", "zh_report")][0], 2) == "FFFFFF"  # the section layout
    assert _title_colour(decks[("clrmap_dark", "zh_report")][0], 0) == "FFFFFF"
    # content slides keep the master's title colour; the light template's brand red
    assert _title_colour(decks[("dark_cover", "zh_report")][0], 4) == "1B2A4A"
    assert _title_colour(decks[("light_cover", "en_review")][0], 1) == "B4262D"
    prs = Presentation(str(decks[("clrmap_dark", "zh_report")][0]))
    cover = prs.slides[0]
    assert deck_rules.background(cover, deck_rules.ThemeInfo(prs)) == "000000"  # bg1 mapped to dk1


def test_dark_text_on_the_dark_cover_is_still_an_error(built, tmp_path):
    deck, _ = built["decks"][("dark_cover", "zh_report")]
    prs = Presentation(str(deck))
    for run in prs.slides[0].shapes.title.text_frame.paragraphs[0].runs:
        run.font.color.rgb = RGBColor.from_string("1B2A4A")  # navy on the navy cover
    prs.save(str(tmp_path / "dark.pptx"))
    report = check_deck.check(tmp_path / "dark.pptx")
    assert [(e["slide"], e["kind"]) for e in report["errors"]] == [(1, "low-contrast")], report


def test_sub_levels_never_larger_than_their_level(built, tmp_path):
    """The template sets level 1 to 20 pt and leaves level 2 at 28 pt: the builder writes sizes
    that keep the order; a hand-made slide that inherits them is reported."""
    deck, _ = built["decks"][("moved_placeholders", "zh_report")]
    prs = Presentation(str(deck))
    body = next(sh for sh in prs.slides[4].placeholders if sh.placeholder_format.type in (PP_PLACEHOLDER.BODY,
                                                                                        PP_PLACEHOLDER.OBJECT))
    sizes = {p.level: max(r.font.size.pt for r in p.runs) for p in body.text_frame.paragraphs}
    assert sizes[1] < sizes[0] <= 20, sizes

    tpl = Presentation(str(built["templates"]["moved_placeholders"]))
    slide = tpl.slides.add_slide(next(lay for lay in tpl.slide_layouts if lay._element.get("type") == "obj"))
    slide.shapes.title.text = "Inherited sizes"
    tf = slide.placeholders[1].text_frame
    tf.text = "Level one"
    p = tf.add_paragraph()
    p.text, p.level = "Level two, from the untouched master style", 1
    tpl.save(str(tmp_path / "inverted.pptx"))
    report = check_deck.check(tmp_path / "inverted.pptx")
    found = [(w["slide"], w["kind"]) for w in report["warnings"]]
    assert found == [(1, "level-inversion"), (1, "empty-area")], report  # (two short lines: truly half empty)
    assert "28 pt under a 20 pt" in report["warnings"][0]["message"]


def test_grid_drift_names_the_outlier_not_the_template(built, tmp_path):
    """On the moved-placeholder template the comparison slide uses the template's own two-column
    layout (another title position: no warning); one nudged title is the only finding."""
    deck, report = built["decks"][("moved_placeholders", "zh_report")]
    assert not report["warnings"]
    prs = Presentation(str(deck))
    prs.slides[6].shapes.title.left += Inches(0.15)
    prs.save(str(tmp_path / "nudged.pptx"))
    report = check_deck.check(tmp_path / "nudged.pptx")
    assert [(w["slide"], w["kind"]) for w in report["warnings"]] == [(7, "grid-drift")], report
    assert "its layout" in report["warnings"][0]["message"]


def test_four_three_template_keeps_its_size(built):
    deck, report = built["decks"][("four_three", "academic_defense")]
    prs = Presentation(str(deck))
    assert (prs.slide_width, prs.slide_height) == (Inches(10), Inches(7.5))
    assert report["errors"] == []
