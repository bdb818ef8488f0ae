#!/usr/bin/env python3
"""Assemble Markdown sections into a proposal/manuscript .docx (and optionally a PDF).

    python build_proposal.py sections/ [more.md ...] --out 申报书.docx [--title T] [--subtitle S]
                             [--profile proposal|paper] [--numbering auto|chinese|nsfc|decimal|none]
                             [--limit CHARS] [--pdf]

Inputs are Markdown files or folders (their *.md files in name order). Frontmatter of the first
file is kept (title, author, ...); later files' frontmatter is dropped. Rendering is the platform's
rendering layer (manuscript layout). Afterwards the script reports: headings, tables, figures,
references, the character count (against --limit), missing figures, citation numbers that have no
reference entry, and leftover placeholders (【待补充…】/TODO).
Exit status: 0 done; 1 written, but problems are listed; 2 nothing written (the message says why).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
from pathlib import Path


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


FRONT = re.compile(r"\A---\s*\n.*?\n---\s*\n", re.S)
CITE = re.compile(r"\[(\d{1,3}(?:\s*[-–,，]\s*\d{1,3})*)\]")
PLACEHOLDER = re.compile(r"【待补充[^】]*】|\bTODO\b|\bTBD\b|XXX")


def collect(inputs: list[str]) -> list[Path]:
    files: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            files.extend(sorted(x for x in p.glob("*.md") if not x.name.startswith(".")))
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"input not found: {item}")
    if not files:
        raise FileNotFoundError("no Markdown files found in the inputs")
    return files


def assemble(files: list[Path], title: str | None, subtitle: str | None) -> str:
    parts = []
    for i, f in enumerate(files):
        text = f.read_text(encoding="utf-8").replace("\r\n", "\n")
        if i > 0:
            text = FRONT.sub("", text, count=1)
        parts.append(text.strip("\n"))
    doc = "\n\n".join(parts) + "\n"
    extra = {k: v for k, v in (("title", title), ("subtitle", subtitle)) if v}
    if extra:
        m = FRONT.match(doc)
        head = m.group(0)[4:-4] if m else ""
        lines = [ln for ln in head.splitlines() if ln.split(":", 1)[0].strip().lower() not in extra]
        lines += [f"{k}: {v}" for k, v in extra.items()]
        doc = "---\n" + "\n".join(ln for ln in lines if ln.strip()) + "\n---\n" + (doc[m.end():] if m else doc)
    return doc


def cited_numbers(text: str) -> set[int]:
    nums: set[int] = set()
    for m in CITE.finditer(text):
        for chunk in re.split(r"[,，]", m.group(1)):
            bounds = [int(x) for x in re.split(r"\s*[-–]\s*", chunk.strip()) if x.strip().isdigit()]
            if len(bounds) == 2 and bounds[0] <= bounds[1] <= bounds[0] + 50:
                nums.update(range(bounds[0], bounds[1] + 1))
            elif bounds:
                nums.add(bounds[0])
    return nums


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Assemble Markdown sections into a .docx manuscript.")
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--title")
    ap.add_argument("--subtitle")
    ap.add_argument("--profile", choices=("proposal", "paper"), default="proposal")
    ap.add_argument("--numbering", choices=("auto", "chinese", "nsfc", "decimal", "none"))
    ap.add_argument("--limit", type=int, help="character limit of the body (reported, not enforced)")
    ap.add_argument("--pdf", action="store_true", help="also write a PDF next to the .docx")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if out.suffix.lower() != ".docx":
        print("ERROR: --out must name a .docx file", file=sys.stderr)
        return 2
    rendering = load_rendering()
    if rendering is None:
        print("ERROR: the platform rendering layer is not available in this environment; "
              "tell the user the document could not be built here.", file=sys.stderr)
        return 2
    try:
        files = collect(args.inputs)
        text = assemble(files, args.title, args.subtitle)
        base = files[0].resolve().parent
        if Path(args.inputs[0]).is_dir():
            base = Path(args.inputs[0]).resolve().parent  # figures/ usually sits next to sections/
        report = rendering.markdown_to_docx(text, out, profile=args.profile, base_dir=base, numbering=args.numbering)
    except (OSError, ValueError, rendering.RenderError) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    problems = list(report.problems)
    # A figure path relative to the section file's own folder also counts.
    problems = [p for p in problems if not _found_elsewhere(p, files)]
    missing = sorted(n for n in cited_numbers(_body_without_refs(text)) if n > report.references)
    if missing and report.references:
        problems.append(f"citations without a reference entry: {', '.join(f'[{n}]' for n in missing)} "
                        f"(the reference list has {report.references})")
    elif missing:
        problems.append("the text cites [n] but there is no 参考文献 / References section")
    holes = sorted(set(PLACEHOLDER.findall(text)))
    print(f"sections: {len(files)} files ({', '.join(f.name for f in files)})")
    print(report.summary().split("\nproblems:")[0])
    if args.limit:
        state = "over" if report.characters > args.limit else "within"
        print(f"length: {report.characters} characters, {state} the limit of {args.limit}")
    if holes:
        print(f"placeholders still to fill: {len(holes)} ({'; '.join(holes[:8])})")
    if args.pdf:
        pdf = out.with_suffix(".pdf")
        try:
            rendering.convert_to_pdf(out, pdf)
            print(f"wrote {pdf}")
        except rendering.RenderError as exc:
            problems.append(f"PDF not produced: {exc}")
    if problems:
        print("problems:\n" + "\n".join(f"- {p}" for p in problems))
        return 1
    return 0


def _body_without_refs(text: str) -> str:
    m = re.search(r"(?m)^#{1,6}\s*(参考文献|References|Bibliography|主要参考文献)\s*$", text)
    return text[:m.start()] if m else text


def _found_elsewhere(problem: str, files: list[Path]) -> bool:
    m = re.match(r"figure image not found: (\S+)", problem)
    return bool(m) and any((f.parent / m.group(1)).is_file() for f in files)


if __name__ == "__main__":
    sys.exit(main())
