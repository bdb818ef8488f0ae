"""The rendering layer as a library, as `python -m`, as a script from a read-only mount, and its
self-containment (no imports from the rest of zcbot_core)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys

import pytest
from docx import Document
from skillkit import RENDERING, SKILLS

from zcbot_core.rendering import RenderError, convert_to_pdf, markdown_to_docx, parse_markdown
from zcbot_core.rendering.mdparse import Heading, ListBlock, Table, parse_inline

MD = """---
title: Test
---

## 一、已编号

Para with **bold** and H~2~O and [link](https://example.org).

- a
  - b
1. one

表: 标题
| x | y |
|---|--:|
| 1 | 2 |
"""


def test_parser_blocks_and_inline():
    doc = parse_markdown(MD)
    assert doc.meta["title"] == "Test"
    kinds = [type(b) for b in doc.blocks]
    assert kinds[0] is Heading and ListBlock in kinds and Table in kinds
    table = next(b for b in doc.blocks if isinstance(b, Table))
    assert table.caption == "标题" and table.align == ["left", "right"]
    lists = next(b for b in doc.blocks if isinstance(b, ListBlock))
    assert [(i.level, i.ordered) for i in lists.items] == [(0, False), (1, False), (0, True)]
    spans = parse_inline("a **b** `c` ~2~ [d](http://x)")
    assert [(s.text.strip(), s.bold, s.code, s.sub, s.link) for s in spans if s.text.strip()] == [
        ("a", False, False, False, ""), ("b", True, False, False, ""), ("c", False, True, False, ""),
        ("2", False, False, True, ""), ("d", False, False, False, "http://x")]


def test_library_docx_keeps_existing_numbers(tmp_path):
    report = markdown_to_docx(MD, tmp_path / "o.docx", profile="proposal")
    assert report.headings == 1 and report.tables == 1 and not report.problems
    doc = Document(str(tmp_path / "o.docx"))
    assert [p.text for p in doc.paragraphs if p.style.name == "Heading 1"] == ["一、已编号"]
    link = doc.paragraphs[2]._p.find("{http://schemas.openxmlformats.org/wordprocessingml/2006/main}hyperlink")
    assert link is not None


def test_cli_module_and_script_mode(tmp_path):
    src = tmp_path / "in.md"
    src.write_text(MD, encoding="utf-8")
    env = {k: v for k, v in os.environ.items()}
    proc = subprocess.run([sys.executable, "-m", "zcbot_core.rendering.render", "--to", "docx", str(src), str(tmp_path / "a.docx")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # Script mode from a copy outside the source tree (how the sandbox's read-only mount is used),
    # with zcbot_core NOT importable: the package must be self-contained.
    mount = tmp_path / "mnt" / "rendering"
    shutil.copytree(RENDERING, mount, ignore=shutil.ignore_patterns("__pycache__"))
    os.chmod(mount, 0o555)
    code = ("import sys, runpy; sys.modules['zcbot_core'] = None; "
            f"sys.argv = ['render.py', '--to', 'docx', {str(src)!r}, {str(tmp_path / 'b.docx')!r}, '--profile', 'brief']; "
            f"runpy.run_path({str(mount / 'render.py')!r}, run_name='__main__')")
    proc = subprocess.run([sys.executable, "-B", "-c", code], capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and (tmp_path / "b.docx").is_file()
    os.chmod(mount, 0o755)


def test_rendering_package_imports_nothing_else_from_zcbot_core():
    for path in RENDERING.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                module = node.module or ""
                assert not module.startswith("zcbot_core"), f"{path.name} imports {module}"
                assert not module.startswith("zcbot") or module.startswith("zcbot_rendering."), module  # its own alias
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("zcbot") for a in node.names), path.name


def test_missing_libreoffice_is_a_clear_error_without_recipes(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing to find
    monkeypatch.delenv("ZCBOT_SOFFICE", raising=False)
    src = tmp_path / "x.docx"
    markdown_to_docx("# T\n\ntext\n", src)
    with pytest.raises(RenderError) as err:
        convert_to_pdf(src, tmp_path / "x.pdf")
    message = str(err.value)
    assert "not available" in message and ".docx" in message
    for banned in ("install", "apt", "pip", "weasyprint", "chromium"):
        assert banned not in message.lower()


def test_no_install_instructions_anywhere_the_agent_reads():
    """Seed 003 §8.9: nothing shown to the agent tells it to install packages or use another pipeline."""
    banned = ("pip install", "pip3 install", "apt-get", "apt install", "brew install", "conda install", "npm install")
    files = [*SKILLS.rglob("*.md"), *SKILLS.rglob("*.py"), *RENDERING.glob("*.py")]
    assert files
    for path in files:
        text = path.read_text(encoding="utf-8").lower()
        for phrase in banned:
            assert phrase not in text, f"{path} mentions {phrase!r}"


def test_missing_figure_is_reported_not_fatal(tmp_path):
    report = markdown_to_docx("## A\n\n![cap](missing.png)\n", tmp_path / "f.docx", base_dir=tmp_path)
    assert report.figures == 0 and any("missing.png" in p for p in report.problems)
    assert (tmp_path / "f.docx").is_file()


def test_unknown_profile_is_rejected(tmp_path):
    with pytest.raises(ValueError):
        markdown_to_docx("x", tmp_path / "x.docx", profile="nope")



def test_leading_rule_is_not_frontmatter():
    doc = parse_markdown("---\n\nSome text.\n\n---\n\nMore.\n")
    assert doc.meta == {} and len(doc.blocks) == 4
