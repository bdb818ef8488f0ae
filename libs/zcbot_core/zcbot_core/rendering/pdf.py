"""Office documents -> PDF with LibreOffice headless (`soffice --convert-to pdf`).

One conversion runs in a throw-away LibreOffice profile (so parallel conversions and read-only
homes work), in its own process group, killed on timeout. Several files can be converted in one
LibreOffice start (`to_pdf_many`), which is what makes batch conversion cheap: start-up dominates.
When LibreOffice is not installed the error says so plainly; it does not suggest alternatives.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from .common import RenderError

CONVERTIBLE = {".docx", ".doc", ".odt", ".rtf", ".pptx", ".ppt", ".odp", ".xlsx", ".xls", ".ods"}
DEFAULT_TIMEOUT = 180.0


def find_soffice() -> str | None:
    # raw: this package also runs inside sandboxes (render.py) and in `zcbot up`'s check, with no settings
    explicit = os.environ.get("ZCBOT_SOFFICE")
    if explicit and os.access(explicit, os.X_OK):
        return explicit
    return shutil.which("soffice") or shutil.which("libreoffice")


def _require_soffice() -> str:
    soffice = find_soffice()
    if not soffice:
        raise RenderError(
            "PDF conversion is not available in this environment (LibreOffice `soffice` was not found). "
            "The .docx/.pptx file itself is complete; deliver it and tell the user the PDF could not be produced here."
        )
    return soffice


def to_pdf_many(sources: list[Path], out_dir: Path, timeout: float = DEFAULT_TIMEOUT) -> list[Path]:
    """Convert office files to PDFs named `<stem>.pdf` in `out_dir`; returns their paths."""
    soffice = _require_soffice()
    sources = [Path(s).resolve() for s in sources]
    for src in sources:
        if not src.is_file():
            raise RenderError(f"cannot convert {src}: file not found")
        if src.suffix.lower() not in CONVERTIBLE:
            raise RenderError(f"cannot convert {src.name} to PDF: only {', '.join(sorted(CONVERTIBLE))} files are supported")
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="zcbot-soffice-") as tmp:
        tmp_path = Path(tmp)
        stage = tmp_path / "out"
        stage.mkdir()
        # soffice's environment: only these few of ours, passed to the child
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ", "FONTCONFIG_PATH", "FONTCONFIG_FILE")}
        env.setdefault("PATH", "/usr/bin:/bin")
        env["HOME"] = str(tmp_path)
        cmd = [soffice, f"-env:UserInstallation={(tmp_path / 'profile').as_uri()}", "--headless", "--invisible",
               "--norestore", "--nologo", "--nodefault", "--nolockcheck", "--convert-to", "pdf",
               "--outdir", str(stage), *map(str, sources)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=str(tmp_path),
                                start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            raise RenderError(f"PDF conversion did not finish within {int(timeout)} s") from None
        log = output.decode("utf-8", "replace").strip()
        results = []
        for src in sources:
            produced = stage / f"{src.stem}.pdf"
            if not produced.is_file() or produced.stat().st_size == 0:
                raise RenderError(f"PDF conversion of {src.name} failed (exit {proc.returncode}): {log[-800:] or 'no output'}")
            target = out_dir / produced.name
            shutil.move(str(produced), str(target))
            results.append(target)
        return results


def to_pdf(source: Path, out: Path, timeout: float = DEFAULT_TIMEOUT) -> Path:
    """Convert one office file to the PDF `out`."""
    out = Path(out)
    with tempfile.TemporaryDirectory(prefix="zcbot-pdf-", dir=str(out.parent.resolve()) if out.parent.exists() else None) as tmp:
        produced = to_pdf_many([Path(source)], Path(tmp), timeout)[0]
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(produced, out)
    return out
