#!/usr/bin/env python3
"""Outline (JSON or Markdown) -> an editable .pptx deck, then the geometry check.

    python outline_to_deck.py OUTLINE.json|OUTLINE.md OUT.pptx [--theme corporate|academic|minimal]
                              [--template T.pptx] [--size 16:9|4:3] [--font F] [--ea-font F] [--json]

Slides use real layouts with their placeholders, so the deck stays editable: text is text,
tables are tables, charts are native charts with their data inside, notes are speaker notes.
The look is a theme (deck_themes.py) written into the master, or the user's template. Text sizes
are fitted to the boxes down to a floor; too many bullets become continuation slides; what still
does not fit is reported by the checker (deck_build.py, deck_slides.py, deck_visuals.py).

The outline format is described in ../references/outline_format.md.
Exit status: 0 deck written and clean; 3 deck written but the checker found layout errors (listed;
fix the outline and rerun); 2 nothing written (the outline is invalid: the message says where).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import check_deck  # noqa: E402
import deck_blocks as db  # noqa: E402
import deck_slides as ds  # noqa: E402
import deck_themes  # noqa: E402
import deck_visuals as dv  # noqa: E402
from deck_build import Deck  # noqa: E402
from deck_classify import classify  # noqa: E402
from deck_outline import OutlineError, norm_bullets, read_outline, slide_type, validate  # noqa: E402

MAX_BULLETS = 7   # more goes on a continuation slide (the checker warns above 8)
CHUNK = 6


def _texts(outline: dict) -> list[str]:
    out = []
    for s in outline["slides"]:
        out += [str(s.get("title", "")), str(s.get("subtitle", ""))]
        out += [t for t, _ in norm_bullets(s.get("bullets"), "")]
    return out


def split_long(outline: dict, zh: bool) -> tuple[list[dict], list[dict]]:
    """Bullet slides with too many bullets become continuation slides (sub-bullets stay with
    their parent); returns the slides and one warning per split, so nothing is shrunk silently."""
    slides, notes = [], []
    for n, s in enumerate(outline["slides"], start=1):
        paras = norm_bullets(s.get("bullets"), "") if slide_type(s) == "bullets" else []
        if len(paras) <= MAX_BULLETS:
            slides.append(s)
            continue
        groups: list[list] = []
        for text, level in paras:
            if level == 0 or not groups:
                groups.append([])
            groups[-1].append({"text": text, "level": level})
        chunks, cur = [], []
        for g in groups:
            if cur and len(cur) + len(g) > CHUNK:
                chunks.append(cur)
                cur = []
            cur += g
        chunks.append(cur)
        for i, chunk in enumerate(chunks):
            part = {**s, "bullets": chunk}
            if i:
                part["title"] = f"{s['title']}{'（续）' if zh else ' (cont.)'}"
                part.pop("notes", None)
            slides.append(part)
        notes.append({"slide": n, "kind": "split", "severity": "warning", "shape": "outline",
                      "message": f"slide {n} has {len(paras)} bullets: built as {len(chunks)} slides of at most "
                                 f"{CHUNK}; consider moving detail to the notes"})
    return slides, notes


KINDS = {  # slide kind -> builder(deck, slide dict, outline folder, section number)
    "title": lambda d, s, b, n: ds.title_slide(d, s),
    "section": lambda d, s, b, n: ds.section_slide(d, s, n),
    "bullets": lambda d, s, b, n: db.rows_slide(d, s) if db.fits_rows(d, s) else ds.bullets_slide(d, s),
    "two_column": lambda d, s, b, n: ds.two_column_slide(d, s),
    "comparison": lambda d, s, b, n: ds.two_column_slide(d, s, boxed=True),
    "table": lambda d, s, b, n: ds.table_slide(d, s),
    "image": lambda d, s, b, n: ds.image_slide(d, s, b),
    "quote": lambda d, s, b, n: ds.quote_slide(d, s),
    "closing": lambda d, s, b, n: ds.closing_slide(d, s),
    "chart": lambda d, s, b, n: dv.chart_slide(d, s),
    "kpis": lambda d, s, b, n: dv.kpis_slide(d, s),
    "cards": lambda d, s, b, n: dv.cards_slide(d, s),
    "timeline": lambda d, s, b, n: dv.timeline_slide(d, s, numbered=False),
    "process": lambda d, s, b, n: dv.timeline_slide(d, s, numbered=True),
}


def build(outline: dict, out: Path, base: Path, template: Path | None = None, size: str = "16:9",
          font: str | None = None, ea_font: str | None = None, theme: str | None = None) -> tuple[int, list[dict]]:
    texts = _texts(outline)
    lang = outline.get("lang") or deck_themes.lang_of(texts)
    chosen = None if template else deck_themes.resolve(theme or outline.get("theme"), font or outline.get("font"),
                                                       ea_font or outline.get("ea_font"))
    deck = Deck(chosen, template, outline.get("size", size), lang)
    slides, notes = split_long(outline, deck.zh)
    section, section_name = 0, None
    track = bool(outline.get("tracker"))
    for at, s in enumerate(slides):
        if slide_type(s) == "summary":  # the deck's storyline on one slide, as numbered rows
            s = {**s, "type": "bullets", "bullets": db.summary_points(slides, at, slide_type)}
        s = classify(s)  # numbers -> KPI cards, dated items -> timeline, ... (a `type` forces the kind)
        kind = slide_type(s)
        if kind == "section":
            section += 1
            section_name = str(s.get("title", ""))
        saved = db.reserve_source(deck, s)
        slide = KINDS.get(kind, KINDS["bullets"])(deck, s, base, section)
        db.source_line(deck, slide, s)
        deck.body_rect = saved
        if track and kind not in ("title", "section", "closing", "quote"):
            db.tracker(deck, slide, section_name)
        if kind not in ("title", "section", "closing"):
            deck.add_number(slide)
        deck.notes(slide, s.get("notes"))
    deck.save(out)
    return len(slides), notes


class JsonArgs(argparse.ArgumentParser):
    """Usage errors as JSON too when --json was asked for (stdout stays parseable)."""

    as_json = False

    def error(self, message: str):  # noqa: D401 - argparse's hook
        if self.as_json:
            print(json.dumps({"ok": False, "written": False, "error": message, "problems": []}, ensure_ascii=False))
            sys.exit(2)
        super().error(message)


def _fail(args, message: str, problems: list[str] | None = None) -> int:
    if args.json:  # --json: stdout is one JSON document on every path
        print(json.dumps({"ok": False, "written": False, "error": message, "problems": problems or []},
                         ensure_ascii=False, indent=1))
    else:
        print(f"ERROR: {message}" + "".join(f"\n- {p}" for p in problems or []), file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = JsonArgs(description=__doc__.split("\n\n")[0])
    ap.as_json = "--json" in argv
    ap.add_argument("outline")
    ap.add_argument("out")
    ap.add_argument("--template", help="the user's .pptx: its masters, layouts, fonts and colours are used")
    ap.add_argument("--size", choices=("16:9", "4:3"), default="16:9")
    ap.add_argument("--theme", choices=tuple(deck_themes.THEMES), help="deck theme (default: the outline's, else corporate)")
    ap.add_argument("--font", help="Latin font instead of the theme's")
    ap.add_argument("--ea-font", help="East Asian font instead of the theme's")
    ap.add_argument("--json", action="store_true", help="print only JSON (the check report, or the error)")
    args = ap.parse_args(argv)
    src, out = Path(args.outline), Path(args.out)
    if out.suffix.lower() != ".pptx":
        return _fail(args, "the output file must end in .pptx")
    try:
        outline = read_outline(src)
    except (OSError, OutlineError) as exc:
        return _fail(args, str(exc))
    base = src.resolve().parent
    problems = validate(outline, base)
    if problems:
        return _fail(args, "the outline has problems, nothing was written:", problems)
    template = Path(args.template) if args.template else None
    if template and not template.is_file():
        return _fail(args, f"template not found: {template}")
    try:
        count, notes = build(outline, out, base, template, args.size, args.font, args.ea_font, args.theme)
    except (ValueError, KeyError, OSError) as exc:  # an unusable template or theme: nothing written
        return _fail(args, f"the deck could not be built: {exc}")
    report = check_deck.check(out)
    report["warnings"] = notes + report["warnings"]
    report["ok"], report["written"] = not report["errors"], True
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=1))
    else:
        print(f"wrote {out} ({count} slides)")
        print(check_deck.format_report(report))
        if report["errors"]:
            print(f"The deck was written but has {len(report['errors'])} layout errors: change the outline "
                  "(shorter text, split the slide, fewer rows) and run this again.")
    return 3 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
