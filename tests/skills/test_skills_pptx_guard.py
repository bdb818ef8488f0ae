"""The pptx guard hook (seed 003 §8.9): picture-only decks are rejected, real decks pass."""

from __future__ import annotations

import os
import shutil
import time

import pytest
from pptx import Presentation
from pptx.util import Inches
from skillkit import write_png

from zcbot_core.tools.pptx_guard import inspect_deck, make_pptx_guard_hook
from zcbot_core.tools.results import ToolOutcome


def picture_deck(path, slides: int = 3, text_on: int | None = None, full: bool = True):
    img = write_png(path.parent / "slide.png", 160, 90)
    prs = Presentation()
    prs.slide_width, prs.slide_height = Inches(13.333), Inches(7.5)
    for i in range(slides):
        slide = prs.slides.add_slide(prs.slide_layouts[6])
        if full:
            slide.shapes.add_picture(str(img), 0, 0, prs.slide_width, prs.slide_height)
        else:
            slide.shapes.add_picture(str(img), Inches(1), Inches(1), Inches(4), Inches(2))
        if text_on == i:
            slide.shapes.add_textbox(Inches(1), Inches(1), Inches(3), Inches(1)).text_frame.text = "Real text"
    prs.save(str(path))
    return path


async def _run(hook, name="shell", started=None, output="done"):
    return await hook(name, {"command": "python make.py"}, ToolOutcome.make(True, output), started or time.time() - 5)


async def test_rejects_picture_only_deck(tmp_path):
    (tmp_path / "out").mkdir()
    picture_deck(tmp_path / "out" / "slides.pptx")
    hook = make_pptx_guard_hook(tmp_path)
    outcome = await _run(hook)
    assert outcome.ok is False
    assert "ERROR: out/slides.pptx was rejected" in outcome.output
    assert outcome.output.startswith("done")  # the tool's own output is kept
    assert "ERROR" in outcome.preview
    for banned in ("pip install", "svg", "render each", "screenshot"):
        assert banned not in outcome.output.lower()


async def test_allows_real_deck(deck_run, tmp_path):
    deck, run = deck_run
    assert run.returncode == 0
    shutil.copy(deck, tmp_path / "deck.pptx")
    outcome = await _run(make_pptx_guard_hook(tmp_path), name="run_python")
    assert outcome.ok is True and outcome.output == "done"


@pytest.mark.parametrize("kwargs", [{"slides": 1}, {"text_on": 1}, {"full": False}])
async def test_conservative_rule_allows(tmp_path, kwargs):
    picture_deck(tmp_path / "d.pptx", **kwargs)
    assert inspect_deck(tmp_path / "d.pptx").reject is False
    outcome = await _run(make_pptx_guard_hook(tmp_path))
    assert outcome.ok is True


async def test_only_new_decks_after_shell_or_run_python(tmp_path):
    path = picture_deck(tmp_path / "old.pptx")
    old = time.time() - 3600
    os.utime(path, (old, old))
    hook = make_pptx_guard_hook(tmp_path)
    assert (await _run(hook, started=time.time())).ok is True  # written before the call started
    os.utime(path, None)
    assert (await _run(hook, name="read")).ok is True  # other tools are not guarded
    assert (await _run(hook, name="shell")).ok is False


async def test_unparseable_and_symlinked_decks_are_allowed(tmp_path):
    (tmp_path / "broken.pptx").write_bytes(b"PK\x03\x04 not really a zip")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    picture_deck(outside / "bad.pptx")
    (tmp_path / "link.pptx").symlink_to(outside / "bad.pptx")
    outcome = await _run(make_pptx_guard_hook(tmp_path))
    assert outcome.ok is True


async def test_hook_plugs_into_runner_toolbox(tmp_path):
    toolbox_mod = pytest.importorskip("zcbot_runner.toolbox")
    from zcbot_core.tools.skill_tools import SkillHostTool

    box = toolbox_mod.RunnerToolBox(executor=None, sandbox_schemas=[], user_id="u", task_id="t", run_id="r", cwd="/workspace/t")

    async def fake_shell(args):
        picture_deck(tmp_path / "made.pptx")
        return ToolOutcome.make(True, "made a deck")

    schema = {"type": "function", "function": {"name": "shell", "parameters": {"type": "object", "properties": {}}}}
    box.add_host_tool(SkillHostTool(schema, fake_shell))
    box.after_hooks.append(make_pptx_guard_hook(tmp_path))
    outcome = await box.execute("shell", {}, "call-1")
    assert outcome.ok is False and "made.pptx was rejected" in outcome.output
