"""Reading and checking `config/models/*.yaml` (the schema of a model profile file).

Every key is known and typed: a misspelt key (`max_contxt`) or a wrong type (`max_output: "lots"`)
is a `ProfileProblem` naming the file, the line and the key, never a silently ignored setting or an
internal error at run time; a file that is not valid YAML is one problem for every profile it defines.
`llm.profiles` turns the problems into start-up refusals (services) and clear run errors (a file
edited into an invalid state while the services run: that profile only; the others keep working).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# key -> (accepted Python types, description for the message); None allowed where listed
PROFILE_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "model": ((str,), "a string (provider/model, e.g. deepseek/deepseek-v4-flash)"),
    "api_base": ((str, type(None)), "a URL string"),
    "api_key_env": ((str, type(None)), "an environment variable name"),
    "api_key_optional": ((bool,), "true or false"),
    "max_context": ((int,), "a whole number of tokens"),
    "reliable_context": ((int,), "a whole number of tokens"),
    "max_output": ((int,), "a whole number of tokens"),
    "parallel_tools": ((bool,), "true or false"),
    "thinking": ((bool,), "true or false"),
    "prompt_caching": ((bool,), "true or false"),
    "reasoning_effort": ((str, type(None)), "a string (low | medium | high | max)"),
    "max_iterations": ((int,), "a whole number"),
    "temperature": ((float, int, type(None)), "a number"),
    "lean_stream": ((bool,), "true or false"),
    "pricing": ((dict,), "a mapping (input_per_mtok, output_per_mtok, cached_input_per_mtok, …)"),
}
RATE_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "input_per_mtok": ((float, int), "a number (USD per million tokens)"),
    "output_per_mtok": ((float, int), "a number (USD per million tokens)"),
    "cached_input_per_mtok": ((float, int, type(None)), "a number (USD per million tokens)"),
}
PRICING_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    **RATE_KEYS,
    "off_peak": ((dict,), "a mapping of the off-peak rates (input_per_mtok, output_per_mtok, cached_input_per_mtok)"),
    "peak_hours_utc": ((list,), 'a list of "HH:MM-HH:MM" UTC ranges'),
    "peak_weekdays": ((list,), "a list of ISO weekdays (1 = Monday … 7 = Sunday)"),
}


@dataclass(frozen=True)
class ProfileProblem:
    path: Path
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.path}{f':{self.line}' if self.line else ''}: {self.message}"


@dataclass
class ProfileFile:
    """One file: the profiles it defines (name -> merged keys) or the problems that disable them."""

    path: Path
    profiles: dict[str, dict[str, Any]]
    problems: dict[str, list[ProfileProblem]]  # profile name -> its problems


def _lines(node: yaml.Node | None, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    """(key path) -> 1-based line of every mapping key, nested."""
    out: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            name = (*prefix, str(key.value))
            out[name] = key.start_mark.line + 1
            out.update(_lines(value, name))
    return out


def _check(data: dict[str, Any], schema: dict[str, tuple[tuple[type, ...], str]], where: tuple[str, ...],
           path: Path, lines: dict[tuple[str, ...], int]) -> list[ProfileProblem]:
    problems = []
    for key, value in data.items():
        at = lines.get((*where, str(key)))
        label = ".".join((*where, str(key)))
        if key not in schema:
            problems.append(ProfileProblem(path, at, f"unknown key `{label}` (known: {', '.join(sorted(schema))})"))
            continue
        types, meaning = schema[key]
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            problems.append(ProfileProblem(path, at, f"`{label}` must be {meaning}, not {value!r}"))
        elif key == "pricing" and isinstance(value, dict):
            problems += _check(value, PRICING_KEYS, (*where, key), path, lines)
        elif key == "off_peak" and isinstance(value, dict):
            problems += _check(value, RATE_KEYS, (*where, key), path, lines)
        elif key in ("max_context", "reliable_context", "max_output", "max_iterations") and value <= 0:
            problems.append(ProfileProblem(path, at, f"`{label}` must be positive, not {value!r}"))
    return problems


def read_profile_file(path: Path) -> ProfileFile:
    base = path.stem
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        problem = ProfileProblem(path, mark.line + 1 if mark else None, f"not valid YAML ({what})")
        return ProfileFile(path, {}, {base: [problem]})
    if not isinstance(data, dict):
        return ProfileFile(path, {}, {base: [ProfileProblem(path, 1, "a model profile file must be a mapping")]})
    lines = _lines(node)
    variants = data.pop("variants", None)
    shared = _check(data, PROFILE_KEYS, (), path, lines)
    if variants is None:
        named = {base: (data, [])}
    elif not isinstance(variants, dict) or not variants:
        return ProfileFile(path, {}, {base: [*shared, ProfileProblem(
            path, lines.get(("variants",)), "`variants` must be a mapping of variant name -> keys")]})
    else:
        named = {}
        for variant, overrides in variants.items():
            if overrides is not None and not isinstance(overrides, dict):
                named[f"{base}.{variant}"] = ({}, [ProfileProblem(path, lines.get(("variants", str(variant))),
                                                                  f"variant `{variant}` must be a mapping")])
                continue
            own = _check(overrides or {}, PROFILE_KEYS, ("variants", str(variant)), path, lines)
            named[f"{base}.{variant}"] = ({**data, **(overrides or {})}, own)
    profiles: dict[str, dict[str, Any]] = {}
    problems: dict[str, list[ProfileProblem]] = {}
    for name, (merged, own) in named.items():
        found = [*shared, *own]
        if not found and not isinstance(merged.get("model"), str):
            found.append(ProfileProblem(path, None, f"profile {name} needs a `model` string"))
        if found:
            problems[name] = found
        else:
            profiles[name] = merged
    return ProfileFile(path, profiles, problems)
