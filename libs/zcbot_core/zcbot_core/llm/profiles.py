"""Model profiles from `config/models/*.yaml` plus `ZCBOT_MODELS_DIR` (seed 003 §3.2).

`NAME.yaml` defines profile `NAME`; a file with `variants:` defines `NAME.VARIANT` for each, the
top-level keys being shared defaults. Later directories override earlier ones by profile name.
Files are checked on load (`llm.profile_files`): the services refuse to start while one is invalid
(`check_profiles`); one made invalid while they run disables only its own profiles, whose runs end
with an error naming the file, line and key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from zcbot_core.llm.profile_files import ProfileProblem, read_profile_file
from zcbot_core.platform.config import ConfigError, Settings


@dataclass(frozen=True)
class Pricing:
    """USD per million tokens. With `off_peak`, these are the peak rates, charged in `peak_hours_utc`
    on `peak_weekdays` (ISO, 1 = Monday); every other hour is billed at the `off_peak` rates (DeepSeek
    since 2026-08-16: peak 09:00-12:00 and 14:00-18:00 Beijing time on weekdays, off-peak half)."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0
    cached_input_per_mtok: float | None = None
    off_peak: Pricing | None = None
    peak_hours_utc: tuple[str, ...] = ()
    peak_weekdays: tuple[int, ...] = (1, 2, 3, 4, 5)

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> Pricing:
        off_peak = data.get("off_peak")
        return cls(input_per_mtok=float(data.get("input_per_mtok", 0.0)),
                   output_per_mtok=float(data.get("output_per_mtok", 0.0)),
                   cached_input_per_mtok=(float(data["cached_input_per_mtok"])
                                          if data.get("cached_input_per_mtok") is not None else None),
                   off_peak=cls.from_mapping(off_peak) if isinstance(off_peak, dict) else None,
                   peak_hours_utc=tuple(str(h) for h in data.get("peak_hours_utc") or ()),
                   peak_weekdays=tuple(int(d) for d in data.get("peak_weekdays") or (1, 2, 3, 4, 5)))

    def is_peak(self, at: datetime) -> bool:
        at = at.astimezone(timezone.utc)
        if at.isoweekday() not in self.peak_weekdays:
            return False
        minute = at.hour * 60 + at.minute
        for span in self.peak_hours_utc:
            start, _, end = span.partition("-")
            first, last = _minutes(start), _minutes(end)
            if first <= minute < last:
                return True
        return False

    def rates_at(self, at: datetime | None = None) -> Pricing:
        if self.off_peak is None:
            return self
        return self if self.is_peak(at or datetime.now(timezone.utc)) else self.off_peak

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0,
             at: datetime | None = None) -> float:
        rates = self.rates_at(at)
        cached_rate = rates.cached_input_per_mtok if rates.cached_input_per_mtok is not None else rates.input_per_mtok
        uncached = max(prompt_tokens - cached_tokens, 0)
        return (uncached * rates.input_per_mtok + cached_tokens * cached_rate
                + completion_tokens * rates.output_per_mtok) / 1e6


def _minutes(hhmm: str) -> int:
    hours, _, minutes = hhmm.strip().partition(":")
    return int(hours) * 60 + int(minutes or 0)


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

    def api_key(self) -> str | None:
        """The key from the environment; raises a ConfigError naming the variable when missing."""
        if not self.api_key_env:
            return None
        # raw: the profile file names the variable (data, not a setting); read when needed, never stored
        value = os.environ.get(self.api_key_env)
        if not value and not self.api_key_optional:
            raise MissingApiKey(self.api_key_env, self.name)
        return value or "sk-none"


class MissingApiKey(ConfigError):
    code = "missing_api_key"

    def __init__(self, variable: str, profile: str) -> None:
        super().__init__(f"model profile '{profile}' needs the environment variable {variable} (its API key), which is not set")
        self.variable = variable


class ProfileError(ConfigError):
    """A model profile file is invalid; the message names the file, the line and the key."""

    code = "profile_error"


def _build(name: str, data: dict[str, Any]) -> Profile:
    pricing = data.get("pricing")
    kwargs = {k: v for k, v in data.items() if k != "pricing"}
    return Profile(name=name, pricing=Pricing.from_mapping(pricing) if isinstance(pricing, dict) else None, **kwargs)


@dataclass
class Registry:
    profiles: dict[str, Profile]
    problems: dict[str, list[ProfileProblem]]  # invalid profile (or file stem) -> why

    def problem_text(self) -> str:
        return "; ".join(str(p) for found in self.problems.values() for p in found)


def load_registry(dirs: list[Path]) -> Registry:
    """Every profile of `dirs` (later directories override earlier ones by name, an invalid
    definition included: it disables the name rather than falling back to the earlier one)."""
    registry = Registry({}, {})
    for directory in dirs:
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.yml")):
            read = read_profile_file(path)
            for name, data in read.profiles.items():
                registry.profiles[name] = _build(name, data)
                registry.problems.pop(name, None)
            for name, found in read.problems.items():
                registry.problems[name] = found
                registry.profiles.pop(name, None)
    return registry


def load_profiles_from(dirs: list[Path]) -> dict[str, Profile]:
    return load_registry(dirs).profiles


_CACHE: dict[tuple[Path, ...], tuple[float, Registry]] = {}


def registry(settings: Settings) -> Registry:
    dirs = tuple(settings.models_dirs)
    stamp = max((p.stat().st_mtime for d in dirs if d.is_dir() for p in d.iterdir()), default=0.0)
    cached = _CACHE.get(dirs)
    if cached and cached[0] == stamp:
        return cached[1]
    loaded = load_registry(list(dirs))
    _CACHE[dirs] = (stamp, loaded)
    return loaded


def load_profiles(settings: Settings) -> dict[str, Profile]:
    """The valid profiles (an invalid one is missing here; `get_profile` says why)."""
    return registry(settings).profiles


def check_profiles(settings: Settings) -> None:
    """At start-up (`zcbot up`, every service): refuse to start while any profile file is invalid,
    naming each problem (file:line: key)."""
    loaded = registry(settings)
    if loaded.problems:
        raise ProfileError(f"invalid model profile(s): {loaded.problem_text()}")


def get_profile(settings: Settings, name: str | None) -> Profile:
    loaded = registry(settings)
    key = name or settings.zcbot_default_model
    if key not in loaded.profiles:
        found = loaded.problems.get(key) or loaded.problems.get(key.split(".")[0])
        if found:
            raise ProfileError(f"model profile '{key}' is invalid: {'; '.join(map(str, found))}")
        raise ConfigError(f"unknown model profile '{key}' (known: {', '.join(sorted(loaded.profiles))})")
    return loaded.profiles[key]
