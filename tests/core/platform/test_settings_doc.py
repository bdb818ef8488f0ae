"""Configuration: one pydantic settings class per service, validated at start-up, and the README's
table generated from those classes (this test fails when they disagree)."""

from __future__ import annotations

import pytest

from zcbot_channels.config import ChannelsServiceSettings
from zcbot_core.channels.settings import ChannelSettings
from zcbot_core.platform import settings_doc
from zcbot_core.platform.config import REPO_ROOT, ConfigError, Settings, load_settings
from zcbot_executor.config import ExecutorConfig, ExecutorSettings
from zcbot_runner.config import RunnerSettings
from zcbot_scheduler.config import SchedulerConfig


def test_readme_table_is_generated_from_the_settings_classes() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    block = settings_doc.render()
    assert block in readme, "README.md's settings table is stale: run `python -m zcbot_core.platform.settings_doc`"
    for name in ("ZCBOT_SKILLS_DIR", "ZCBOT_DOCKER_CPUS", "ZCBOT_SOFFICE", "ZCBOT_SCHEDULE_MISFIRE_GRACE_SECONDS"):
        assert f"| `{name}` |" in block
    undocumented = [alias for _, ref in settings_doc.SETTINGS_CLASSES
                    for alias, f in ((f.alias, f) for f in settings_doc.load_class(ref).model_fields.values()) if not f.description]
    assert undocumented == []


def test_executor_takes_an_explicit_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZCBOT_EXECUTOR_DRAIN_GRACE_SECONDS", "0")
    monkeypatch.setenv("ZCBOT_PROC_RETENTION_DAYS", "0")
    monkeypatch.setenv("ZCBOT_DOCKER_CPUS", "2.5")
    monkeypatch.setenv("ZCBOT_SANDBOX_CGROUP", "")  # empty: the default
    config = ExecutorConfig.from_settings(Settings())
    assert (config.drain_grace_seconds, config.proc_retention_days) == (0.0, 0.0)
    assert config.docker_cpus == 2.5 and config.cgroup_mode == "auto" and config.sandbox_gid == config.sandbox_uid


@pytest.mark.parametrize(("cls", "name", "value"), [
    (ExecutorSettings, "ZCBOT_BG_TIME_LIMIT_SECONDS", "0"),
    (ExecutorSettings, "ZCBOT_SANDBOX_CGROUP", "v3"),
    (ExecutorSettings, "ZCBOT_SANDBOX_MEMORY_MB", "lots"),
    (Settings, "ZCBOT_HTTP_PORT", "eighty"),
    (Settings, "ZCBOT_MAX_RUNS_PER_USER", "0"),  # every run would wait forever (issue 34)
    (RunnerSettings, "ZCBOT_MAX_RUNS_PER_USER", "-1"),
    (RunnerSettings, "ZCBOT_SCHEDULE_DEFAULT_TIMEZONE", "Mars/Olympus"),
])
def test_a_bad_value_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch, cls: type, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):
        load_settings(cls)


class _WithSecret(Settings):
    some_api_token: int = 0  # a secret-looking name that can fail validation


def test_a_bad_value_is_shown_but_a_secret_is_only_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZCBOT_SANDBOX_UID", "-1")
    with pytest.raises(ConfigError, match=r"ZCBOT_SANDBOX_UID: .*\(got '-1'\)"):
        load_settings(ExecutorSettings)
    monkeypatch.setenv("SOME_API_TOKEN", "s3cr3t-value")
    with pytest.raises(ConfigError) as info:
        load_settings(_WithSecret)
    assert "some_api_token" in str(info.value) and "s3cr3t" not in str(info.value)


def test_scheduler_knobs_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZCBOT_SCHEDULE_MISFIRE_GRACE_SECONDS", "0")
    monkeypatch.setenv("ZCBOT_SCHEDULER_BATCH", "7")
    monkeypatch.setenv("ZCBOT_REQUEUE_AFTER_SECONDS", "2.5")
    config = SchedulerConfig.from_env()
    assert (config.misfire_grace_seconds, config.batch, config.max_failures) == (0.0, 7, 3)
    assert config.requeue_after_seconds == 2.5
    monkeypatch.setenv("ZCBOT_SCHEDULER_BATCH", "0")
    with pytest.raises(ConfigError, match="ZCBOT_SCHEDULER_BATCH"):
        SchedulerConfig.from_env()


def test_channel_settings_keep_their_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    cs = ChannelSettings.from_env({"ZCBOT_WECOM_CORP_ID": " ww1 ", "ZCBOT_WECOM_AGENT_ID": "1000002", "ZCBOT_WECOM_SECRET": "",
                                   "ZCBOT_WECOM_BASE_URL": "http://127.0.0.1:1/", "ZCBOT_CHANNELS_REPLY_TIMEOUT_SECONDS": "-1"})
    assert (cs.wecom_corp_id, cs.wecom_agent_id, cs.wecom_secret) == ("ww1", 1000002, None)
    assert cs.wecom_base_url == "http://127.0.0.1:1" and cs.reply_timeout is None and not cs.wecom_send_enabled
    assert ChannelSettings.from_env({}).ilink_poll_timeout == 38.0
    with pytest.raises(ConfigError, match="numeric AgentId"):
        ChannelSettings.from_env({"ZCBOT_WECOM_AGENT_ID": "agent-7"})
    monkeypatch.setenv("ZCBOT_ILINK_POLL_TIMEOUT_SECONDS", "soon")
    with pytest.raises(ConfigError, match="ZCBOT_ILINK_POLL_TIMEOUT_SECONDS"):
        ChannelSettings.from_env()



def test_channels_service_and_gateway_read_the_channel_knobs_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """One class for the channels service (core + channel fields); the gateway's lazily read
    `ChannelSettings` gets the same values from the same environment."""
    monkeypatch.setenv("ZCBOT_WECOM_CORP_ID", " ww1 ")
    monkeypatch.setenv("ZCBOT_ILINK_BASE_URL", "http://127.0.0.1:1/")
    monkeypatch.setenv("ZCBOT_CHANNELS_REPLY_TIMEOUT_SECONDS", "-1")
    monkeypatch.setenv("ZCBOT_CHANNELS_PORT", "9999")
    service = load_settings(ChannelsServiceSettings)
    gateway = ChannelSettings.from_env()
    assert {name: getattr(service, name) for name in ChannelSettings.model_fields} == gateway.model_dump()
    assert (service.wecom_corp_id, service.ilink_base_url, service.reply_timeout) == ("ww1", "http://127.0.0.1:1", None)
    assert service.zcbot_channels_port == 9999
    extended = ChannelsServiceSettings.extend(Settings(ZCBOT_CHANNELS_PORT="1234"))  # in-process: given values win
    assert (extended.zcbot_channels_port, extended.wecom_corp_id) == (1234, "ww1")


def test_a_runner_default_timezone_is_checked_and_trimmed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZCBOT_SCHEDULE_DEFAULT_TIMEZONE", " Asia/Shanghai ")
    assert load_settings(RunnerSettings).zcbot_schedule_default_timezone == "Asia/Shanghai"
    monkeypatch.setenv("ZCBOT_SCHEDULE_DEFAULT_TIMEZONE", "")
    assert load_settings(RunnerSettings).zcbot_schedule_default_timezone == "UTC"


@pytest.mark.parametrize(("module", "name", "value"), [
    ("zcbot_gateway.main", "ZCBOT_HTTP_PORT", "abc"),
    ("zcbot_runner.main", "ZCBOT_RUNNER_CONCURRENCY", "many"),
    ("zcbot_runner.main", "ZCBOT_MAX_RUNS_PER_USER", "0"),
    ("zcbot_executor.main", "ZCBOT_BG_TIME_LIMIT_SECONDS", "0"),
    ("zcbot_scheduler.main", "ZCBOT_SCHEDULER_BATCH", "0"),
    ("zcbot_channels.main", "ZCBOT_WECOM_AGENT_ID", "x"),
])
def test_every_service_refuses_a_bad_value_at_start_up(module: str, name: str, value: str) -> None:
    """Before connecting anything: one line naming the variable, exit 1, no traceback."""
    import os
    import subprocess
    import sys

    env = {**os.environ, name: value}
    out = subprocess.run([sys.executable, "-m", module], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert name in out.stderr and "invalid configuration" in out.stderr and "Traceback" not in out.stderr
