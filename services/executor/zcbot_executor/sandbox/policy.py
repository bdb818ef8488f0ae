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


SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PRIVATE|CREDENTIAL|AUTH)", re.I)
RUNNER_FILES = ("tool_runner.py", "tools_fs.py", "tools_search.py", "tools_exec.py", "proc_wrapper.py",
                "sandbox_init.py", "wire.py")
RUNNER_MOUNT = "/opt/zcbot"
WORKSPACE = "/workspace"
INNER_UID = 1000


def sandbox_env(python: str, passthrough: tuple[str, ...] = (), home: str = WORKSPACE, tmp: str = "/tmp") -> dict[str, str]:
    py_bin = os.path.dirname(python)
    path = ":".join(dict.fromkeys([py_bin, "/usr/local/bin", "/usr/bin", "/bin"]))
    env = {
        "PATH": path,
        "HOME": home,
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": os.environ.get("TZ", "UTC"),
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
    for name in passthrough:
        if name in os.environ:
            env[name] = os.environ[name]
    return {k: v for k, v in env.items() if not SECRET_NAME.search(k)}


def stage_runner(state_dir: Path) -> Path:
    """Copy the stdlib runner files (and synthetic /etc files) to a content-addressed folder.

    The sandbox mounts only this folder (read-only) — never the project tree.
    """
    src = Path(__file__).resolve().parents[1]
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


def platform_mounts() -> list[tuple[str, str]]:
    """Read-only platform content every sandbox sees: the built-in skills and the rendering layer
    (seed 003 §8.6), at the paths `zcbot_core.skills` tells the model about."""
    from zcbot_core import skills

    rendering = Path(skills.__file__).resolve().parent / "rendering"
    pairs = [(str(skills.builtin_skills_dir()), skills.sandbox_skills_dir()),
             (str(rendering), skills.sandbox_rendering_dir())]
    return [(src, dest) for src, dest in pairs if Path(src).is_dir()]


def runner_command(python: str, folder: str, mode: str, config_json: str, arg: str | None = None,
                   drop: tuple[int, int] | None = None) -> list[str]:
    """The runner's command line. `-I` keeps every user-writable folder off `sys.path` (no '' for
    the cwd, no PYTHON* variables, no user site) and `-S` skips site-packages and `.pth` files; the
    only folder added is the read-only runner mount. With `drop`, the privilege drop is the first
    statement, before any module is loaded from a search path (see sandbox_init.py). `-c` imports
    tool_runner as a module so its compiled bytecode (staged next to it) is used: a cold sandbox
    then compiles nothing."""
    code = f"import sys; sys.path.insert(0, {folder!r}); "
    if drop is not None:
        code += f"import sandbox_init; sandbox_init.drop_early({int(drop[0])}, {int(drop[1])}); "
    code += "import tool_runner; sys.exit(tool_runner.main(sys.argv))"
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


def ensure_owned(path: Path, owner: tuple[int, int] | None, recursive: bool = False) -> None:
    """Give the sandbox uid the user's files (root executors only).

    The recursive walk is fd-based (`os.fwalk`, no symlink following, chown relative to the
    directory fd), so a symlink swapped in by a running sandbox cannot redirect it to host files.
    """
    if owner is None:
        return
    uid, gid = owner
    st = os.lstat(path)
    if (st.st_uid, st.st_gid) != (uid, gid) and not stat.S_ISLNK(st.st_mode):
        os.chown(path, uid, gid, follow_symlinks=False)
    if not recursive:
        return
    for _root, dirs, files, rootfd in os.fwalk(path, follow_symlinks=False):
        for name in (*dirs, *files):
            try:
                st = os.stat(name, dir_fd=rootfd, follow_symlinks=False)
                if (st.st_uid, st.st_gid) == (uid, gid) or stat.S_ISLNK(st.st_mode):
                    continue
                if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:
                    continue  # a hard link may share its inode with a file outside the root
                os.chown(name, uid, gid, dir_fd=rootfd, follow_symlinks=False)
            except OSError:
                continue


def make_dirs_owned(root: Path, rel: str, owner: tuple[int, int] | None) -> Path:
    """mkdir -p `root/rel` (rel already validated) with every created level owned by the sandbox."""
    current = root
    for part in [p for p in rel.split("/") if p]:
        current = current / part
        if not current.exists():
            current.mkdir(exist_ok=True)
        if current.is_symlink():
            raise PermissionError(f"{rel} contains a symlink")
        ensure_owned(current, owner)
    return current


# ---- touching files in a user root from the executor (which may be root) ------------------------
# A sandbox can plant symlinks anywhere in its root, pointing at host paths it cannot see. The
# executor therefore never follows a symlink there: reads and writes use O_NOFOLLOW, writes go to
# a fresh O_EXCL temp file renamed over the target, and folders are checked to stay inside.


def inside(root: Path, path: Path) -> bool:
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip("/") + "/")


def safe_read(path: Path, limit: int = 1024 * 1024) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def safe_write(path: Path, data: bytes | str, owner: tuple[int, int] | None = None) -> None:
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.parent / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, raw)
        if owner is not None:
            os.fchown(fd, *owner)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def safe_touch(path: Path) -> bool:
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644))
        return True
    except OSError:
        return False
