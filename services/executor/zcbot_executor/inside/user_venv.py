"""The user's own venv at `<user_root>/.venv` (stdlib only; staged beside `tool_runner.py`,
run by the sandbox's python as the sandbox user: see inside/__init__.py).

Created inside the sandbox, as the sandbox user, with the sandbox's Python, the first time a
sandbox starts without one (seed 003 §7.5: per-user venv on the bind-mounted root, so it survives
sandbox restarts and never lives on a shared volume: install scripts are arbitrary code).

`venv --without-pip` takes ~0.1 s where a venv with its own pip takes ~9 s on a loaded 2-core host,
so the venv gets no pip copy: a `.pth` file appends the sandbox Python's own site-packages (pip,
python-docx, python-pptx, ...) after the venv's, and `bin/pip` runs that pip with the venv's
interpreter, so `pip install` writes into the venv and what the user installs shadows the base.
"""

import os
import sys

PTH_NAME = "zcbot_base.pth"
PIP_SHIM = "#!{python}\nimport sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n"


def venv_python(venv: str) -> str:
    return os.path.join(venv, "bin", "python")


def base_site_packages(python: str) -> list:
    import subprocess

    out = subprocess.run([python, "-I", "-c", "import site, sys; print('\\n'.join(site.getsitepackages()))"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return [line for line in out.splitlines() if line.strip() and os.path.isdir(line)]


def exists(venv: str) -> bool:
    exe = venv_python(venv)
    return os.path.exists(exe) and os.access(exe, os.X_OK)


def ensure(venv: str, python: str, bases: list | None = None) -> str:
    """The venv's interpreter (created now if missing), or `python` when it cannot be made (the
    sandbox still works, without a venv; the reason goes to stderr, which the executor logs).
    `bases`: the site-packages of `python` when the executor knows them (else one subprocess asks)."""
    exe = venv_python(venv)
    if exists(venv):
        return exe
    import subprocess  # only on the first start: a warm start imports nothing more

    try:
        bases = [p for p in bases if os.path.isdir(p)] if bases else base_site_packages(python)
        import venv as venv_module  # the runner's interpreter is the sandbox's Python (its base install)

        venv_module.EnvBuilder(with_pip=False, clear=True, symlinks=True).create(venv)
        version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        with open(os.path.join(venv, "lib", version, "site-packages", PTH_NAME), "w") as fh:
            fh.write("".join(f"{path}\n" for path in bases))
        for name in ("pip", "pip3"):
            shim = os.path.join(venv, "bin", name)
            with open(shim, "w") as fh:
                fh.write(PIP_SHIM.format(python=exe))
            os.chmod(shim, 0o755)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        sys.stderr.write(f"zcbot: could not create the user venv at {venv}: {str(detail)[-500:]}\n")
        return python
    return exe
