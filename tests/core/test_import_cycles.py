"""No import cycles between the project's modules (issue 21): every `import` counts, at module level,
under `TYPE_CHECKING` and inside a function alike (a cycle dodged by a late import is still a cycle
in the design). A new cycle fails here with its modules; none is known (the paths <-> safe_fs cycle went
when paths.py moved into safe_fs/, the executor's bg_watch <-> procs one when they became its background/
package, issue 41).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KNOWN: dict[frozenset[str], str] = {}  # the modules of a cycle -> why it stays (for now)


def package_roots() -> dict[str, Path]:
    roots = {"zcbot_core": REPO / "libs/zcbot_core/zcbot_core"}
    for pkg in sorted(REPO.glob("services/*/zcbot_*")) + sorted(REPO.glob("libs/*/zcbot_*")):
        if pkg.is_dir():
            roots.setdefault(pkg.name, pkg)
    return roots


def module_files() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for root in package_roots().values():
        for file in root.rglob("*.py"):
            parts = list(file.relative_to(root.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = file
    return mods


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, file in mods.items():
        package = mod if file.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    kept = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*kept, base] if base else kept)
                names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            for name in names:
                target = known(name)
                # a module importing its own package's __init__ (or itself) is no cycle
                if target is not None and target != mod and not mod.startswith(target + "."):
                    graph[mod].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_checker_sees_a_cycle_hidden_in_a_function(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert cycles(graph) == [frozenset({"a", "b"})]
    pkg = tmp_path / "zcbot_demo"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "one.py").write_text("def f():\n    from zcbot_demo import two\n")
    (pkg / "two.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from zcbot_demo.one import f\n")
    mods = {"zcbot_demo": pkg / "__init__.py", "zcbot_demo.one": pkg / "one.py", "zcbot_demo.two": pkg / "two.py"}
    assert cycles(import_graph(mods)) == [frozenset({"zcbot_demo.one", "zcbot_demo.two"})]


def test_no_import_cycle_but_the_known_ones() -> None:
    mods = module_files()
    assert "zcbot_gateway.app" in mods and "zcbot_channels.service" in mods
    found = cycles(import_graph(mods))
    new = [sorted(c) for c in found if c not in KNOWN]
    assert not new, f"import cycles: {new}"
