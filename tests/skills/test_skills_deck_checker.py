"""The deck checker against its fixture corpus: every defect class caught (exactly, nothing
else), and the clean fixture decks, in every theme, without a single finding."""

from __future__ import annotations

import json
import sys

import pytest
from deck_corpus import CLEAN_OUTLINES, DEFECTS, build_defects
from skillkit import SKILLS, run_script

CHECK_DECK = SKILLS / "ppt" / "scripts" / "check_deck.py"
sys.path.insert(0, str(CHECK_DECK.parent))
import check_deck  # noqa: E402  (the skill's own module, run in-process for the corpus)

OUTLINE_TO_DECK = SKILLS / "ppt" / "scripts" / "outline_to_deck.py"


@pytest.fixture(scope="module")
def defects(tmp_path_factory):
    return build_defects(tmp_path_factory.mktemp("defects"))


def _findings(report: dict) -> set[tuple[int, str, str]]:
    return {(i["slide"], i["kind"], i["severity"]) for i in report["errors"] + report["warnings"]}


@pytest.mark.parametrize("name", sorted(DEFECTS))
def test_every_defect_class_is_caught_and_nothing_else(defects, name, capsys):
    code = check_deck.main([str(defects[name]), "--json"])
    report = json.loads(capsys.readouterr().out)
    expected = DEFECTS[name][1]
    assert _findings(report) == expected, report
    assert code == (1 if any(sev == "error" for _, _, sev in expected) else 0)


def test_finding_messages_say_what_and_where(defects, tmp_path):
    report = json.loads(run_script(CHECK_DECK, str(defects["caption_over_table"]), "--json", cwd=tmp_path).stdout)
    (overlap,) = report["errors"]
    assert "Caption" in overlap["shape"] and "as rendered" in overlap["message"]
    report = json.loads(run_script(CHECK_DECK, str(defects["white_on_white"]), "--json", cwd=tmp_path).stdout)
    assert "(#FFFFFF) on #FFFFFF" in report["errors"][0]["message"]
    report = json.loads(run_script(CHECK_DECK, str(defects["title_smaller_than_body"]), "--json", cwd=tmp_path).stdout)
    assert "20 pt" in report["warnings"][0]["message"] and "24 pt" in report["warnings"][0]["message"]


@pytest.fixture(scope="module")
def clean_builds(tmp_path_factory):
    """Each clean fixture outline in its own theme, and the Chinese report in all three."""
    folder = tmp_path_factory.mktemp("clean")
    runs = {}
    for outline in CLEAN_OUTLINES:
        runs[outline.stem] = run_script(OUTLINE_TO_DECK, str(outline), str(folder / f"{outline.stem}.pptx"), "--json", cwd=folder)
    zh = next(p for p in CLEAN_OUTLINES if p.stem == "zh_report")
    for theme in ("academic", "minimal"):
        runs[f"zh_report-{theme}"] = run_script(OUTLINE_TO_DECK, str(zh), str(folder / f"zh-{theme}.pptx"), "--theme", theme,
                                                "--json", cwd=folder)
    return runs


def test_clean_decks_have_no_false_alarms(clean_builds):
    assert len(clean_builds) >= 5
    for name, run in clean_builds.items():
        report = json.loads(run.stdout)
        assert run.returncode == 0, (name, run.text)
        assert report["ok"] is True and report["errors"] == [] and report["warnings"] == [], (name, report)


def test_adversarial_outline_is_split_and_warned_not_shrunk(tmp_path):
    outline = SKILLS.parent / "tests" / "skills" / "fixtures" / "decks" / "adversarial.json"
    run = run_script(OUTLINE_TO_DECK, str(outline), "adv.pptx", "--json", cwd=tmp_path)
    report = json.loads(run.stdout)
    assert run.returncode == 0, run.text
    kinds = sorted((w["slide"], w["kind"]) for w in report["warnings"])
    # 15 bullets -> three slides (warned); the 600-character paragraph is flagged, not shrunk away
    assert kinds == [(2, "split"), (5, "readability")], kinds


def test_outline_errors_are_pure_json(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({"theme": "neon", "slides": [{"type": "kpis", "title": "x", "kpis": []}]}))
    for args in (("bad.json", "bad.pptx"), ("missing.json", "x.pptx"), ("bad.json", "bad.ppt"),
                 ("bad.json", "x.pptx", "--theme", "neon"), ("only-one-arg.json",)):
        run = run_script(OUTLINE_TO_DECK, *args, "--json", cwd=tmp_path)
        assert run.returncode == 2
        report = json.loads(run.stdout)
        assert report["ok"] is False and report["written"] is False
    report = json.loads(run_script(OUTLINE_TO_DECK, "bad.json", "bad.pptx", "--json", cwd=tmp_path).stdout)
    assert any("neon" in p for p in report["problems"]) and any("kpis" in p for p in report["problems"])
    assert not (tmp_path / "bad.pptx").exists()
