#!/usr/bin/env python3
"""Reading and validating deck outlines (JSON or Markdown) for outline_to_deck.py (stdlib only).

The format is described in ../references/outline_format.md. `validate` returns every problem at
once, each naming its slide, so one round of fixes is enough.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

CHART_KINDS = ("bar", "column", "stacked_bar", "stacked_column", "line", "pie", "doughnut", "area")
SLIDE_TYPES = ("title", "section", "bullets", "two_column", "comparison", "table", "chart", "image", "kpis", "cards",
               "timeline", "process", "quote", "closing", "summary")
THEMES = ("corporate", "academic", "minimal")
# Kinds that hold a list of items, with how many fit a slide and the keys an item needs.
ITEM_KINDS = {"kpis": ("kpis", 1, 4, "value"), "cards": ("cards", 2, 4, "title"),
              "timeline": ("steps", 2, 6, "title"), "process": ("steps", 2, 6, "title")}


class OutlineError(ValueError):
    pass


def read_outline(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OutlineError(f"{path.name} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
        if not isinstance(data, dict) or not isinstance(data.get("slides"), list):
            raise OutlineError('the JSON outline must be an object with a "slides" list')
        return data
    return parse_markdown_outline(text)


_BULLET = re.compile(r"^(\s*)(?:[-*+]|\d{1,2}[.)])\s+(.*)$")
_IMG = re.compile(r"^\s*!\[([^\]]*)\]\(([^)\s]+)\)\s*$")
_NOTES = re.compile(r"^\s*(?:notes?|speaker notes|备注|讲稿)\s*[:：]\s*(.*)$", re.I)


def _row(line: str) -> list[str]:
    line = line.strip().strip("|")
    return [c.strip() for c in line.split("|")]


def parse_markdown_outline(text: str) -> dict:
    """`# Deck title` (+ subtitle lines), later `# X` = section slide, `## X` = content slide whose
    body is bullets / a pipe table / a ```chart JSON block / an image; `Notes:` starts speaker notes."""
    meta: dict = {}
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[0].strip() == "---":
        for end in range(1, min(len(lines), 100)):
            if lines[end].strip() == "---":
                if not all(re.match(r"^(?:[A-Za-z_][\w-]*\s*:|\s*$|\s*#)", ln) for ln in lines[1:end]):
                    break  # a rule, not frontmatter
                for line in lines[1:end]:
                    k, _, v = line.partition(":")
                    if k.strip():
                        meta[k.strip().lower()] = v.strip().strip("\"'")
                lines = lines[end + 1:]
                break
    slides: list[dict] = []
    cur: dict | None = None
    in_notes = False
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("## ") or stripped.startswith("# "):
            level = 2 if stripped.startswith("## ") else 1
            title = stripped[level + 1:].strip()
            if level == 1 and not slides and cur is None:
                cur = {"type": "title", "title": title, "_sub": []}
            elif level == 1:
                cur = {"type": "section", "title": title, "_sub": []}
            else:
                cur = {"title": title, "bullets": []}
            slides.append(cur)
            in_notes = False
            i += 1
            continue
        if cur is None:
            i += 1
            continue
        notes = _NOTES.match(line)
        if notes:
            in_notes = True
            cur["notes"] = notes.group(1).strip()
            i += 1
            continue
        if in_notes:
            if stripped:
                cur["notes"] = (cur.get("notes", "") + "\n" + stripped).strip()
            i += 1
            continue
        if stripped.startswith("```"):
            lang = stripped[3:].strip().lower()
            body = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i])
                i += 1
            i += 1
            if lang == "chart":
                try:
                    cur["chart"] = json.loads("\n".join(body))
                except json.JSONDecodeError as exc:
                    raise OutlineError(f"slide '{cur.get('title')}': the ```chart block is not valid JSON ({exc.msg})") from None
            continue
        if "|" in stripped and i + 1 < len(lines) and re.match(r"^\s*\|?\s*:?-{2,}", lines[i + 1]):
            cur["table"] = {"columns": _row(stripped), "rows": []}
            i += 2
            while i < len(lines) and "|" in lines[i]:
                cur["table"]["rows"].append(_row(lines[i]))
                i += 1
            continue
        img = _IMG.match(line)
        if img:
            cur["image"] = img.group(2)
            if img.group(1):
                cur["caption"] = img.group(1)
            i += 1
            continue
        bullet = _BULLET.match(line)
        if bullet and "bullets" in cur:
            level = min(len(bullet.group(1).replace("\t", "  ")) // 2, 2)
            cur["bullets"].append({"text": bullet.group(2).strip(), "level": level})
        elif stripped:
            if "_sub" in cur:
                cur["_sub"].append(stripped)
            elif "bullets" in cur:
                cur["bullets"].append({"text": stripped, "level": 0})
        i += 1
    for s in slides:
        sub = s.pop("_sub", None)
        if sub:
            s["subtitle"] = "\n".join(sub)
        if "bullets" in s and not s["bullets"]:
            del s["bullets"]
    return {**meta, "slides": slides}


def slide_type(s: dict) -> str:
    if s.get("type"):
        return str(s["type"])
    for key in ("chart", "table", "image", "kpis", "cards", "quote"):
        if key in s:
            return key
    if "steps" in s:
        return "timeline"
    if "left" in s or "right" in s:
        return "two_column"
    return "bullets"


def norm_bullets(items, where: str) -> list[tuple[str, int]]:
    out = []
    for item in items or []:
        if isinstance(item, str):
            out.append((item, 0))
        elif isinstance(item, dict) and isinstance(item.get("text"), str):
            out.append((item["text"], max(0, min(int(item.get("level", 0)), 2))))
        else:
            raise OutlineError(f"{where}: each bullet must be a string or {{\"text\": ..., \"level\": 0-2}}")
    return out


def validate(outline: dict, base: Path) -> list[str]:
    problems = []
    slides = outline.get("slides") or []
    if not slides:
        problems.append("the outline has no slides")
    if outline.get("theme") and str(outline["theme"]).lower() not in THEMES:
        problems.append(f"theme {outline['theme']!r} unknown; use one of {', '.join(THEMES)}")
    for n, s in enumerate(slides, start=1):
        where = f"slide {n}"
        if not isinstance(s, dict):
            problems.append(f"{where}: must be an object")
            continue
        kind = slide_type(s)
        where = f"slide {n} ({kind}, '{s.get('title', '')}')"
        if kind not in SLIDE_TYPES:
            problems.append(f"{where}: unknown type; use one of {', '.join(SLIDE_TYPES)}")
            continue
        if not str(s.get("title", "")).strip() and kind not in ("image", "quote", "closing"):
            problems.append(f"{where}: needs a title")
        if kind == "quote" and not str(s.get("quote", "")).strip():
            problems.append(f'{where}: needs "quote" (the quoted text)')
        if kind in ITEM_KINDS:
            key, low, high, need = ITEM_KINDS[kind]
            items = s.get(key)
            if not isinstance(items, list) or not low <= len(items) <= high:
                problems.append(f'{where}: needs "{key}", a list of {low} to {high} items (more belong on two slides)')
            elif not all(isinstance(it, dict) and str(it.get(need, "")).strip() for it in items):
                problems.append(f'{where}: every item of "{key}" needs "{need}"')
            else:
                for it in items:
                    try:
                        norm_bullets(it.get("bullets"), where)
                    except OutlineError as exc:
                        problems.append(str(exc))
        try:
            norm_bullets(s.get("bullets"), where)
            norm_bullets(s.get("left"), where)
            norm_bullets(s.get("right"), where)
        except OutlineError as exc:
            problems.append(str(exc))
        if kind == "table":
            t = s.get("table") or {}
            cols, rows = t.get("columns"), t.get("rows")
            if not isinstance(cols, list) or not cols or not isinstance(rows, list):
                problems.append(f'{where}: "table" needs "columns" (list) and "rows" (list of lists)')
            else:
                for r, row in enumerate(rows, start=1):
                    if not isinstance(row, list) or len(row) != len(cols):
                        problems.append(f"{where}: table row {r} has {len(row) if isinstance(row, list) else '?'} cells, expected {len(cols)}")
        if kind == "chart":
            c = s.get("chart") or {}
            ctype = c.get("type", c.get("kind", "column"))
            if ctype not in CHART_KINDS:
                problems.append(f"{where}: chart type {ctype!r} unknown; use one of {', '.join(CHART_KINDS)}")
            cats, series = c.get("categories"), c.get("series")
            if not isinstance(cats, list) or not cats:
                problems.append(f'{where}: chart needs "categories" (non-empty list)')
            elif not isinstance(series, list) or not series:
                problems.append(f'{where}: chart needs "series" (list of {{"name", "values"}})')
            else:
                for ser in series:
                    vals = ser.get("values") if isinstance(ser, dict) else None
                    if not isinstance(vals, list) or len(vals) != len(cats):
                        problems.append(f"{where}: series {ser.get('name') if isinstance(ser, dict) else ser!r} needs "
                                        f"{len(cats)} values (one per category)")
                    elif not all(v is None or isinstance(v, (int, float)) for v in vals):
                        problems.append(f"{where}: series {ser.get('name')!r} values must be numbers")
                if ctype in ("pie", "doughnut") and len(series) != 1:
                    problems.append(f"{where}: a {ctype} chart takes exactly one series")
        if kind == "image":
            img = s.get("image")
            if not img:
                problems.append(f'{where}: needs "image" (a path)')
            elif not (base / img).is_file():
                problems.append(f"{where}: image file not found: {img}")
    return problems
