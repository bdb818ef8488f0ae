"""Visual regression: decks and documents rendered to PNG contact sheets, to be looked at.

    python -m zcbot_core.rendering.contact_sheet [INPUT ...] --out DIR [--dpi 48] [--cols 4] [--pages N]

An INPUT is a .pptx / .docx / .pdf, a deck outline (.json, built with the ppt skill's
outline_to_deck.py), a Markdown brief (.md, rendered with the brief profile) or a folder of
those. Without inputs the fixture set is used (tests/skills/fixtures/decks/*.json and the brief
fixture). Every office file goes through ONE LibreOffice start (soffice -> PDF), then pdftoppm
renders the pages and they are tiled into `DIR/<name>.png`, one sheet per input, each page
labelled with its number. Compare sheets before and after a change by eye.

Development tool: needs LibreOffice, pdftoppm and Pillow (python-pptx's dependency).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from . import markdown_to_docx
from .common import RenderError
from .pdf import to_pdf_many

REPO = Path(__file__).resolve().parents[4]
FIXTURE_DECKS = REPO / "tests" / "skills" / "fixtures" / "decks"
FIXTURE_DOCS = [REPO / "tests" / "skills" / "fixtures" / "brief.md"]
OUTLINE_TO_DECK = REPO / "skills" / "ppt" / "scripts" / "outline_to_deck.py"
OFFICE = {".pptx", ".docx", ".odp", ".odt", ".ppt", ".doc"}


def default_inputs() -> list[Path]:
    return sorted(FIXTURE_DECKS.glob("*.json")) + [p for p in FIXTURE_DOCS if p.is_file()]


def _expand(inputs: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in inputs:
        if p.is_dir():
            out += sorted(q for q in p.iterdir() if q.suffix.lower() in OFFICE | {".pdf", ".json", ".md"})
        else:
            out.append(p)
    return out


def prepare(src: Path, work: Path) -> Path:
    """The office file or PDF an input stands for (outlines and Markdown are built first)."""
    suffix = src.suffix.lower()
    if suffix in OFFICE or suffix == ".pdf":
        return src
    if suffix == ".json":
        target = work / f"{src.stem}.pptx"
        run = subprocess.run([sys.executable, str(OUTLINE_TO_DECK), str(src), str(target), "--json"],
                             capture_output=True, text=True, timeout=180)
        if not target.is_file():
            raise RenderError(f"{src.name}: the deck was not built: {run.stdout[-600:]}{run.stderr[-600:]}")
        return target
    if suffix == ".md":
        target = work / f"{src.stem}.docx"
        markdown_to_docx(src.read_text(encoding="utf-8"), target, profile="brief", base_dir=src.parent)
        return target
    raise RenderError(f"{src.name}: not a deck, document, outline or Markdown file")


def tile(pngs: list[Path], out: Path, cols: int, label: str) -> Path:
    """Pages side by side, `cols` per row, each with its page number; a title line on top."""
    from PIL import Image, ImageDraw

    pages = [Image.open(p).convert("RGB") for p in pngs]
    w = max(p.width for p in pages)
    h = max(p.height for p in pages)
    pad, head = 10, 26
    cols = max(1, min(cols, len(pages)))
    rows = (len(pages) + cols - 1) // cols
    sheet = Image.new("RGB", (cols * (w + pad) + pad, head + rows * (h + pad + 14) + pad), (236, 238, 241))
    draw = ImageDraw.Draw(sheet)
    draw.text((pad, 7), label, fill=(30, 30, 30))
    for i, page in enumerate(pages):
        x = pad + (i % cols) * (w + pad)
        y = head + (i // cols) * (h + pad + 14)
        draw.text((x, y), str(i + 1), fill=(90, 90, 90))
        sheet.paste(page, (x, y + 14))
        draw.rectangle((x - 1, y + 13, x + page.width, y + 14 + page.height), outline=(180, 180, 180))
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out, optimize=True)
    return out


def contact_sheets(inputs: list[Path], out_dir: Path, dpi: int = 48, cols: int = 4, pages: int = 0) -> list[Path]:
    out_dir = Path(out_dir)
    sheets = []
    with tempfile.TemporaryDirectory(prefix="zcbot-sheet-") as tmp:
        work = Path(tmp)
        sources = [(src, prepare(src, work)) for src in _expand(inputs)]
        office = [f for _, f in sources if f.suffix.lower() != ".pdf"]
        pdfs = dict(zip(office, to_pdf_many(office, work / "pdf"))) if office else {}
        for src, f in sources:
            pdf = pdfs.get(f, f)
            prefix = work / "png" / src.stem
            prefix.parent.mkdir(exist_ok=True)
            cmd = ["pdftoppm", "-png", "-r", str(dpi)] + (["-l", str(pages)] if pages else []) + [str(pdf), str(prefix)]
            subprocess.run(cmd, check=True, capture_output=True, timeout=180)
            pngs = sorted(prefix.parent.glob(f"{src.stem}-*.png"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
            sheets.append(tile(pngs, out_dir / f"{src.stem}.png", cols, f"{src.name} ({len(pngs)} pages)"))
    return sheets


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Render decks and documents to PNG contact sheets.")
    ap.add_argument("inputs", nargs="*", type=Path)
    ap.add_argument("--out", type=Path, default=Path("test-artifacts/contact-sheets"))
    ap.add_argument("--dpi", type=int, default=48)
    ap.add_argument("--cols", type=int, default=4)
    ap.add_argument("--pages", type=int, default=0, help="only the first N pages of each input")
    args = ap.parse_args(argv)
    try:
        sheets = contact_sheets(args.inputs or default_inputs(), args.out, args.dpi, args.cols, args.pages)
    except (RenderError, subprocess.CalledProcessError, OSError) as exc:
        print(json.dumps({"ok": False, "error": str(exc)}, ensure_ascii=False))
        return 2
    print(json.dumps({"ok": True, "sheets": [str(s) for s in sheets]}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
