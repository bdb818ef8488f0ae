"""Briefs keep to their page budget, measured on a LibreOffice render (`rendering/fit.py`, used by
skills/brief/scripts/render_brief.py): a lone source line spilling onto page 2 is pulled back by
the compact layout; a brief that cannot fit is reported with its measured page count."""

from __future__ import annotations

import shutil

import pytest
from skillkit import FIXTURES, SKILLS, have_office, run_script

from zcbot_core.rendering import markdown_to_docx, page_budget, to_pdf_many
from zcbot_core.rendering.fit import SPILL_CHARS, page_text, pdf_page_count

SCRIPT = SKILLS / "brief" / "scripts" / "render_brief.py"
BRIEF = FIXTURES / "documents" / "brief-daily.md"

needs_office = pytest.mark.skipif(not have_office(), reason="LibreOffice (soffice) and poppler are not installed here")


def test_page_budget_from_frontmatter():
    assert page_budget("---\npages: 1\n---\nx") == 1
    assert page_budget("---\ntitle: t\n---\nx") == 2
    assert page_budget("---\npages: lots\n---\nx") == 2


@needs_office
def test_spill_onto_page_two_is_pulled_back(tmp_path):
    shutil.copy(BRIEF, tmp_path / "brief.md")
    # The plain layout: what the reader got before, one short tail on page 2.
    markdown_to_docx(BRIEF.read_text(encoding="utf-8"), tmp_path / "plain.docx", profile="brief")
    run = run_script(SCRIPT, "brief.md", cwd=tmp_path, timeout=240)
    plain_pdf, fitted_pdf = to_pdf_many([tmp_path / "plain.docx", tmp_path / "brief.docx"], tmp_path / "check")
    assert pdf_page_count(plain_pdf) == 2
    tail = "".join(page_text(plain_pdf, 2).split())
    assert len(tail) < SPILL_CHARS + 20  # a few lines, e.g. the source link
    assert run.returncode == 0, run.text
    assert "pages: 1 of a budget of 1 (compact layout)" in run.stdout
    assert pdf_page_count(tmp_path / "brief.pdf") == 1 == pdf_page_count(fitted_pdf)
    assert "来源" in page_text(tmp_path / "brief.pdf", 1)


@needs_office
@pytest.mark.heavy
def test_a_brief_that_cannot_fit_is_reported(tmp_path):
    items = "\n".join(f"- 第 {i} 条动态：某团队报道新的界面包覆方法，循环寿命提升，成本下降，需要持续跟踪。" for i in range(90))
    (tmp_path / "long.md").write_text(f"---\ntitle: 长日报\npages: 1\n---\n\n## 动态\n{items}\n", encoding="utf-8")
    run = run_script(SCRIPT, "long.md", "--pdf", cwd=tmp_path, timeout=240)
    assert run.returncode == 1, run.text
    pages = pdf_page_count(tmp_path / "long.pdf")
    assert pages >= 2
    assert f"the brief is {pages} pages against its budget of 1" in run.stdout
