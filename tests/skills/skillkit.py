"""Helpers for the skills tests (imported by conftest.py and the test modules as `skillkit`).

Fixtures for the skills tests: fixed inputs, the scripts run once per session, PDFs made once.

The skill scripts run as the agent runs them: a separate interpreter (`sys.executable`, the venv
with python-pptx/python-docx) via subprocess, from the task folder. Outputs are read back with
python-pptx / python-docx. LibreOffice starts once for both PDFs (`to_pdf_many`), since start-up
dominates its cost; page 1 of each PDF is saved as a PNG under `test-artifacts/` (gitignored).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SKILLS = REPO / "skills"
RENDERING = REPO / "libs" / "zcbot_core" / "zcbot_core" / "rendering"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
ARTIFACTS = REPO / "test-artifacts"
PY = sys.executable


def write_png(path: Path, width: int = 320, height: int = 200) -> Path:
    """A small gradient PNG (stdlib only), so figures are real images."""
    rows = b"".join(
        b"\x00" + b"".join(bytes(((x * 255) // width, (y * 255) // height, 128)) for x in range(width))
        for y in range(height)
    )

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    return path


@dataclass
class ScriptRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


def run_script(script: Path | str, *args: str, cwd: Path, timeout: float = 120.0) -> ScriptRun:
    env = {k: v for k, v in os.environ.items() if k != "ZCBOT_RENDERING_DIR"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # never write into the (read-only in production) skills tree
    proc = subprocess.run([PY, str(script), *args], cwd=str(cwd), capture_output=True, text=True,
                          timeout=timeout, env=env)
    return ScriptRun(proc.returncode, proc.stdout, proc.stderr)


def prepare_task_folder(dest: Path) -> Path:
    """The fixed inputs as a task folder: outlines, proposal sections + figure, a brief."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("outline.json", "outline.md", "brief.md"):
        shutil.copy(FIXTURES / name, dest / name)
    shutil.copytree(FIXTURES / "sections", dest / "sections", dirs_exist_ok=True)
    write_png(dest / "figure.png")
    write_png(dest / "figures" / "route.png", 400, 240)
    return dest


def have_office() -> bool:
    from zcbot_core.rendering import find_soffice

    return bool(find_soffice()) and shutil.which("pdftoppm") is not None
