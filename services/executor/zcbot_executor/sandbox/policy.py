"""What every backend shares: the sandbox environment, the staged runner files, user-root ownership.

Environment: built from an allowlist, never inherited. Names that look like secrets (KEY, TOKEN,
SECRET, PASSWORD, PRIVATE, CREDENTIAL) are dropped even when an operator passes them through.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import sys
from pathlib import Path

from zcbot_core import rendering, safe_fs
from zcbot_core.workspace.skills import SkillPaths

SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PRIVATE|CREDENTIAL|AUTH)", re.I)
# The programs of zcbot_executor/inside/ (who runs them, with which interpreter: inside/__init__.py).
RUNNER_FILES = ("tool_runner.py", "tools_fs.py", "tools_search.py", "tools_exec.py", "proc_wrapper.py",
                "sandbox_init.py", "wire.py", "egress_forward.py", "user_venv.py", "confine.py")
RUNNER_MOUNT = "/opt/zcbot"
WORKSPACE = "/workspace"
INNER_UID = 1000


def sandbox_env(python: str, passthrough: tuple[str, ...] = (), home: str = WORKSPACE, tmp: str = "/tmp",
                venv: str | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """`venv`: the user's venv, first on PATH; `extra`: the egress proxy variables (egress.proxy_env)."""
    py_bin = os.path.dirname(python)
    path = ":".join(dict.fromkeys([*([f"{venv}/bin"] if venv else []), py_bin, "/usr/local/bin", "/usr/bin", "/bin"]))
    env = {
        "PATH": path,
        "HOME": home,
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": os.environ.get("TZ", "UTC"),  # the host's timezone, for the sandbox's environment
        "TMPDIR": tmp,
        "TERM": "dumb",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONIOENCODING": "utf-8",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": f"{tmp}/matplotlib",
        "PIP_NO_INPUT": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    if venv:
        env["VIRTUAL_ENV"] = venv
    env.update(extra or {})
    for name in passthrough:  # ZCBOT_SANDBOX_ENV_PASSTHROUGH: the operator's named variables, copied into the sandbox
        if name in os.environ:
            env[name] = os.environ[name]
    return {k: v for k, v in env.items() if not SECRET_NAME.search(k)}


def stage_runner(state_dir: Path) -> Path:
    """Copy the stdlib runner files (and synthetic /etc files) to a content-addressed folder.

    The sandbox mounts only this folder (read-only) — never the project tree.
    """
    src = Path(__file__).resolve().parents[1] / "inside"  # zcbot_executor/inside/: what runs in the sandbox
    blobs = {name: (src / name).read_bytes() for name in RUNNER_FILES}
    digest = hashlib.sha256(b"".join(blobs[n] for n in RUNNER_FILES) + _ETC_VERSION).hexdigest()[:16]
    dest = state_dir / "runner" / digest
    if (dest / ".complete").exists():
        return dest
    tmp = state_dir / "runner" / f".{digest}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "etc").mkdir(parents=True)
    for name, data in blobs.items():
        (tmp / name).write_bytes(data)
        (tmp / name).chmod(0o644)
    for name, text in _synthetic_etc().items():
        (tmp / "etc" / name).write_text(text)
        (tmp / "etc" / name).chmod(0o644)
    _compile(tmp)
    (tmp / ".complete").write_text("ok\n")
    for path in (tmp.parent, tmp.parent.parent):
        path.chmod(path.stat().st_mode | stat.S_IXOTH | stat.S_IROTH)
    tmp.chmod(0o755)
    (tmp / "etc").chmod(0o755)
    try:
        tmp.rename(dest)
    except OSError:  # another executor process staged it first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


_ETC_VERSION = b"stage-v2"


def platform_mounts(paths: SkillPaths) -> list[tuple[str, str]]:
    """Read-only platform content every sandbox sees: the built-in skills and the rendering layer
    (seed 003 §8.6), at the paths the runner's skill registry tells the model about (both built
    from the same settings: `SkillPaths.from_settings`)."""
    layer = Path(rendering.__file__).resolve().parent  # the package itself, wherever it is installed
    pairs = [(str(paths.builtin_dir), paths.sandbox_skills_dir), (str(layer), paths.sandbox_rendering_dir)]
    return [(src, dest) for src, dest in pairs if Path(src).is_dir()]


def runner_command(python: str, folder: str, mode: str, config_json: str, arg: str | None = None,
                   drop: tuple[int, int] | None = None, confine: str | None = None, landlock: bool = False) -> list[str]:
    """The runner's command line. `-I` keeps every user-writable folder off `sys.path` (no '' for
    the cwd, no PYTHON* variables, no user site) and `-S` skips site-packages and `.pth` files; the
    only folder added is the read-only runner mount. The first statement closes inherited fds and, with `drop`,
    drops privileges, before any module is loaded from a search path (see inside/sandbox_init.py). `-c` imports
    tool_runner as a module so its compiled bytecode (staged next to it) is used: a cold sandbox
    then compiles nothing. `confine` (a seccomp program, hex) is loaded next, with a Landlock domain
    (confine.py, the Docker backend's processes; `landlock`: one is required)."""
    ids = f"{int(drop[0])}, {int(drop[1])}" if drop is not None else ""
    guard = (f"import confine; confine.apply(bytes.fromhex({bytes.fromhex(confine).hex()!r}), {bool(landlock)}); "
             if confine else "")
    code = (f"import sys; sys.path.insert(0, {folder!r}); import sandbox_init; sandbox_init.early({ids}); {guard}"
            "import tool_runner; sys.exit(tool_runner.main(sys.argv))")
    return [python, "-I", "-S", "-B", "-c", code, mode, config_json] + ([arg] if arg else [])


def _compile(folder: Path) -> None:
    """Byte-compile the staged files for this interpreter (others just compile in memory)."""
    import py_compile

    for name in RUNNER_FILES:
        try:
            py_compile.compile(str(folder / name), doraise=True)
        except py_compile.PyCompileError:
            pass
    cache = folder / "__pycache__"
    if cache.is_dir():
        cache.chmod(0o755)
        for item in cache.iterdir():
            item.chmod(0o644)


def _synthetic_etc() -> dict[str, str]:
    return {
        "passwd": (
            "root:x:0:0:root:/root:/usr/sbin/nologin\n"
            f"sandbox:x:{INNER_UID}:{INNER_UID}:sandbox:{WORKSPACE}:/bin/bash\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        ),
        "group": f"root:x:0:\nsandbox:x:{INNER_UID}:\nnogroup:x:65534:\n",
        "hosts": "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        "hostname": "sandbox\n",
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
        "resolv.conf": "# no network in the sandbox\n",
    }


def site_packages(python: str) -> list[str]:
    """The site-packages folders of `python` (its venv's, or the install's), for the user venv's
    `.pth` (user_venv.py): asked once per executor so a sandbox's first start spawns nothing for it."""
    import site
    import subprocess

    if os.path.realpath(python) == os.path.realpath(sys.executable):
        return list(site.getsitepackages())
    out = subprocess.run([python, "-I", "-c", "import site; print('\\n'.join(site.getsitepackages()))"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def python_dirs(python: str) -> list[str]:
    """Install folders the sandbox needs (read-only) for `python` and its site-packages.

    A venv has its own prefix (site-packages) and a base install (stdlib, binary); a symlinked
    interpreter lives in the base. Folders under /usr are mounted anyway.
    """
    import subprocess

    dirs: list[str] = []
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    else:
        out = subprocess.run([python, "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
                             capture_output=True, text=True, timeout=30, check=True).stdout.split()
        prefixes = out
    prefixes.append(os.path.dirname(os.path.dirname(os.path.realpath(python))))
    for prefix in prefixes:
        for candidate in {prefix, os.path.realpath(prefix)}:
            if candidate in ("/", "") or candidate.startswith("/usr/") or candidate == "/usr":
                continue
            if candidate not in dirs:
                dirs.append(candidate)
    return dirs


# ---- touching files in a user root from the executor (which may be root) ------------------------
# A sandbox can plant symlinks anywhere in its root, pointing at host paths it cannot see, and swap
# folders for them at any moment. Every operation here therefore goes through zcbot_core.safe_fs:
# resolved beneath the user root's fd, never following a symlink (docs/security.md, layer 2).
# `root` is the trusted host path of the user root; `rel` is relative to it.

Owner = tuple[int, int] | None


def ensure_owned(path: Path, owner: Owner, recursive: bool = False) -> None:
    """Give the sandbox uid the user's files (root executors only): fd-based, symlinks and
    hard-linked files (which may share an inode with a host file) are skipped."""
    if owner is None:
        return
    with safe_fs.Root.open(path) as root:
        root.chown("", owner, recursive=recursive)


def make_dirs_owned(root: Path, rel: str, owner: Owner) -> Path:
    """mkdir -p `root/rel` with every created level owned by the sandbox (SafeFsError through a
    symlink or a file in the way)."""
    with safe_fs.Root.open(root) as user:
        user.makedirs(rel, owner=owner)
    return root / rel


def safe_read(root: Path, rel: str, limit: int = 1024 * 1024) -> str | None:
    """Text of the regular file `rel` (at most `limit` bytes), None when absent or refused."""
    try:
        with safe_fs.Root.open(root) as user:
            return user.read_text(rel, limit)
    except safe_fs.SafeFsError:
        return None


def safe_write(root: Path, rel: str, data: bytes | str, owner: Owner = None, mode: int = 0o644) -> None:
    """Atomic replace of `rel` (O_EXCL temp in its folder, fchown, rename)."""
    with safe_fs.Root.open(root) as user:
        user.write_bytes(rel, data, owner=owner, mode=mode)


def safe_unlink(root: Path, rel: str) -> None:
    try:
        with safe_fs.Root.open(root) as user:
            user.unlink(rel, missing_ok=True)
    except safe_fs.SafeFsError:
        pass


def safe_touch(root: Path, rel: str) -> bool:
    """Create `rel` if missing (never through a symlink); True when it exists afterwards."""
    try:
        with safe_fs.Root.open(root) as user:
            if not user.exists(rel):
                user.write_bytes(rel, b"")
            return True
    except safe_fs.SafeFsError:
        return False
