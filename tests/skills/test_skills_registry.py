"""The skill registry, the discovery block, and the host skill tools (load/read/save/fork)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from skillkit import SKILLS

from zcbot_core.tools.skill_tools import SCHEMAS, SkillTools, register_skill_tools
from zcbot_core.workspace.skills import (
    SkillFormatError,
    SkillPaths,
    discovery_block,
    parse_skill_md,
    registry_for_user,
    validate_skill_name,
)

SKILL = "---\nname: {name}\ndescription: {desc}\n{extra}---\n\n# {name}\n\nBody of {name}. Run {{{{skill_dir}}}}/scripts/x.py\n"


def skill_md(name: str, desc: str = "does things", extra: str = "") -> str:
    return SKILL.format(name=name, desc=desc, extra=extra)


@pytest.fixture
def builtin(tmp_path) -> Path:
    """The real built-in skills plus one that asks for a model."""
    root = tmp_path / "builtin"
    shutil.copytree(SKILLS, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "fancy").mkdir()
    (root / "fancy" / "SKILL.md").write_text(skill_md("fancy", "fancy work", "model: deepseek_v4.pro\n"))
    return root


@pytest.fixture
def user_root(tmp_path) -> Path:
    root = tmp_path / "users" / "u1"
    skills = root / ".skills"
    for name, text in {
        "ppt": skill_md("ppt", "my own way to make decks"),
        "mine": skill_md("mine", "my private skill", "model: claude.opus\n"),
        "broken": "---\nname: broken\ndescription: [unclosed\n---\nbody\n",
        "noname": "---\ndescription: x\n---\n",
        "wrongname": skill_md("other"),
    }.items():
        (skills / name).mkdir(parents=True)
        (skills / name / "SKILL.md").write_text(text)
    (skills / "mine" / "references").mkdir()
    (skills / "mine" / "references" / "notes.md").write_text("notes for {{skill_dir}}")
    return root


def test_builtin_skills_are_valid():
    registry = registry_for_user(None, SkillPaths.defaults(SKILLS))
    assert registry.load_errors == []
    assert {s.name for s in registry.list()} == {"ppt", "proposal", "brief", "coding"}
    for skill in registry.list():
        assert len(skill.description) > 80  # precise enough to decide triggering
        assert "Step 1" not in skill.body  # WHY + WHAT, not step lists
    ppt = registry.get("ppt")
    assert {"scripts/outline_to_deck.py", "scripts/check_deck.py", "references/outline_format.md"} <= set(ppt.files())
    assert ppt.sandbox_path("scripts/outline_to_deck.py") == "/sandbox/skills/ppt/scripts/outline_to_deck.py"


def test_user_override_wins_and_is_marked_errors_collected(builtin, user_root):
    registry = registry_for_user(user_root, SkillPaths.defaults(builtin))
    ppt = registry.get("ppt")
    assert ppt.source == "user" and ppt.overrides is True and "my own way" in ppt.description
    assert ppt.sandbox_dir == "/workspace/.skills/ppt"
    assert registry.get("mine").overrides is False
    assert registry.get("proposal").source == "builtin"
    errors = {e.path: e.error for e in registry.load_errors}
    assert set(errors) == {".skills/broken/SKILL.md", ".skills/noname/SKILL.md", ".skills/wrongname/SKILL.md"}
    assert "not valid YAML" in errors[".skills/broken/SKILL.md"]
    assert "`name:`" in errors[".skills/noname/SKILL.md"]
    assert "does not match" in errors[".skills/wrongname/SKILL.md"]
    block = discovery_block(registry)
    assert "- ppt (the user's own version, replacing the built-in one): my own way" in block
    assert "- mine (the user's own skill): my private skill" in block
    assert "- proposal: " in block
    assert ".skills/broken/SKILL.md: the frontmatter is not valid YAML" in block


def test_symlinked_user_skill_is_refused(builtin, tmp_path):
    root = tmp_path / "u2"
    (root / ".skills").mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "SKILL.md").write_text(skill_md("evil"))
    (root / ".skills" / "evil").symlink_to(secret)
    (root / ".skills" / "sneaky").mkdir()
    (root / ".skills" / "sneaky" / "SKILL.md").symlink_to(secret / "SKILL.md")
    registry = registry_for_user(root, SkillPaths.defaults(builtin))
    assert registry.get("evil") is None and registry.get("sneaky") is None
    assert len(registry.load_errors) == 2


@pytest.mark.parametrize("name", ["../x", ".hidden", "Upper", "a/b", "", "x" * 65, "sp ace"])
def test_invalid_skill_names(name):
    with pytest.raises(SkillFormatError):
        validate_skill_name(name)


def test_parse_skill_md_errors():
    with pytest.raises(SkillFormatError, match="frontmatter"):
        parse_skill_md("# no frontmatter")
    with pytest.raises(SkillFormatError, match="description"):
        parse_skill_md("---\nname: a\n---\n")
    meta, body = parse_skill_md(skill_md("ok", "multi\n  line"))
    assert meta["name"] == "ok" and body.startswith("# ok")


def tools_for(builtin, user_root, switch=None):
    registry = registry_for_user(user_root, SkillPaths.defaults(builtin))
    return SkillTools(registry, user_root, switch), registry


async def test_load_skill_builtin_and_paths(builtin, tmp_path):
    tools, _ = tools_for(builtin, tmp_path / "fresh")
    out = await tools.load_skill({"name": "ppt"})
    assert out.ok
    assert "Folder in the sandbox (read-only): /sandbox/skills/ppt" in out.output
    assert "scripts/outline_to_deck.py  ->  /sandbox/skills/ppt/scripts/outline_to_deck.py" in out.output
    assert "python /sandbox/skills/ppt/scripts/outline_to_deck.py outline.json deck.pptx" in out.output
    assert "{{skill_dir}}" not in out.output
    missing = await tools.load_skill({"name": "nope"})
    assert not missing.ok and "available skills" in missing.output


async def test_model_switch_builtin_only(builtin, user_root):
    calls: list[str] = []

    async def switch(profile: str):
        calls.append(profile)
        return True

    tools, _ = tools_for(builtin, user_root, switch)
    out = await tools.load_skill({"name": "fancy"})
    assert out.ok and calls == ["deepseek_v4.pro"]
    assert "switched to profile `deepseek_v4.pro`" in out.output
    out = await tools.load_skill({"name": "mine"})  # user skill: model ignored
    assert out.ok and calls == ["deepseek_v4.pro"]
    assert "`model:` line is ignored" in out.output

    refused, _ = tools_for(builtin, user_root, lambda profile: False)
    out = await refused.load_skill({"name": "fancy"})
    assert out.ok and "continuing with the current model" in out.output

    def boom(profile):
        raise RuntimeError("no key")

    failing, _ = tools_for(builtin, user_root, boom)
    out = await failing.load_skill({"name": "fancy"})
    assert out.ok and "failed (no key)" in out.output


async def test_read_skill_file(builtin, user_root):
    tools, _ = tools_for(builtin, user_root)
    out = await tools.read_skill_file({"name": "proposal", "path": "references/constitution.md"})
    assert out.ok and "short_id" in out.output
    out = await tools.read_skill_file({"name": "mine", "path": "references/notes.md"})
    assert out.ok and out.output == "notes for /workspace/.skills/mine"
    for bad in ("../ppt/SKILL.md", "references/../../x", "/etc/passwd", "references/missing.md", "other/x.md"):
        out = await tools.read_skill_file({"name": "proposal", "path": bad})
        assert not out.ok, bad
    (user_root / ".skills" / "mine" / "references" / "leak.md").symlink_to("/etc/hostname")
    out = await tools.read_skill_file({"name": "mine", "path": "references/leak.md"})
    assert not out.ok and "symlink" in out.output


async def test_save_skill(builtin, tmp_path):
    root = tmp_path / "u3"
    tools, registry = tools_for(builtin, root)
    out = await tools.save_skill({"name": "notes", "content": skill_md("notes", "keeps notes")})
    assert out.ok, out.output
    saved = root / ".skills" / "notes" / "SKILL.md"
    assert saved.read_text() == skill_md("notes", "keeps notes")
    assert oct(saved.stat().st_mode & 0o777) == "0o644"
    assert registry.get("notes") is not None  # reloaded
    assert not [p for p in saved.parent.iterdir() if p.name.startswith(".")]  # no temp files left
    out = await tools.save_skill({"name": "notes", "content": "x", "path": "references/a.md"})
    assert out.ok and (root / ".skills/notes/references/a.md").read_text() == "x"
    out = await tools.save_skill({"name": "ppt", "content": skill_md("ppt", "mine now")})
    assert out.ok and "replaces the built-in `ppt`" in out.output
    assert registry.get("ppt").overrides

    for args, expect in [
        ({"name": "bad", "content": "no frontmatter"}, "frontmatter"),
        ({"name": "bad", "content": skill_md("other")}, "make them equal"),
        ({"name": "../evil", "content": skill_md("evil")}, "skill name"),
        ({"name": "Evil", "content": skill_md("evil")}, "lowercase"),
        ({"name": "notes", "content": "x", "path": "../../escape.md"}, ".."),
        ({"name": "notes", "content": "x", "path": "elsewhere.md"}, "references/"),
        ({"name": "ghost", "content": "x", "path": "references/a.md"}, "SKILL.md first"),
    ]:
        out = await tools.save_skill(args)
        assert not out.ok and expect in out.output, (args, out.output)
    assert not (root / ".skills" / "bad").exists()


async def test_save_skill_refuses_symlinks(builtin, tmp_path):
    root = tmp_path / "u4"
    (root / ".skills").mkdir(parents=True)
    target = tmp_path / "target"
    target.mkdir()
    (root / ".skills" / "linked").symlink_to(target)
    tools, _ = tools_for(builtin, root)
    out = await tools.save_skill({"name": "linked", "content": skill_md("linked")})
    assert not out.ok and "symlink" in out.output
    assert list(target.iterdir()) == []


async def test_fork_skill(builtin, tmp_path):
    root = tmp_path / "u5"
    tools, registry = tools_for(builtin, root)
    out = await tools.fork_skill({"name": "ppt"})
    assert out.ok, out.output
    dest = root / ".skills" / "ppt"
    assert (dest / "scripts" / "outline_to_deck.py").read_bytes() == (builtin / "ppt/scripts/outline_to_deck.py").read_bytes()
    assert os.access(dest / "scripts" / "check_deck.py", os.X_OK)
    assert registry.get("ppt").source == "user" and registry.get("ppt").overrides
    again = await tools.fork_skill({"name": "ppt"})
    assert not again.ok and "already exists" in again.output

    out = await tools.fork_skill({"name": "proposal", "new_name": "nsfc"})
    assert out.ok
    nsfc = registry.get("nsfc")
    assert nsfc is not None and nsfc.source == "user" and not nsfc.overrides
    assert (root / ".skills/nsfc/SKILL.md").read_text().splitlines()[1] == "name: nsfc"
    assert registry.get("proposal").source == "builtin"
    # The forked skill's paths point into the user's workspace.
    loaded = await tools.load_skill({"name": "nsfc"})
    assert "/workspace/.skills/nsfc/scripts/build_proposal.py" in loaded.output

    out = await tools.fork_skill({"name": "nope"})
    assert not out.ok
    out = await tools.fork_skill({"name": "ppt", "new_name": "Bad Name"})
    assert not out.ok and "skill name" in out.output


async def test_register_on_runner_toolbox(builtin, user_root):
    toolbox_mod = pytest.importorskip("zcbot_runner.toolbox")
    box = toolbox_mod.RunnerToolBox(executor=None, sandbox_schemas=[], user_id="u1", task_id="t", run_id="r", cwd="/workspace/t")
    switched: list[str] = []
    register_skill_tools(box, registry_for_user(user_root, SkillPaths.defaults(builtin)), user_root, switched.append)
    names = {s["function"]["name"] for s in box.schemas()}
    assert {"load_skill", "read_skill_file", "save_skill", "fork_skill"} <= names
    out = await box.execute("load_skill", {"name": "fancy"}, "c1")
    assert out.ok and switched == ["deepseek_v4.pro"]
    for schema in SCHEMAS.values():
        assert schema["function"]["parameters"]["type"] == "object"



async def test_save_and_fork_count_against_the_disk_quota(builtin, tmp_path):
    from zcbot_core.quota import Ledger, measure

    root = tmp_path / "users" / "q1"
    root.mkdir(parents=True)
    limit = measure(root) + 4 * 1024  # room for a small save, not for a copy of the ppt skill
    ledger = Ledger(tmp_path / "users", limit)
    tools = SkillTools(registry_for_user(root, SkillPaths.defaults(builtin)), root, None, ledger)
    out = await tools.save_skill({"name": "small", "content": skill_md("small")})
    assert out.ok, out.output
    used = ledger.used("q1")
    out = await tools.save_skill({"name": "big", "content": skill_md("big", extra="x: " + "y" * 8_000 + "\n")})
    assert not out.ok and "disk quota exceeded" in out.output and not (root / ".skills" / "big").exists()
    out = await tools.fork_skill({"name": "ppt"})
    assert not out.ok and "disk quota exceeded" in out.output
    assert not (root / ".skills" / "ppt").exists() and not list((root / ".skills").glob(".fork-*"))
    assert ledger.used("q1") == used  # what a failed fork counted was given back
