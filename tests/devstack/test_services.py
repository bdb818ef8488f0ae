"""The service registry is the one list: every entry's module runs a service, its port variable is the
one its settings read, and the `zcbot` command offers exactly these services."""

from __future__ import annotations

import importlib

import pytest

from zcbot_core.platform.config import Settings
from zcbot_devstack.cli import build_parser
from zcbot_devstack.services import BY_NAME, NAMES, SERVICE_PORT_ENV, SERVICES, service_port


def test_names_are_unique_and_in_start_order() -> None:
    assert NAMES == ("gateway", "runner", "executor", "scheduler", "channels")
    assert set(BY_NAME) == set(NAMES) == set(SERVICE_PORT_ENV)


@pytest.mark.parametrize("spec", SERVICES, ids=NAMES)
def test_each_entry_names_a_runnable_module(spec) -> None:
    assert callable(importlib.import_module(spec.module).main)


@pytest.mark.parametrize("spec", SERVICES, ids=NAMES)
def test_each_port_variable_is_the_one_the_settings_read(spec, monkeypatch: pytest.MonkeyPatch) -> None:
    for other in SERVICES:
        monkeypatch.delenv(other.port_env, raising=False)
    monkeypatch.setenv(spec.port_env, "40123")
    settings = Settings()
    assert spec.port(settings) == service_port(settings, spec.name) == 40123
    assert all(o.port(settings) != 40123 for o in SERVICES if o is not spec)


@pytest.mark.parametrize("name", NAMES)
def test_the_command_runs_each_registered_service(name: str) -> None:
    assert build_parser().parse_args([name]).cmd == name
    assert build_parser().parse_args(["up", "--only", name]).only == [name]


def test_the_command_knows_no_other_service(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--only", "mailer"])
    assert "invalid choice" in capsys.readouterr().err
