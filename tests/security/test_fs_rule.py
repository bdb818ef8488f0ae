"""The grep-able rule of layer 2 (docs/security.md): root-side code reaches a user-writable tree
only through `zcbot_core.safe_fs`. Outside that package and the modules that run inside the
sandbox as the sandbox uid, none of the calls below may appear, except at the listed places, each
with the reason it is not on a user tree. A new hit fails here with its file and line.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("libs", "services")
FORBIDDEN = re.compile(
    r"os\.path\.realpath|\.is_symlink\(|shutil\.rmtree|shutil\.copy|os\.replace\(|os\.walk\(|os\.fwalk\("
    r"|O_NOFOLLOW|/proc/self/fd|resolve_user_path\(|tempfile\.mk")
IN_SANDBOX = {  # run inside the sandbox as its uid: the kernel, not path checks, confines them
    *(f"services/executor/zcbot_executor/inside/{name}" for name in (
        "tool_runner.py", "tools_fs.py", "tools_exec.py", "tools_search.py", "proc_wrapper.py", "sandbox_init.py",
        "egress_forward.py", "user_venv.py")),
    "libs/zcbot_core/zcbot_core/rendering/common.py", "libs/zcbot_core/zcbot_core/rendering/pdf.py",
    "libs/zcbot_core/zcbot_core/rendering/fit.py",  # the brief skill's page measurement, as pdf.py
}
ALLOWED = {  # (file, the matching text) -> why it is not an operation on a user tree
    ("libs/zcbot_devstack/zcbot_devstack/embedded/postgres.py", "os.walk("): "the embedded PostgreSQL's own data folder",
    ("libs/zcbot_devstack/zcbot_devstack/embedded/postgres.py", "shutil.rmtree"):
        "the embedded database's socket and password-init folders (its own temp dirs)",
    ("libs/zcbot_devstack/zcbot_devstack/embedded/postgres.py", "tempfile.mk"):
        "the embedded database's socket and password-init folders (its own temp dirs)",
    ("libs/zcbot_devstack/zcbot_devstack/state.py", "os.replace("): "ZCBOT_HOME/stack.json, the stack's own state file",
    ("libs/zcbot_core/zcbot_core/quota/__init__.py", "O_NOFOLLOW"): "the quota ledger in the service state folder",
    ("libs/zcbot_core/zcbot_core/quota/kernel.py", "O_NOFOLLOW"):
        "the user root itself, a child of the root-owned storage folder, opened to read its subvolume id",
    ("libs/zcbot_core/zcbot_core/filehistory/store.py", "O_NOFOLLOW"):
        "the version store's usage file, one name opened relative to the store's safe_fs fd",
    ("libs/zcbot_core/zcbot_core/quota/meter.py", "/proc/self/fd"): "inotify on a directory fd safe_fs opened",
    ("services/gateway/zcbot_gateway/routes/files.py", "/proc/self/fd"): "the download's own fd, opened by safe_fs",
    ("services/executor/zcbot_executor/sandbox/policy.py", "shutil.rmtree"): "staging the runner files (state folder)",
    ("services/executor/zcbot_executor/sandbox/policy.py", "os.path.realpath"): "the interpreter's install folders",
    ("services/executor/zcbot_executor/sandbox/unsafe.py", "os.path.realpath"): "the interpreter's path",
    ("services/executor/zcbot_executor/egress/hub.py", "tempfile.mk"): "the egress sockets' own 0700 folder",
    ("services/executor/zcbot_executor/egress/hub.py", "shutil.rmtree"): "the egress sockets' own 0700 folder",
    ("services/gateway/zcbot_gateway/preview_cache.py", "shutil.copy"): "the converter's private folder -> the preview cache",
    ("services/gateway/zcbot_gateway/preview_cache.py", "os.replace("): "the gateway's own preview cache folder",
    ("services/gateway/zcbot_gateway/routes/previews.py", "/proc/self/fd"): "the cached PDF's own fd (the gateway's cache)",
}


def _hits() -> list[tuple[str, int, str, str]]:
    out = []
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if "/safe_fs/" in rel or rel in IN_SANDBOX:
                continue
            for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for match in FORBIDDEN.finditer(line):
                    out.append((rel, no, match.group(0), line.strip()))
    return out


def test_no_path_based_file_operation_outside_safe_fs() -> None:
    bad = [f"{rel}:{no}: {text!r} in {line}" for rel, no, text, line in _hits() if (rel, text) not in ALLOWED]
    assert not bad, "use zcbot_core.safe_fs for files in a user tree (docs/security.md, layer 2):\n" + "\n".join(bad)


def test_every_exception_is_still_needed() -> None:
    used = {(rel, text) for rel, _no, text, _line in _hits()}
    stale = sorted(set(ALLOWED) - used)
    assert not stale, f"remove these exceptions, nothing matches them any more: {stale}"
