"""Regroup `zcbot_core`'s flat modules by concern (issue 41, first bullet): the record of the move, and
the way to replay it on a later main.

    .venv/bin/python tools/regroup_core.py            # from the repository root
    .venv/bin/python tools/regroup_core.py --check    # say what is left to do, change nothing

What it does, mechanically and idempotently (a second run changes nothing):
1. creates the new packages (`platform/`, `accounts/`, `workspace/`) with an `__init__.py` that says
   what lives there and who may import it;
2. `git mv`s each flat module of `MOVES` to its package (a module already moved is skipped; one found
   at both places stops the run: somebody re-created the old module, merge it by hand first);
3. rewrites every reference to an old module in the files git tracks (code, tests, docs, pyproject,
   Dockerfile, deploy/): dotted names (`zcbot_core.config` -> `zcbot_core.platform.config`, which
   covers `import`, `from … import`, mock/patch targets, logger names, mypy overrides and
   `python -m`), file paths (`zcbot_core/paths.py` -> `zcbot_core/safe_fs/paths.py`) and
   `from zcbot_core import a, b` (split per package, by the syntax tree, so aliases and other names
   stay); no compatibility shim is left at the old place;
4. sorts the imports of the changed Python files (`ruff check --select I --fix`) and prints a summary;
5. checks that no Python file still imports an old name (absolute or relative) and no file still
   names one; the exit status is 1 when something is left for a human (listed), else 0.

A module's own `Path(__file__).parents[N]` (config.REPO_ROOT) is raised by the depth it moved.
This file is the one place that still spells the old names: it is skipped by the rewrite.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

CORE = Path("libs/zcbot_core/zcbot_core")
SELF = Path("tools/regroup_core.py")

# old flat module -> its new home (relative to zcbot_core, dotted)
MOVES: dict[str, str] = {
    # process plumbing every service shares
    "config": "platform.config",
    "settings_doc": "platform.settings_doc",
    "logs": "platform.logs",
    "service": "platform.service",
    "worker": "platform.worker",
    # who a user is and what they may spend
    "auth": "accounts.auth",
    "users_admin": "accounts.users_admin",
    "budgets": "accounts.budgets",
    "usage": "accounts.usage",
    # a user's folder and what it holds
    "folders": "workspace.folders",
    "memory": "workspace.memory",
    "skills": "workspace.skills",
    "shortcuts": "workspace.shortcuts",
    "constitution": "workspace.constitution",
    "tasks": "workspace.tasks",
    # a check on what a tool call made (a toolbox after-hook over `tools.results`): beside the tools,
    # so `workspace/` does not import `tools/` (the sketch put it in workspace/)
    "pptx_guard": "tools.pptx_guard",
    # the path rules safe_fs builds on: the paths <-> safe_fs import cycle becomes one package
    "paths": "safe_fs.paths",
    # channel pieces
    "push": "channels.push",
    "channels_crypto": "channels.sealing",
}

NEW_PACKAGES: dict[str, str] = {
    "platform": '''"""Process plumbing every zcbot service shares: the settings object (`config`), its README table
(`settings_doc`), logging (`logs`), a service's lifecycle and runtime (`service`) and the background-task /
pull-consumer toolkit (`worker`).

Anything may import it; it imports only `platform`, `bus`, `db` and `errors` of zcbot_core (and the model
profile check at start-up, `llm.profiles`), never a feature (tests/core/test_import_rules.py).
"""
''',
    "accounts": '''"""Who a user is and what they may spend: passwords and tokens (`auth`), the admin's user commands
(`users_admin`), the daily/monthly budgets (`budgets`) and the usage ledger (`usage`).

Imported by the services and by the agent's budget checks; it imports the platform, db and the model
client's cost figures, never a service.
"""
''',
    "workspace": '''"""A user's workspace on disk: task folders and creating a task in one (`folders`, `tasks`), memory
(`memory`), shortcuts (`shortcuts`), skills (`skills`) and the task constitution's naming rule
(`constitution`).

Imported by the services, the tools and the channels; it imports the platform, db and `safe_fs` (every file
in a user's tree is reached through it), never a service nor `tools/`.
"""
''',
}

# Where references are rewritten: every file git tracks under these (plus the top-level files below).
SCOPES = ("libs/", "services/", "tests/", "bench/", "docs/", "deploy/", "tools/", "skills/", "config/", ".ci/")
TOP_FILES = ("pyproject.toml", "setup.py", "Dockerfile", "README.md", "docker-compose.yml", ".dockerignore")

_ALT = "|".join(sorted(MOVES, key=len, reverse=True))
DOTTED = re.compile(rf"(?<![\w.])zcbot_core\.({_ALT})(?!\w)")
FILEPATH = re.compile(rf"(?<![\w.])zcbot_core/({_ALT})\.py\b")
# a renamed module's bare name in Python files (docstrings): `channels_crypto` -> `channels.sealing`
BARE = {old: new for old, new in MOVES.items() if new.rpartition(".")[2] != old}
BARE_RE = re.compile(rf"(?<![\w./])({'|'.join(BARE)})(?!\w)") if BARE else None


def git(*args: str, check: bool = True) -> str:
    return subprocess.run(["git", *args], check=check, capture_output=True, text=True).stdout


def module_file(dotted: str) -> Path:
    return CORE.joinpath(*dotted.split(".")).with_suffix(".py")


# --- 1, 2: packages and moves -------------------------------------------------------------------

def make_packages(dry: bool, log: list[str]) -> None:
    for pkg, doc in NEW_PACKAGES.items():
        init = CORE / pkg / "__init__.py"
        if init.exists():
            continue
        log.append(f"create {init}")
        if not dry:
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text(doc, encoding="utf-8")
            git("add", str(init))


def deepen(path: Path, delta: int) -> list[str]:
    """Raise `Path(__file__)…parents[N]` by the depth the module moved; list other `__file__` uses."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    other = []
    for i, line in enumerate(lines):
        if "__file__" not in line:
            continue
        new = re.sub(r"parents\[(\d+)\]", lambda m: f"parents[{int(m.group(1)) + delta}]", line)
        if new == line:
            other.append(f"{path}:{i + 1}: uses __file__ (check it after the move): {line.strip()}")
        lines[i] = new
    path.write_text("".join(lines), encoding="utf-8")
    return other


def move_modules(dry: bool, log: list[str], problems: list[str]) -> list[str]:
    moved = []
    for old, new in MOVES.items():
        src, dst = CORE / f"{old}.py", module_file(new)
        if src.exists() and dst.exists():
            problems.append(f"{src} and {dst} both exist: merge the old module into the new one by hand, then rerun")
        elif src.exists():
            log.append(f"git mv {src} {dst}")
            moved.append(old)
            if not dry:
                git("mv", str(src), str(dst))
                problems.extend(deepen(dst, new.count(".")))
        elif not dst.exists():
            problems.append(f"neither {src} nor {dst} exists: is {old!r} gone? (drop it from MOVES)")
    return moved


# --- 3: references ------------------------------------------------------------------------------

def tracked_files() -> list[Path]:
    files = []
    for name in git("ls-files", "-z").split("\0"):
        if not name or Path(name) == SELF:
            continue
        if name.startswith(SCOPES) or name in TOP_FILES:
            path = Path(name)
            if path.is_file():
                files.append(path)
    return files


def split_core_imports(text: str, path: Path, problems: list[str]) -> tuple[str, int]:
    """`from zcbot_core import config, paths as p, safe_fs` -> one statement per package."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        if re.search(rf"from zcbot_core import .*\b({_ALT})\b", text):
            problems.append(f"{path}: not parsable Python naming an old module after `from zcbot_core import`")
        return text, 0
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "zcbot_core"):
            continue
        if not any(alias.name in MOVES for alias in node.names):
            continue
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        head, tail = lines[first][: node.col_offset], lines[last][node.end_col_offset or 0:]
        inner = "".join(lines[first: last + 1])
        comment = tail.strip()
        if head.strip() or (comment and not comment.startswith("#")) or inner.count("#") > (1 if comment else 0):
            problems.append(f"{path}:{node.lineno}: `from zcbot_core import …` shares its lines; rewrite it by hand")
            continue
        groups: dict[str, list[str]] = {}
        for alias in node.names:
            package, name = "zcbot_core", alias.name
            if name in MOVES:
                package, _, name = f"zcbot_core.{MOVES[name]}".rpartition(".")
            groups.setdefault(package, []).append(name + (f" as {alias.asname}" if alias.asname else ""))
        stmts = [f"{head}from {package} import {', '.join(names)}" for package, names in groups.items()]
        if comment:
            stmts[-1] += f"  {comment}"
        edits.append((first, last, [s + "\n" for s in stmts]))
    for first, last, new in sorted(edits, reverse=True):
        lines[first: last + 1] = new
    return "".join(lines), len(edits)


def rewrite_text(text: str, python: bool) -> tuple[str, Counter[str]]:
    counts: Counter[str] = Counter()

    def dotted(m: re.Match[str]) -> str:
        counts[m.group(1)] += 1
        return f"zcbot_core.{MOVES[m.group(1)]}"

    def filepath(m: re.Match[str]) -> str:
        counts[m.group(1)] += 1
        return "zcbot_core/" + MOVES[m.group(1)].replace(".", "/") + ".py"

    def bare(m: re.Match[str]) -> str:
        counts[m.group(1)] += 1
        return BARE[m.group(1)]

    text = DOTTED.sub(dotted, text)
    text = FILEPATH.sub(filepath, text)
    if python and BARE_RE is not None:  # docstrings; prose may name the old file on purpose (decisions.md)
        text = BARE_RE.sub(bare, text)
    return text, counts


def rewrite_references(dry: bool, problems: list[str]) -> tuple[list[Path], Counter[str]]:
    changed, total = [], Counter()
    for path in tracked_files():
        raw = path.read_bytes()
        if b"\0" in raw:
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        new = text
        if path.suffix == ".py":
            new, n = split_core_imports(new, path, problems)
            if n:
                total["from zcbot_core import"] += n
        new, counts = rewrite_text(new, path.suffix == ".py")
        total.update(counts)
        if new != text:
            changed.append(path)
            if not dry:
                path.write_text(new, encoding="utf-8")
    return changed, total


# --- 4, 5: lint and check -----------------------------------------------------------------------

def ruff_imports(py_files: list[Path]) -> str:
    ruff = Path(".venv/bin/ruff")
    cmd = [str(ruff) if ruff.exists() else "ruff", "check", "--select", "I", "--fix", "--quiet"]
    out = ""
    for i in range(0, len(py_files), 200):
        res = subprocess.run([*cmd, *map(str, py_files[i: i + 200])], capture_output=True, text=True)
        out += res.stdout + res.stderr
    # then every rule, reported only: what the sort could not settle is for a human
    for i in range(0, len(py_files), 200):
        res = subprocess.run([cmd[0], "check", "--quiet", *map(str, py_files[i: i + 200])], capture_output=True, text=True)
        out += res.stdout + res.stderr
    return out.strip()


def leftovers() -> list[str]:
    """Imports of an old module (absolute or relative) and any file still naming one."""
    old = {f"zcbot_core.{m}" for m in MOVES}
    found = []
    for path in tracked_files():
        if path.suffix != ".py":
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        parts = path.with_suffix("").parts
        package = ".".join(parts[parts.index("zcbot_core", 2) if "zcbot_core" in parts[2:] else 0:][:-1])
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = package.split(".")
                    kept = pkg[: len(pkg) - node.level + 1]
                    base = ".".join([*kept, base] if base else kept)
                names = [base, *(f"{base}.{a.name}" for a in node.names)]
            hit = [n for n in names if n in old or any(n.startswith(o + ".") for o in old)]
            if hit:
                found.append(f"{path}:{node.lineno}: imports {hit[0]}")
    for path in tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, ValueError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if DOTTED.search(line) or FILEPATH.search(line):
                found.append(f"{path}:{n}: still names an old module: {line.strip()[:100]}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report what is left to do; change nothing")
    args = parser.parse_args()
    if not (CORE.is_dir() and Path("pyproject.toml").is_file()):
        print("run me from the repository root", file=sys.stderr)
        return 2
    log: list[str] = []
    problems: list[str] = []
    make_packages(args.check, log)
    moved = move_modules(args.check, log, problems)
    changed, counts = rewrite_references(args.check, problems)
    lint = ""
    py = [p for p in changed if p.suffix == ".py" and p.exists()]
    py += [module_file(MOVES[m]) for m in moved if module_file(MOVES[m]) not in py and module_file(MOVES[m]).exists()]
    if py and not args.check:
        lint = ruff_imports(py)
    for line in log:
        print(line)
    print(f"moved {len(moved)} of {len(MOVES)} modules; {len(changed)} files rewritten "
          f"({sum(counts.values())} references)")
    by_top = Counter(p.parts[0] if len(p.parts) > 1 else p.name for p in changed)
    if by_top:
        print("  files per folder: " + ", ".join(f"{k} {v}" for k, v in sorted(by_top.items())))
    if counts:
        print("  references per module: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    if lint:
        print("ruff:\n" + lint)
    if not args.check:
        problems += leftovers()
    for problem in problems:
        print("LEFT:", problem)
    if args.check:
        return 1 if (log or changed or problems) else 0
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
