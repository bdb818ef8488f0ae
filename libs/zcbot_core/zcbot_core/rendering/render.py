"""Command line: render Markdown to .docx/.pdf, or convert an office file to PDF.

    python -m zcbot_core.rendering.render --to docx|pdf IN.md OUT [--profile proposal|paper|brief]
    python /sandbox/rendering/render.py --to pdf IN.md OUT.pdf      (the sandbox's read-only mount)
    python render.py --to pdf deck.pptx deck.pdf                      (office file -> PDF)

Options: --profile (default: proposal), --base-dir (where relative image paths are looked up;
default: the Markdown file's folder), --numbering auto|decimal|chinese|nsfc|none, --cjk-font, --latin-font,
--title (overrides the frontmatter title). Exit status: 0 done, 1 written but with problems listed
(e.g. a missing figure), 2 nothing written (the message says why).
"""

from __future__ import annotations

import sys

if __package__ in (None, ""):  # run as a script: load this folder as a package under a private name
    import importlib.util
    from pathlib import Path as _Path

    _here = _Path(__file__).resolve().parent
    _spec = importlib.util.spec_from_file_location("zcbot_rendering", _here / "__init__.py",
                                                   submodule_search_locations=[str(_here)])
    _mod = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
    sys.modules["zcbot_rendering"] = _mod
    _spec.loader.exec_module(_mod)  # type: ignore[union-attr]
    from zcbot_rendering.render import main as _main

    sys.exit(_main())

import argparse
from pathlib import Path

from . import RenderError, convert_to_pdf, markdown_to_docx, markdown_to_pdf
from .docx_manuscript import PROFILES
from .mdparse import parse_frontmatter
from .pdf import CONVERTIBLE

ALL_PROFILES = sorted({*PROFILES, "brief"})


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="render", description="Render Markdown to docx/pdf, or convert an office file to PDF.")
    p.add_argument("--to", choices=("docx", "pdf"), required=True)
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--profile", choices=ALL_PROFILES, default="proposal")
    p.add_argument("--base-dir")
    p.add_argument("--numbering", choices=("auto", "decimal", "chinese", "nsfc", "none"))
    p.add_argument("--cjk-font")
    p.add_argument("--latin-font")
    p.add_argument("--title")
    p.add_argument("--timeout", type=float, default=180.0)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    src, out = Path(args.input), Path(args.output)
    try:
        if not src.is_file():
            raise RenderError(f"input file not found: {src}")
        if src.suffix.lower() in CONVERTIBLE:
            if args.to != "pdf":
                raise RenderError(f"{src.name} is already an office file; only --to pdf applies to it")
            convert_to_pdf(src, out, timeout=args.timeout)
            print(f"wrote {out}")
            return 0
        text = src.read_text(encoding="utf-8")
        if args.title:
            meta, body = parse_frontmatter(text)
            meta["title"] = args.title
            text = "---\n" + "".join(f"{k}: {v}\n" for k, v in meta.items()) + "---\n" + body
        overrides = {"numbering": args.numbering, "east_asia": args.cjk_font, "latin": args.latin_font}
        base_dir = Path(args.base_dir) if args.base_dir else src.parent
        if args.to == "docx":
            report = markdown_to_docx(text, out, profile=args.profile, base_dir=base_dir, **overrides)
        else:
            report = markdown_to_pdf(text, out, profile=args.profile, base_dir=base_dir, timeout=args.timeout, **overrides)
    except RenderError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
