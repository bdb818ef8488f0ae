"""The skills' scripts run through a real bwrap sandbox of the executor, the way the agent runs them.

The sandbox mounts are the ones this package needs from the executor (see skills.py):
  <repo>/skills                                  -> /sandbox/skills     (read-only)
  <repo>/libs/zcbot_core/zcbot_core/rendering    -> /sandbox/rendering  (read-only)
  /etc/libreoffice                               -> /etc/libreoffice    (read-only; LibreOffice's
                                                    registry, without it soffice aborts at start)
The executor's bwrap backend adds them itself (`policy.platform_mounts`).
Skipped when the executor package or bubblewrap is not usable on this machine.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
from docx import Document
from pptx import Presentation
from skillkit import RENDERING, SKILLS, have_office, prepare_task_folder

bwrap_mod = pytest.importorskip("zcbot_executor.sandbox.bwrap")
config_mod = pytest.importorskip("zcbot_executor.config")

def _read_only_mounts(config: object, tmp_path: Path) -> set[tuple[str, str]]:
    """(host, sandbox) of every read-only bind in a bwrap sandbox's command line for `config`."""
    backend = bwrap_mod.BwrapBackend(config)
    if not backend.bwrap:
        pytest.skip("bubblewrap is not available on this machine")
    backend.stage = Path(tempfile.mkdtemp())
    (backend.stage / "etc").mkdir()
    argv = backend.argv(tmp_path, ["true"])
    return {(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == "--ro-bind"}


def test_executor_mounts_skills_and_rendering_read_only(tmp_path: Path) -> None:
    config = config_mod.ExecutorConfig.defaults(host="test", storage_root=tmp_path / "users", state_dir=tmp_path / "state")
    pairs = _read_only_mounts(config, tmp_path)
    assert (str(SKILLS), "/sandbox/skills") in pairs and (str(RENDERING), "/sandbox/rendering") in pairs



def test_mounts_and_registry_follow_the_same_settings(tmp_path: Path) -> None:
    """The executor mounts the skills where the runner's registry tells the model they are: both
    from the service's settings (ZCBOT_SKILLS_DIR, ZCBOT_SANDBOX_*_DIR), never from the process's."""
    from zcbot_core.platform.config import Settings
    from zcbot_core.workspace.skills import SkillPaths, registry_for_user

    settings = Settings(**{"ZCBOT_HOME": str(tmp_path), "ZCBOT_SKILLS_DIR": str(SKILLS),
                           "ZCBOT_SANDBOX_SKILLS_DIR": "/opt/skills/", "ZCBOT_SANDBOX_RENDERING_DIR": "/opt/render"})
    config = config_mod.ExecutorConfig.from_settings(settings, state_dir=tmp_path / "state")
    pairs = _read_only_mounts(config, tmp_path)
    assert (str(SKILLS), "/opt/skills") in pairs and (str(RENDERING), "/opt/render") in pairs
    registry = registry_for_user(None, SkillPaths.from_settings(settings))
    assert registry.get("ppt").sandbox_dir == "/opt/skills/ppt" and registry.rendering_dir == "/opt/render"


@pytest.fixture
async def sandbox():
    if not bwrap_mod.bwrap_available():
        pytest.skip("bubblewrap is not available on this machine")
    base = Path(tempfile.mkdtemp(prefix="zcbot-skills-sbx-"))
    os.chmod(base, 0o755)
    user_root = base / "users" / "u1"
    prepare_task_folder(user_root / "task")
    config = config_mod.ExecutorConfig.defaults(host="test", storage_root=base / "users", state_dir=base / "state")
    backend = bwrap_mod.BwrapBackend(config)
    try:
        await backend.start()
        box = await backend.open("u1", user_root)
    except Exception as exc:  # noqa: BLE001 - the sandbox itself cannot start here
        pytest.skip(f"the bwrap sandbox cannot start on this machine: {exc}")

    async def sh(command: str, timeout: float = 120.0):
        return await box.call(uuid.uuid4().hex, "shell", {"command": command}, "/workspace/task", timeout)

    try:
        yield sh, user_root / "task"
    finally:
        await box.close()
        shutil.rmtree(base, ignore_errors=True)


async def test_skill_scripts_in_real_sandbox(sandbox):
    sh, folder = sandbox
    r = await sh("python /sandbox/skills/ppt/scripts/outline_to_deck.py outline.json deck.pptx")
    assert r.ok, (r.output, r.error)
    assert "0 errors" in r.output
    prs = Presentation(str(folder / "deck.pptx"))
    assert len(prs.slides) == 8 and any(sh.has_chart for s in prs.slides for sh in s.shapes)

    r = await sh("python /sandbox/skills/proposal/scripts/build_proposal.py sections/ --out p.docx")
    assert r.ok, (r.output, r.error)
    doc = Document(str(folder / "p.docx"))
    assert len(doc.tables) == 1 and doc.paragraphs[0].style.name == "Title"

    # The skills and the rendering layer are read-only inside the sandbox.
    r = await sh("touch /sandbox/skills/ppt/x 2>&1; touch /sandbox/rendering/x 2>&1; echo done")
    assert r.output.count("Read-only file system") == 2, r.output
    # The rendering CLI through its mount path.
    r = await sh("python /sandbox/rendering/render.py --to docx brief.md brief-cli.docx --profile brief")
    assert r.ok and (folder / "brief-cli.docx").is_file(), (r.output, r.error)


@pytest.mark.skipif(not have_office(), reason="LibreOffice is not installed on this machine")
async def test_brief_pdf_in_real_sandbox(sandbox):
    sh, folder = sandbox
    r = await sh("python /sandbox/skills/brief/scripts/render_brief.py brief.md --docx --pdf")
    assert r.ok, (r.output, r.error)
    assert (folder / "brief.pdf").read_bytes()[:5] == b"%PDF-"
