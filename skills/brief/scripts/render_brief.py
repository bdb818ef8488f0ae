#!/usr/bin/env python3
"""Render a Markdown brief to .docx and/or .pdf with the platform's brief layout.

    python render_brief.py brief.md [--docx [OUT.docx]] [--pdf [OUT.pdf]]

Without --docx/--pdf both are written next to the Markdown (same name). The page budget is the
frontmatter's `pages:` (default 2); the brief is measured on a LibreOffice render, set in a compact
variant of the layout when it runs over or a few lines spill onto its last page, and the measured
page count is reported (without LibreOffice: a length estimate). Exit status: 0 done; 1 written with problems listed
(e.g. a missing figure, PDF not available); 2 nothing written (the message says why: e.g. a footnote mark without its definition).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
from pathlib import Path

LONG_LATIN_WORDS = 900
LONG_CJK_CHARS = 1800


def load_rendering():
    """The platform rendering package: the sandbox mount, or the source tree next to the skills."""
    here = Path(__file__).resolve()
    candidates = [os.environ.get("ZCBOT_RENDERING_DIR"), "/sandbox/rendering",
                  str(here.parents[3] / "libs" / "zcbot_core" / "zcbot_core" / "rendering")]
    for cand in candidates:
        if cand and (Path(cand) / "__init__.py").is_file():
            if "zcbot_rendering" in sys.modules:
                return sys.modules["zcbot_rendering"]
            spec = importlib.util.spec_from_file_location("zcbot_rendering", Path(cand) / "__init__.py",
                                                          submodule_search_locations=[cand])
            module = importlib.util.module_from_spec(spec)
            sys.modules["zcbot_rendering"] = module
            spec.loader.exec_module(module)
            return module
    try:
        import zcbot_core.rendering as module  # installed package
        return module
    except ImportError:
        return None


def length_note(text: str) -> str | None:
    cjk = len(re.findall(r"[\u4e00-\u9fff]", text))
    words = len(re.findall(r"[A-Za-z]+", text))
    if cjk > LONG_CJK_CHARS or (cjk < 200 and words > LONG_LATIN_WORDS):
        return (f"the brief is long ({cjk} Chinese characters, {words} words): a brief should fit on one or two "
                "pages; move detail out or cut it")
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Render a Markdown brief.")
    ap.add_argument("input")
    ap.add_argument("--docx", nargs="?", const="", default=None)
    ap.add_argument("--pdf", nargs="?", const="", default=None)
    args = ap.parse_args(argv)
    src = Path(args.input)
    if not src.is_file():
        print(f"ERROR: input file not found: {src}", file=sys.stderr)
        return 2
    want_docx = args.docx is not None or args.pdf is None
    want_pdf = args.pdf is not None or args.docx is None
    docx_out = Path(args.docx) if args.docx else src.with_suffix(".docx")
    pdf_out = Path(args.pdf) if args.pdf else src.with_suffix(".pdf")
    rendering = load_rendering()
    if rendering is None:
        print("ERROR: the platform rendering layer is not available in this environment; "
              "tell the user the brief could not be rendered here.", file=sys.stderr)
        return 2
    text = src.read_text(encoding="utf-8")
    base = src.resolve().parent
    missing = rendering.parse_markdown(text).undefined_notes()
    if missing:
        # A brief is read, not edited: a literal "[^1]" in it is a defect, so nothing is delivered.
        marks = ", ".join(f"[^{n}]" for n in missing)
        print(f"ERROR: footnote {marks} is used but not defined; add a line '[^{missing[0]}]: text' at the end "
              "of the Markdown (or remove the mark) and render again. Nothing was written.", file=sys.stderr)
        return 2

    def render(out: Path, overrides: dict) -> object:
        return rendering.markdown_to_docx(text, out, profile="brief", base_dir=base, **overrides)

    try:
        fit = rendering.fit_to_budget(render, text, docx_out if want_docx else None, pdf_out if want_pdf else None)
    except (OSError, ValueError, rendering.RenderError) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    print(fit.report.summary().split("\nproblems:")[0])
    problems = list(fit.report.problems) + fit.problems
    if fit.pages is None:
        if want_pdf:
            problems.append("PDF not produced: LibreOffice is not available here; deliver the .docx and say so")
        note = length_note(text)
        if note:
            print(f"note: {note}")
    elif want_pdf:
        print(f"wrote {pdf_out}")
    print(fit.summary())
    if problems:
        print("problems:\n" + "\n".join(f"- {p}" for p in problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
