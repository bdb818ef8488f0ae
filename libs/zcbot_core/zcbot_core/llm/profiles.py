"""Model profiles from `config/models/*.yaml` plus `ZCBOT_MODELS_DIR` (seed 003 §3.2).

`NAME.yaml` defines profile `NAME`; a file with `variants:` defines `NAME.VARIANT` for each, the
top-level keys being shared defaults. Later directories override earlier ones by profile name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from zcbot_core.config import ConfigError, Settings


@dataclass(frozen=True)
class Pricing:
    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0
    cached_input_per_mtok: float | None = None

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        cached_rate = self.cached_input_per_mtok if self.cached_input_per_mtok is not None else self.input_per_mtok
        uncached = max(prompt_tokens - cached_tokens, 0)
        return (uncached * self.input_per_mtok + cached_tokens * cached_rate + completion_tokens * self.output_per_mtok) / 1e6


@dataclass(frozen=True)
class Profile:
    name: str
    model: str
    api_base: str | None = None
    api_key_env: str | None = None
    api_key_optional: bool = False
    max_context: int = 128000
    reliable_context: int = 64000
    max_output: int = 8192
    parallel_tools: bool = True
    thinking: bool = False
    prompt_caching: bool = False
    reasoning_effort: str | None = None
    max_iterations: int = 100
    temperature: float | None = None
    pricing: Pricing | None = None
    # Read OpenAI-compatible streams without LiteLLM's stream wrapper (llm/lean.py); false = the wrapper.
    lean_stream: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def api_key(self) -> str | None:
        """The key from the environment; raises a ConfigError naming the variable when missing."""
        if not self.api_key_env:
            return None
        value = os.environ.get(self.api_key_env)
        if not value and not self.api_key_optional:
            raise MissingApiKey(self.api_key_env, self.name)
        return value or "sk-none"


class MissingApiKey(ConfigError):
    def __init__(self, variable: str, profile: str) -> None:
        super().__init__(f"model profile '{profile}' needs the environment variable {variable} (its API key), which is not set")
        self.variable = variable


_KNOWN = {f.name for f in fields(Profile)} - {"name", "pricing", "extra"}


def _build(name: str, data: dict[str, Any], source: Path) -> Profile:
    if not isinstance(data.get("model"), str):
        raise ConfigError(f"{source}: profile {name} needs a `model` string")
    pricing = data.get("pricing")
    kwargs = {k: v for k, v in data.items() if k in _KNOWN}
    extra = {k: v for k, v in data.items() if k not in _KNOWN and k not in ("pricing", "variants")}
    return Profile(name=name, pricing=Pricing(**pricing) if isinstance(pricing, dict) else None, extra=extra, **kwargs)


def load_profiles_from(dirs: list[Path]) -> dict[str, Profile]:
    profiles: dict[str, Profile] = {}
    for directory in dirs:
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.yml")):
            data = yaml.safe_load(path.read_text()) or {}
            if not isinstance(data, dict):
                raise ConfigError(f"{path}: a model profile file must be a mapping")
            base = path.stem
            variants = data.pop("variants", None)
            if variants:
                for variant, overrides in variants.items():
                    profiles[f"{base}.{variant}"] = _build(f"{base}.{variant}", {**data, **(overrides or {})}, path)
            else:
                profiles[base] = _build(base, data, path)
    return profiles


_CACHE: dict[tuple[Path, ...], tuple[float, dict[str, Profile]]] = {}


def load_profiles(settings: Settings) -> dict[str, Profile]:
    dirs = tuple(settings.models_dirs)
    stamp = max((p.stat().st_mtime for d in dirs if d.is_dir() for p in d.iterdir()), default=0.0)
    cached = _CACHE.get(dirs)
    if cached and cached[0] == stamp:
        return cached[1]
    profiles = load_profiles_from(list(dirs))
    _CACHE[dirs] = (stamp, profiles)
    return profiles


def get_profile(settings: Settings, name: str | None) -> Profile:
    profiles = load_profiles(settings)
    key = name or settings.zcbot_default_model
    if key not in profiles:
        raise ConfigError(f"unknown model profile '{key}' (known: {', '.join(sorted(profiles))})")
    return profiles[key]
