"""The checker's estimates against LibreOffice's layout, and the contact-sheet command.

LibreOffice lays the decks out (one start for all of them: `--convert-to pptx` writes back the
heights it computed for auto-growing text boxes and for tables), and the checker's estimates
must be within 10 % of them. Skipped, with the reason, where LibreOffice is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deck_corpus import build_defects, measurement_deck
from pptx import Presentation
from skillkit import FIXTURES, PY, SKILLS, have_office, run_script

SCRIPTS = SKILLS / "ppt" / "scripts"
sys.path.insert(0, str(SCRIPTS))
import check_deck  # noqa: E402
import deck_rules  # noqa: E402

pytestmark = pytest.mark.skipif(not have_office(), reason="LibreOffice (soffice) and pdftoppm are not installed: "
                                "the render comparison needs them (apt-get install libreoffice-impress poppler-utils)")


def _lay_out(files: list[Path], out: Path) -> dict[str, Path]:
    """LibreOffice opens each deck and saves it again as .pptx, with the heights it laid out."""
    from zcbot_core.rendering import find_soffice

    profile = out / "profile"
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")} | {"HOME": str(out)}
    subprocess.run([find_soffice(), f"-env:UserInstallation={profile.as_uri()}", "--headless", "--norestore",
                    "--convert-to", "pptx:Impress MS PowerPoint 2007 XML", "--outdir", str(out / "laid"), *map(str, files)],
                   check=True, capture_output=True, timeout=300, env=env)
    return {f.stem: out / "laid" / f.name for f in files}


@pytest.fixture(scope="module")
def laid_out(tmp_path_factory):
    folder = tmp_path_factory.mktemp("render")
    cases = measurement_deck(folder / "measure.pptx")
    caption = build_defects(folder)["caption_over_table"]
    run = run_script(SCRIPTS / "outline_to_deck.py", str(FIXTURES / "decks" / "zh_report.json"), "zh.pptx", cwd=folder)
    assert run.returncode == 0, run.text
    adv = run_script(SCRIPTS / "outline_to_deck.py", str(FIXTURES / "decks" / "adversarial.json"), "adv.pptx", cwd=folder)
    assert adv.returncode == 0, adv.text
    files = [folder / "measure.pptx", caption, folder / "zh.pptx", folder / "adv.pptx"]
    return {"cases": cases, "src": {f.stem: f for f in files}, "laid": _lay_out(files, folder)}


def _estimate(prs, shape) -> int:
    theme = deck_rules.ThemeInfo(prs)
    master = check_deck._master_sizes(prs)
    if shape.has_table:
        return check_deck.table_height(shape.table, master, theme)
    paras = check_deck.paragraphs_of(shape, master, theme)
    left, right, top, bottom = check_deck._insets(shape.text_frame)
    return check_deck.text_height(paras, int(shape.width) - left - right) + top + bottom


def _shapes(path: Path) -> tuple[object, dict]:
    prs = Presentation(str(path))
    return prs, {sh.name: sh for slide in prs.slides for sh in slide.shapes}


def test_estimated_heights_within_ten_percent_of_libreoffice(laid_out):
    prs, mine = _shapes(laid_out["src"]["measure"])
    _, theirs = _shapes(laid_out["laid"]["measure"])
    ratios = {}
    for case in laid_out["cases"]:
        estimate = _estimate(prs, mine[case["name"]])
        rendered = int(theirs[case["name"]].height)
        ratios[case["name"]] = round(estimate / rendered, 3)
    print("estimate / LibreOffice height:", ratios)
    assert all(0.9 <= r <= 1.1 for r in ratios.values()), ratios


def test_generated_tables_match_their_rendered_height(laid_out):
    """Built tables are sized by the same measure: LibreOffice does not grow them (within 10 %),
    also the adversarial one with long Chinese cells and formulas."""
    for deck in ("zh", "adv"):
        src = Presentation(str(laid_out["src"][deck]))
        laid = Presentation(str(laid_out["laid"][deck]))
        pairs = [(a, b) for s1, s2 in zip(src.slides, laid.slides) for a, b in zip(s1.shapes, s2.shapes) if a.has_table]
        assert pairs
        for a, b in pairs:
            ratio = _estimate(src, a) / int(b.height)
            assert 0.9 <= ratio <= 1.1, (deck, a.name, ratio)
            assert int(b.top) + int(b.height) < int(src.slide_height) * check_deck.FOOTER_BAND


def test_caption_over_table_is_a_real_defect_in_the_render(laid_out):
    """What the checker reports is what LibreOffice shows: the grown table reaches the caption."""
    _, laid = _shapes(laid_out["laid"]["defect-caption_over_table"])
    table = next(sh for sh in laid.values() if sh.has_table)
    caption = laid["Caption"]
    assert int(table.top) + int(table.height) > int(caption.top)
    report = check_deck.check(laid_out["src"]["defect-caption_over_table"])
    assert [e["kind"] for e in report["errors"]] == ["overlap"]


def test_contact_sheet_command_renders_pngs(laid_out, tmp_path):
    run = subprocess.run([PY, "-m", "zcbot_core.rendering.contact_sheet", str(laid_out["src"]["zh"]), "--out", str(tmp_path),
                          "--pages", "4", "--dpi", "30"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout)
    (sheet,) = result["sheets"]
    from PIL import Image

    with Image.open(sheet) as img:
        assert img.width > 4 * 300 and img.height > 200  # four 13.33 in pages side by side at 30 dpi
