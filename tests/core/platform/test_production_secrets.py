"""Production refuses weak secrets (issue 22): JWT_SECRET, PLATFORM_KEY and the channel key, by length,
known placeholder values and too few distinct characters, with a start-up error that names the
variable and never shows the value. Checked on the settings, on the shipped examples and on a real
gateway process started the way a deployment starts it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from zcbot_core.platform.config import REPO_ROOT, ConfigError, Settings, ensure_local_secrets

STRONG = {
    "JWT_SECRET": "Qw8vJ2mZx1Lr7Ty4Nb6Pk0Hs3Dc9Fg5Va2Ue8Wi",
    "PLATFORM_KEY": "3e1f0c9d8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a",
    "ZCBOT_CHANNEL_SECRET_KEY": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
}


def production(**env: str) -> Settings:
    return Settings(**{"ZCBOT_ENV": "production", **STRONG, **env})


def test_strong_and_generated_secrets_are_accepted(tmp_path: Path) -> None:
    production().require_secrets()
    generated = ensure_local_secrets(tmp_path)  # what `zcbot up` writes
    production(**{k: generated[k] for k in STRONG}).require_secrets()
    without_channels = production()
    without_channels.zcbot_channel_secret_key = None  # no channels configured: no channel key needed
    without_channels.require_secrets()


WEAK = [
    ("JWT_SECRET", "CHANGE_ME", "placeholder"),
    ("JWT_SECRET", "change-me-" + "Qw8vJ2mZx1Lr7Ty4Nb6Pk0Hs3Dc9", "placeholder"),
    ("JWT_SECRET", "short-but-random-7Hk2", "at least 32"),
    ("JWT_SECRET", "a" * 64, "distinct"),
    ("JWT_SECRET", "ab" * 32, "distinct"),
    ("PLATFORM_KEY", "CHANGE_ME", "placeholder"),
    ("PLATFORM_KEY", "your-secret-" + "Qw8vJ2mZx1Lr7Ty4Nb6Pk0Hs3Dc9", "placeholder"),
    ("PLATFORM_KEY", "ExamplePlatformKey-Qw8vJ2mZx1Lr7Ty4Nb6Pk0", "placeholder"),
    ("PLATFORM_KEY", "0" * 40, "distinct"),
    ("ZCBOT_CHANNEL_SECRET_KEY", "CHANGE_ME", "placeholder"),
    ("ZCBOT_CHANNEL_SECRET_KEY", "9f86d081884c7d659a2feaa0c55ad015", "64 hex"),
    ("ZCBOT_CHANNEL_SECRET_KEY", "z" * 64, "64 hex"),
    ("ZCBOT_CHANNEL_SECRET_KEY", "0" * 64, "distinct"),
    ("ZCBOT_RUN_GRANT_KEY", "CHANGE_ME", "placeholder"),
    ("ZCBOT_RUN_GRANT_KEY", "short-but-random-7Hk2", "at least 32"),
]


@pytest.mark.parametrize(("name", "value", "why"), WEAK)
def test_weak_secrets_are_refused_in_production(name: str, value: str, why: str) -> None:
    with pytest.raises(ConfigError) as refused:
        production(**{name: value}).require_secrets()
    message = str(refused.value)
    assert name in message and why in message
    assert value not in message  # the value is never echoed
    Settings(**{**STRONG, name: value}).require_secrets()  # local development keeps any value


@pytest.mark.parametrize(("value", "why"), [(None, "must be set"), ("CHANGE_ME", "placeholder"), ("0" * 64, "distinct")])
def test_the_executor_needs_a_strong_grant_key_in_production(value: str | None, why: str) -> None:
    settings = production(ZCBOT_RUN_GRANT_KEY=value) if value else production()
    with pytest.raises(ConfigError) as refused:
        settings.require_grant_key()
    assert "ZCBOT_RUN_GRANT_KEY" in str(refused.value) and why in str(refused.value)
    assert value is None or value not in str(refused.value)
    strong = "Zr4Kp9Lm2Qx7Vb1Nc8Hd3Fs6Gt0Jw5Ye"
    assert production(ZCBOT_RUN_GRANT_KEY=strong).require_grant_key() == strong


def test_every_weak_secret_is_named_at_once() -> None:
    with pytest.raises(ConfigError) as refused:
        production(JWT_SECRET="CHANGE_ME", PLATFORM_KEY="CHANGE_ME", ZCBOT_CHANNEL_SECRET_KEY="CHANGE_ME").require_secrets()
    assert all(name in str(refused.value) for name in STRONG)


def _env_file(path: Path) -> dict[str, str]:
    pairs = (line.partition("=") for line in path.read_text().splitlines() if "=" in line and not line.startswith("#"))
    return {key.strip(): value.strip() for key, _, value in pairs}


def test_the_example_overlay_does_not_start_until_filled_in() -> None:
    example = _env_file(REPO_ROOT / "deploy/k8s/overlays/example/secrets/zcbot.env")
    with pytest.raises(ConfigError) as refused:
        production(**{k: example[k] for k in STRONG}).require_secrets()
    assert all(f"{name} is a placeholder value" in str(refused.value) for name in STRONG)


def test_a_production_gateway_refuses_to_start_with_a_placeholder_key(tmp_path: Path) -> None:
    """The real gateway entry point, as a container starts it: a clear one-line error, no traceback,
    before it opens a port or a connection."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZCBOT_", "JWT_", "PLATFORM_"))}
    env.update(STRONG, ZCBOT_ENV="production", PLATFORM_KEY="CHANGE_ME", ZCBOT_HOME=str(tmp_path),
               ZCBOT_DB_URL="postgresql://zcbot:x@127.0.0.1:1/zcbot", ZCBOT_NATS_URL="nats://127.0.0.1:1",
               LITELLM_LOCAL_MODEL_COST_MAP="True")
    done = subprocess.run([sys.executable, "-m", "zcbot_gateway.main"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0
    assert "zcbot gateway: ZCBOT_ENV=production refuses weak secrets: PLATFORM_KEY is a placeholder value" in done.stderr
    assert "Traceback" not in done.stderr and "CHANGE_ME" not in done.stderr
