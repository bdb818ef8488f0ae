"""docker-compose.yml as Compose itself reads it: YAML (with merge keys), then interpolation.

`load(path, env)` returns the project after Compose's variable interpolation (`$$`, `$VAR`,
`${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?error}`, `${VAR?error}`, `${VAR:+alt}`,
`${VAR+alt}`); a missing required variable raises `MissingVariable` with Compose's message.
`spec_errors(project)` parses it with the `compose-spec` package (the Rust `compose_spec` crate:
a strict Compose Specification parser; unknown keys, bad enums and bad durations fail).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_VAR = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


class MissingVariable(ValueError):
    pass


def interpolate_string(text: str, env: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(1):
            return "$"
        name = m.group(2) or m.group(5)
        op, arg = m.group(3), m.group(4) or ""
        if "${" in arg:
            raise ValueError(f"nested interpolation is not supported here: {m.group(0)}")
        value = env.get(name)
        unset_or_empty = value is None or value == ""
        if op in (None,):
            return value or ""
        if op == ":-":
            return arg if unset_or_empty else value
        if op == "-":
            return arg if value is None else value
        if op == ":?":
            if unset_or_empty:
                raise MissingVariable(f"required variable {name} is missing a value: {arg}")
            return value
        if op == "?":
            if value is None:
                raise MissingVariable(f"required variable {name} is missing a value: {arg}")
            return value
        if op == ":+":
            return "" if unset_or_empty else arg
        if op == "+":
            return "" if value is None else arg
        raise AssertionError(op)

    return _VAR.sub(sub, text)


def interpolate(node: Any, env: dict[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate_string(node, env)
    if isinstance(node, list):
        return [interpolate(i, env) for i in node]
    if isinstance(node, dict):
        return {k: interpolate(v, env) for k, v in node.items()}
    return node


def raw(path: Path) -> dict[str, Any]:
    return yaml.load(path.read_text(), Loader=Loader)


def load(path: Path, env: dict[str, str]) -> dict[str, Any]:
    return interpolate(raw(path), env)


def references(node: Any) -> list[tuple[str, str | None]]:
    """Every `(variable, operator)` the file references (operator None for `$VAR` / `${VAR}`)."""
    if isinstance(node, str):
        return [(m.group(2) or m.group(5), m.group(3)) for m in _VAR.finditer(node) if not m.group(1)]
    items = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    return [ref for item in items for ref in references(item)]


def spec_errors(project: dict[str, Any]) -> list[str]:
    from compose_spec import PyCompose

    try:
        PyCompose.from_yaml(yaml.safe_dump(project, sort_keys=False))
    except Exception as exc:  # the binding raises ValueError with the parser's message
        return [str(exc)]
    return []


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}
