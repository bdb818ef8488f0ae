"""Model profile files are checked on load: file, line and key for every problem; an invalid file
disables only its own profiles at run time, and the services refuse to start on it."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import litellm
import pytest

from zcbot_core.llm.profiles import Pricing, ProfileError, check_profiles, get_profile, load_registry
from zcbot_core.platform.config import Settings

REPO = Path(__file__).resolve().parents[2]
GOOD = "model: openai/fake-model\nmax_context: 1000\nreliable_context: 800\n"

BAD_FILES = [
    ("typo", GOOD + "max_contxt: 5000\n", 4, "unknown key `max_contxt`"),
    ("wrong_type", GOOD + 'max_output: "lots"\n', 4, "`max_output` must be a whole number"),
    ("bool_for_int", GOOD + "max_output: true\n", 4, "`max_output` must be a whole number"),
    ("string_for_bool", GOOD + "thinking: yes please\n", 4, "`thinking` must be true or false"),
    ("not_yaml", GOOD + "pricing: {input_per_mtok: 1.0\nthinking: true\n", 5, "not valid YAML"),
    ("pricing_typo", GOOD + "pricing:\n  input_per_mtok: 1.0\n  cache_input_per_mtok: 0.1\n", 6,
     "unknown key `pricing.cache_input_per_mtok`"),
    ("variant_typo", GOOD + "variants:\n  small:\n    max_ouput: 10\n", 6, "unknown key `variants.small.max_ouput`"),
    ("no_model", "max_context: 1000\n", None, "needs a `model` string"),
    ("negative", GOOD + "max_output: -1\n", 4, "`max_output` must be positive"),
]


@pytest.mark.parametrize(("name", "text", "line", "expected"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_problems_name_file_line_and_key(tmp_path: Path, name: str, text: str, line: int | None, expected: str) -> None:
    (tmp_path / f"{name}.yaml").write_text(text)
    (tmp_path / "fine.yaml").write_text(GOOD)
    loaded = load_registry([tmp_path])
    assert "fine" in loaded.profiles  # the other profiles keep working
    problems = [p for found in loaded.problems.values() for p in found]
    assert len(problems) == 1 and expected in problems[0].message, problems
    assert problems[0].line == line
    where = f"{tmp_path / f'{name}.yaml'}" + (f":{line}" if line else "")
    assert str(problems[0]).startswith(where)
    assert not any(p.startswith(name) for p in loaded.profiles)


def _settings(models: Path, monkeypatch: pytest.MonkeyPatch, default: str = "fine") -> Settings:
    monkeypatch.setenv("ZCBOT_MODELS_DIR", str(models))
    monkeypatch.setenv("ZCBOT_DEFAULT_MODEL", default)
    return Settings()


def test_an_invalid_profile_is_a_clear_error_for_its_runs_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fine.yaml").write_text(GOOD)
    (tmp_path / "broken.yaml").write_text("model: [unclosed\n")
    settings = _settings(tmp_path, monkeypatch)
    assert get_profile(settings, "fine").model == "openai/fake-model"
    with pytest.raises(ProfileError, match=r"broken\.yaml:\d+: not valid YAML"):
        get_profile(settings, "broken")
    with pytest.raises(ProfileError, match=r"invalid model profile\(s\): .*broken\.yaml"):
        check_profiles(settings)


def test_the_shipped_profiles_are_valid(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    loaded = load_registry([REPO / "config" / "models"])
    assert loaded.problems == {}
    assert {"deepseek_v4.flash", "deepseek_v4.pro", "claude", "openai", "local"} <= set(loaded.profiles)


@pytest.mark.parametrize("variant", ["flash", "pro"])
def test_deepseek_rates_match_litellms_cost_map(variant: str) -> None:
    """Issue 20.7: the profile's rates (peak and off-peak) are LiteLLM's bundled DeepSeek rates."""
    profile = load_registry([REPO / "config" / "models"]).profiles[f"deepseek_v4.{variant}"]
    info = litellm.model_cost[f"deepseek/deepseek-v4-{variant}"]
    pricing = profile.pricing
    assert pricing is not None and pricing.off_peak is not None
    for rates, source in ((pricing, info), (pricing.off_peak, info["off_peak_pricing"])):
        assert rates.input_per_mtok == pytest.approx(source["input_cost_per_token"] * 1e6)
        assert rates.output_per_mtok == pytest.approx(source["output_cost_per_token"] * 1e6)
        assert rates.cached_input_per_mtok == pytest.approx(source["cache_read_input_token_cost"] * 1e6)


def test_peak_and_off_peak_rates() -> None:
    pricing = Pricing(1.0, 4.0, 0.1, off_peak=Pricing(0.5, 2.0, 0.05), peak_hours_utc=("01:00-04:00", "06:00-10:00"))
    tuesday = lambda h, m=0: datetime(2026, 12, 1, h, m, tzinfo=timezone.utc)  # noqa: E731  (2026-12-01 is a Tuesday)
    peak = pricing.cost(1_000_000, 1_000_000, 500_000, at=tuesday(2))
    assert peak == pytest.approx(0.5 * 1.0 + 0.5 * 0.1 + 4.0)
    assert pricing.cost(1_000_000, 1_000_000, 500_000, at=tuesday(5)) == pytest.approx(peak / 2)
    assert pricing.cost(1_000_000, 0, at=tuesday(9, 59)) == pytest.approx(1.0)
    assert pricing.cost(1_000_000, 0, at=tuesday(10)) == pytest.approx(0.5)
    saturday = datetime(2026, 12, 5, 2, tzinfo=timezone.utc)
    assert pricing.cost(1_000_000, 0, at=saturday) == pytest.approx(0.5)
    assert Pricing(1.0, 4.0).cost(1_000_000, 0, at=saturday) == pytest.approx(1.0)  # no off-peak: one rate


def _cli(args: list[str], models: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ZCBOT_MODELS_DIR": str(models), "ZCBOT_DEFAULT_MODEL": "broken",
           "ZCBOT_DATA_DIR": str(tmp_path / "data"), "ZCBOT_HOME": str(tmp_path / "home"),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "JWT_SECRET": "j" * 48, "PLATFORM_KEY": "p" * 48}
    return subprocess.run([sys.executable, "-m", "zcbot_devstack.cli", *args], env=env, capture_output=True, text=True,
                          timeout=60, cwd=REPO)


@pytest.mark.parametrize("args", [["probe"], ["up"], ["runner"]], ids=["probe", "up", "runner"])
def test_commands_refuse_an_invalid_profile_without_a_traceback(tmp_path: Path, args: list[str]) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "broken.yaml").write_text(GOOD + "max_contxt: 5\n")
    done = _cli(args, models, tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert "broken.yaml:4" in done.stderr and "max_contxt" in done.stderr
