"""Stdlib-shadowing modules an attacker plants in a workspace (issue 19, item 1).

Each planted module, if ever imported, leaves a marker `<MARKERS>/<module>-<uid>-<pid>` (the uid as
the importing process sees it: 0 before the privilege drop, 1000 in the sandbox). Written with
`posix` only, so even a shadowed `os` can record itself.
"""

from __future__ import annotations

from pathlib import Path

MARKERS = ".hijack"  # relative to the user root (= /workspace)

_BODY = """import posix as _p
try:
    _p.mkdir("/workspace/{markers}", 0o777)
except OSError:
    pass
try:
    _p.close(_p.open("/workspace/{markers}/" + __name__ + "-" + str(_p.getuid()) + "-" + str(_p.getpid()), 0o101, 0o666))
except OSError:
    pass
"""

MODULES = ("_queue", "resource", "select", "json", "_json", "site", "sitecustomize", "usercustomize", "os",
           "stat", "time", "posixpath", "encodings", "sandbox_init", "tool_runner", "tools_exec", "tools_fs",
           "wire", "proc_wrapper", "subprocess", "selectors", "signal", "_posixsubprocess", "zz_pth_hook")
PACKAGES = ("ctypes", "importlib_metadata")


def plants(folder: str = "") -> dict[str, str]:
    """Relative path -> content of every planted file (in `folder` of the workspace)."""
    prefix = f"{folder.strip('/')}/" if folder.strip("/") else ""
    body = _BODY.format(markers=MARKERS)
    files = {f"{prefix}{name}.py": body for name in MODULES}
    files.update({f"{prefix}{name}/__init__.py": body for name in PACKAGES})
    files[f"{prefix}zz_hijack.pth"] = "import zz_pth_hook\n"
    return files


def markers(user_root: Path) -> list[str]:
    folder = user_root / MARKERS
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def root_markers(user_root: Path) -> list[str]:
    return [m for m in markers(user_root) if m.split("-")[-2] == "0"]
