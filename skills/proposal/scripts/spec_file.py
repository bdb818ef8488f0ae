#!/usr/bin/env python3
"""Name (and optionally start) this task's constitution files: <date>-<short_id>-<name>.<kind>.md

    python spec_file.py current --short-id 3f9a2c1b [--kind spec] [--dir .]
        prints the current file of that kind (the matching name that sorts last), or nothing
    python spec_file.py new --short-id 3f9a2c1b --name "task name" [--kind spec] [--dir .] [--create]
        prints today's file name; --create writes it from a template (or a copy of the current one)
    python spec_file.py list --short-id 3f9a2c1b [--kind spec]
        prints every file of that kind, oldest first
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import date
from pathlib import Path

TEMPLATE = """# Spec — {name}

(Confirmed with the user on {day}. Everything written in this task follows this file; when the
direction changes, start a new dated spec instead of rewriting history.)

## Program / call
- 

## Required outline and format
- 

## Limits
- Length: 
- Deadline: 

## Core idea and key claims
- 

## Facts supplied by the user (team, preliminary results, budget)
- 

## Terms and abbreviations
- 

## Open questions
- 
"""


def slug(name: str) -> str:
    s = re.sub(r"[\s/\\:*?\"<>|]+", "-", name.strip()).strip("-.")
    return s[:60] or "task"


def check_short_id(value: str) -> str:
    v = value.replace("-", "").lower()[:8]
    if not re.fullmatch(r"[0-9a-f]{8}", v):
        raise SystemExit("ERROR: --short-id must be the task's 8 hex characters (from the system prompt)")
    return v


def matches(folder: Path, sid: str, kind: str) -> list[Path]:
    return sorted(p for p in folder.glob(f"*-{sid}-*.{kind}.md") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Task constitution file names.")
    ap.add_argument("command", choices=("current", "new", "list"))
    ap.add_argument("--short-id", required=True)
    ap.add_argument("--name", default="")
    ap.add_argument("--kind", default="spec")
    ap.add_argument("--dir", default=".")
    ap.add_argument("--create", action="store_true")
    args = ap.parse_args(argv)
    sid = check_short_id(args.short_id)
    if not re.fullmatch(r"[a-z][a-z0-9_-]{0,30}", args.kind):
        print("ERROR: --kind must be a short lowercase word such as spec or outline", file=sys.stderr)
        return 2
    folder = Path(args.dir)
    found = matches(folder, sid, args.kind)
    if args.command == "current":
        if found:
            print(found[-1])
        return 0
    if args.command == "list":
        for p in found:
            print(p)
        return 0
    if not args.name.strip():
        print("ERROR: --name (the task name) is required for a new file", file=sys.stderr)
        return 2
    today = date.today().isoformat()
    path = folder / f"{today}-{sid}-{slug(args.name)}.{args.kind}.md"
    if args.create:
        if path.exists():
            print(f"{path} already exists (today's file); edit it", file=sys.stderr)
        else:
            body = found[-1].read_text(encoding="utf-8") if found else TEMPLATE.format(name=args.name, day=today)
            path.write_text(body, encoding="utf-8")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
