"""Session fixtures for the skills tests (helpers live in skillkit.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from skillkit import ARTIFACTS, SKILLS, ScriptRun, have_office, prepare_task_folder, run_script


@pytest.fixture(scope="session")
def task_folder(tmp_path_factory) -> Path:
    return prepare_task_folder(tmp_path_factory.mktemp("task"))


@pytest.fixture(scope="session")
def deck_run(task_folder) -> tuple[Path, ScriptRun]:
    out = task_folder / "deck.pptx"
    return out, run_script(SKILLS / "ppt" / "scripts" / "outline_to_deck.py", "outline.json", "deck.pptx", cwd=task_folder)


@pytest.fixture(scope="session")
def proposal_run(task_folder) -> tuple[Path, ScriptRun]:
    out = task_folder / "申报书.docx"
    return out, run_script(SKILLS / "proposal" / "scripts" / "build_proposal.py", "sections/", "--out", "申报书.docx",
                           "--limit", "30000", cwd=task_folder)


@pytest.fixture(scope="session")
def pdfs(deck_run, proposal_run, tmp_path_factory) -> dict[str, Path]:
    """Deck and proposal converted to PDF in ONE LibreOffice start; page 1 of each saved as PNG."""
    if not have_office():
        pytest.skip("LibreOffice (soffice) and pdftoppm are not installed on this machine")
    from zcbot_core.rendering import to_pdf_many

    deck, _ = deck_run
    docx, _ = proposal_run
    out_dir = tmp_path_factory.mktemp("pdf")
    deck_pdf, docx_pdf = to_pdf_many([deck, docx], out_dir)
    ARTIFACTS.mkdir(exist_ok=True)
    pngs = {}
    for label, pdf in (("deck", deck_pdf), ("proposal", docx_pdf)):
        prefix = ARTIFACTS / f"skills-{label}-page1"
        subprocess.run(["pdftoppm", "-png", "-r", "50", "-f", "1", "-l", "1", "-singlefile", str(pdf), str(prefix)],
                       check=True, capture_output=True, timeout=60)
        pngs[label] = prefix.with_suffix(".png")
    return {"deck_pdf": deck_pdf, "proposal_pdf": docx_pdf, "deck_png": pngs["deck"], "proposal_png": pngs["proposal"]}
