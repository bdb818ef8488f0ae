"""docker-compose.yml: valid Compose, and the stack docs/operations.md describes.

Validated as far as a machine without a Docker engine allows: Compose's own interpolation is
reproduced (compose_checks), the result is parsed by a strict Compose Specification parser (the
`compose-spec` package) and `docker compose config` runs where the compose plugin exists.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import compose_checks as cc

ZCBOT_SERVICES = {"gateway": 8765, "runner": 8766, "executor": 8767, "scheduler": 8768, "channels": 8769}
NATS_PASSWORDS = {f"ZCBOT_NATS_PASSWORD_{s.upper()}" for s in (*ZCBOT_SERVICES, "setup")}
SECRETS = {"JWT_SECRET", "PLATFORM_KEY", "ZCBOT_CHANNEL_SECRET_KEY", "POSTGRES_PASSWORD", "ZCBOT_RUN_GRANT_KEY",
           *NATS_PASSWORDS}
ENV = {  # random-looking: production refuses placeholders and values of few distinct characters
    "JWT_SECRET": hashlib.sha256(b"jwt").hexdigest(),
    "PLATFORM_KEY": hashlib.sha256(b"platform").hexdigest(),
    "ZCBOT_CHANNEL_SECRET_KEY": hashlib.sha256(b"channel").hexdigest(),
    "POSTGRES_PASSWORD": "0123456789abcdef",
    "ZCBOT_RUN_GRANT_KEY": hashlib.sha256(b"grant").hexdigest(),
    **{name: hashlib.sha256(name.encode()).hexdigest() for name in sorted(NATS_PASSWORDS)},
}


@pytest.fixture(scope="module")
def compose_file(repo: Path) -> Path:
    return repo / "docker-compose.yml"


@pytest.fixture(scope="module")
def project(compose_file: Path) -> dict[str, Any]:
    return cc.load(compose_file, ENV)


@pytest.fixture(scope="module")
def services(project: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return project["services"]


def test_compose_spec_parser_accepts_the_file(project: dict[str, Any]) -> None:
    pytest.importorskip("compose_spec", reason="the compose-spec parser is a test dependency (pyproject [test])")
    assert cc.spec_errors(project) == []


def test_compose_spec_parser_is_strict(project: dict[str, Any]) -> None:
    pytest.importorskip("compose_spec")
    import copy

    broken = copy.deepcopy(project)
    broken["services"]["gateway"]["healthcheck"]["intervall"] = "10s"
    assert cc.spec_errors(broken)
    broken = copy.deepcopy(project)
    broken["services"]["gateway"]["depends_on"]["migrate"]["condition"] = "service_finished"
    assert cc.spec_errors(broken)


def _compose_cli() -> tuple[list[str], bool] | None:
    """`docker compose` (v2), else the legacy `docker-compose` 1.x (Debian's package), else None.

    The flag says whether the tool knows the top-level `name:` (Compose v2 only).
    """
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return ["docker", "compose"], True
    if shutil.which("docker-compose"):
        return ["docker-compose"], False
    return None


def test_docker_compose_config(compose_file: Path, tmp_path: Path) -> None:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("neither the docker compose plugin nor docker-compose is installed here")
    command, knows_name = cli
    target = compose_file
    if not knows_name:  # Compose 1.x predates the top-level `name`; validate the rest
        target = tmp_path / "docker-compose.yml"
        target.write_text(re.sub(r"^name: .*$", "", compose_file.read_text(), flags=re.M))
    env_file = tmp_path / "test.env"
    base = [*command, "--project-directory", str(compose_file.parent), "--env-file", str(env_file), "-f", str(target)]
    env_file.write_text("".join(f"{k}={v}\n" for k, v in ENV.items()))
    out = subprocess.run([*base, "config", "-q"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_secrets_are_required_not_defaulted(compose_file: Path) -> None:
    refs = cc.references(cc.raw(compose_file))
    required = {name for name, op in refs if op == ":?"}
    assert SECRETS <= required
    for name, op in refs:
        if name in SECRETS:
            assert op == ":?", f"{name} must be ${{{name}:?...}} everywhere"
        if name.endswith(("_API_KEY",)):
            assert op == ":-", name
    for missing in sorted(SECRETS):
        env = {k: v for k, v in ENV.items() if k != missing}
        with pytest.raises(cc.MissingVariable, match=missing):
            cc.load(compose_file, env)


def test_interpolation_follows_compose_rules() -> None:
    env = {"SET": "x", "EMPTY": ""}
    assert cc.interpolate_string("$$HOME ${SET} $SET ${UNSET:-d} ${EMPTY:-d} ${EMPTY-d} ${SET:+a}", env) == "$HOME x x d d  a"
    with pytest.raises(cc.MissingVariable, match="EMPTY"):
        cc.interpolate_string("${EMPTY:?must be set}", env)
    assert cc.interpolate_string("${EMPTY?must be set}", env) == ""


def test_stack_services(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == {"nats", "postgres", "migrate", "bus-setup", *ZCBOT_SERVICES}


def test_nats_runs_jetstream_on_a_volume(project: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    nats = services["nats"]
    command = nats["command"]
    assert "-js" in command and command[command.index("-sd") + 1] == "/data"
    assert "nats-data:/data" in nats["volumes"]
    assert "nats-data" in project["volumes"]


def test_postgres_16_with_a_volume_and_pg_isready(project: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    pg = services["postgres"]
    assert re.match(r"^postgres:16(\.|-|$)", pg["image"])
    assert "pg-data:/var/lib/postgresql/data" in pg["volumes"]
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    assert cc.environment(pg)["POSTGRES_PASSWORD"] == ENV["POSTGRES_PASSWORD"]
    assert "pg-data" in project["volumes"]


def test_migration_is_one_shot_after_postgres(services: dict[str, dict[str, Any]]) -> None:
    migrate = services["migrate"]
    assert migrate["command"] == ["db", "upgrade"]
    assert migrate["restart"] == "no"
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    url = cc.environment(migrate)["ZCBOT_DB_URL"]
    assert url == f"postgresql://zcbot:{ENV['POSTGRES_PASSWORD']}@postgres:5432/zcbot"


def test_bus_setup_is_one_shot_with_the_setup_identity(services: dict[str, dict[str, Any]]) -> None:
    """Issue 36: the topology is declared by the setup identity; the services' own may not."""
    setup = services["bus-setup"]
    assert setup["command"] == ["bus", "setup"] and setup["restart"] == "no"
    assert setup["depends_on"] == {"nats": {"condition": "service_healthy"}}
    env = cc.environment(setup)
    assert env["ZCBOT_NATS_USER"] == "setup"
    assert env["ZCBOT_NATS_PASSWORD"] == ENV["ZCBOT_NATS_PASSWORD_SETUP"]
    assert env["ZCBOT_BUS_PREFIX"] == "zcbot" and env["ZCBOT_NATS_URL"] == "nats://nats:4222"
    assert not {"JWT_SECRET", "PLATFORM_KEY", "ZCBOT_RUN_GRANT_KEY", "ZCBOT_DB_URL"} & set(env)


def test_services_start_after_migrations_and_nats(services: dict[str, dict[str, Any]]) -> None:
    for name in ZCBOT_SERVICES:
        deps = services[name]["depends_on"]
        assert deps["nats"] == {"condition": "service_started"}, name
        assert deps["bus-setup"] == {"condition": "service_completed_successfully"}, name
        if name != "executor":  # the executor never touches the database
            assert deps["migrate"] == {"condition": "service_completed_successfully"}, name


def test_one_image_runs_every_service(services: dict[str, dict[str, Any]]) -> None:
    images = {services[name]["image"] for name in (*ZCBOT_SERVICES, "migrate")}
    assert len(images) == 1
    for name in (*ZCBOT_SERVICES, "migrate"):
        assert services[name]["build"] == {"context": ".", "dockerfile": "Dockerfile"}, name
    for name in ZCBOT_SERVICES:
        assert services[name]["command"] == [name]
        assert services[name]["restart"] == "unless-stopped"


def test_healthchecks_probe_healthz_with_python(services: dict[str, dict[str, Any]]) -> None:
    for name, port in ZCBOT_SERVICES.items():
        test = services[name]["healthcheck"]["test"]
        assert test[:3] == ["CMD", "python", "-c"], name
        assert f"http://127.0.0.1:{port}/healthz" in test[3] and "urllib.request" in test[3], name
        compile(test[3], f"{name}-healthcheck", "exec")
        env = cc.environment(services[name])
        assert env["ZCBOT_HTTP_HOST"] == "0.0.0.0", name


def test_ports_match_settings(services: dict[str, dict[str, Any]]) -> None:
    from zcbot_core.platform.config import Settings

    fields = Settings.model_fields
    aliases = {"gateway": "zcbot_http_port", "runner": "zcbot_runner_port", "executor": "zcbot_executor_port",
               "scheduler": "zcbot_scheduler_port", "channels": "zcbot_channels_port"}
    for name, port in ZCBOT_SERVICES.items():
        field = fields[aliases[name]]
        assert field.default == port
        assert cc.environment(services[name])[field.alias] == str(port)
    assert services["gateway"]["ports"] == ["127.0.0.1:8765:8765"]


def test_user_roots_shared_at_one_path(project: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    assert "users" in project["volumes"]
    for name in ("gateway", "runner", "executor", "channels"):
        assert "users:/data/users" in services[name]["volumes"], name
        assert cc.environment(services[name])["ZCBOT_STORAGE_ROOT"] == "/data/users", name
    assert "volumes" not in services["scheduler"]


def test_production_settings_and_secrets(services: dict[str, dict[str, Any]]) -> None:
    from zcbot_core.platform.config import Settings

    for name in ZCBOT_SERVICES:
        env = cc.environment(services[name])
        assert env["ZCBOT_ENV"] == "production", name
        assert env["ZCBOT_NATS_URL"] == "nats://nats:4222", name
        settings = Settings(**{k: v for k, v in env.items() if k.startswith(("ZCBOT_", "JWT_", "PLATFORM_"))})
        if name == "executor":  # it never signs or checks a token: started without them (needs_secrets=False)
            assert not {"JWT_SECRET", "PLATFORM_KEY", "ZCBOT_CHANNEL_SECRET_KEY"} & set(env), name
        else:
            assert env["JWT_SECRET"] == ENV["JWT_SECRET"] and env["PLATFORM_KEY"] == ENV["PLATFORM_KEY"], name
            settings.require_secrets()  # what each service checks at start-up
        settings.require_urls()
        model_keys = {k for k in env if k.endswith("_API_KEY")}
        assert bool(model_keys) == (name == "runner"), name
    assert "POSTGRES_PASSWORD" not in cc.environment(services["executor"])
    assert ENV["POSTGRES_PASSWORD"] not in cc.environment(services["executor"])["ZCBOT_DB_URL"]


def test_env_names_are_known_settings(services: dict[str, dict[str, Any]]) -> None:
    from zcbot_core.platform.settings_doc import SETTINGS_CLASSES, load_class

    known = {f.alias for _, ref in SETTINGS_CLASSES for f in load_class(ref).model_fields.values() if f.alias}
    for name in ZCBOT_SERVICES:
        unknown = {k for k in cc.environment(services[name]) if k.startswith("ZCBOT_") and k not in known}
        assert not unknown, name


def test_executor_sandbox_choice(services: dict[str, dict[str, Any]]) -> None:
    """bwrap in the executor container: namespaces need SYS_ADMIN/NET_ADMIN and no seccomp/AppArmor."""
    executor = services["executor"]
    env = cc.environment(executor)
    assert env["ZCBOT_SANDBOX"] == "bwrap"
    assert executor["user"] == "0:0"
    assert set(executor["cap_add"]) == {"SYS_ADMIN", "NET_ADMIN"}
    assert set(executor["security_opt"]) == {"seccomp=unconfined", "apparmor=unconfined"}
    assert not executor.get("privileged")
    assert "/var/run/docker.sock" not in " ".join(executor.get("volumes") or [])
    assert env["ZCBOT_EXECUTOR_HOST"] == executor["hostname"]
    for name in set(ZCBOT_SERVICES) - {"executor"}:
        for key in ("user", "cap_add", "security_opt", "privileged"):
            assert key not in services[name], (name, key)


def test_graceful_stop_periods(services: dict[str, dict[str, Any]]) -> None:
    assert services["runner"]["stop_grace_period"] == "60s"
    assert services["gateway"]["stop_grace_period"] == "30s"


def test_depends_on_and_volumes_resolve(project: dict[str, Any], services: dict[str, dict[str, Any]],
                                        repo: Path) -> None:
    for name, svc in services.items():
        for dep in svc.get("depends_on") or {}:
            assert dep in services, (name, dep)
        for volume in svc.get("volumes") or []:
            source = volume.split(":", 1)[0]
            if source.startswith("./"):  # a file of the repository mounted read-only (nats-auth.conf)
                assert (repo / source).is_file() and volume.endswith(":ro"), (name, volume)
                continue
            assert source in project["volumes"], (name, volume)


def test_env_example_lists_every_required_variable(repo: Path, compose_file: Path) -> None:
    example = (repo / "deploy" / "compose" / "env.example").read_text()
    names = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", example, re.M))
    referenced = {name for name, _ in cc.references(cc.raw(compose_file))}
    assert referenced <= names, referenced - names
