"""Whole-sandbox limits: one cgroup per user on this host, holding every process of that user —
the warm runner, its shell children and every background sandbox (issue 19, item 6).

rlimits are per process (RLIMIT_DATA 2 GB, RLIMIT_NPROC per user namespace): three 1.2 GB
processes fit them all. The user's cgroup caps the total memory (`memory.max` / v1
`memory.limit_in_bytes`, swap included where the kernel accounts it) and the process count
(`pids.max`) across all of them; the kernel OOM-kills inside that group only, and the executor
reports it to the model as a clear tool error (`oom_kills` before/after the call). CPU (issue 36):
each user folder gets a weight (`cpu.weight` / v1 `cpu.shares`), so a user's busy loops share the
CPU equally with the other users' work instead of one process at a time against it, and a hard cap
in cores (`cpu.max` / v1 `cpu.cfs_quota_us`). The CPU controller is optional: where it cannot be
used (not delegated, not mounted), memory and pids still apply and a warning says CPU is not.

Layout, under the executor's own cgroup (so the host's or the pod's limits still apply on top):

    <own cgroup>/zcbot/<user>.<storage digest>/runner      the warm runner (and its children)
    <own cgroup>/zcbot/<user>.<storage digest>/<proc_id>   one background sandbox each

Limits sit on the user folder; leaves only hold processes (cgroup v2's "no internal processes"
rule). A leaf is also the handle for killing a background process from outside its tree
(`cgroup.kill` on v2, SIGKILL of every member until empty on v1), whatever state it is in.
The storage digest keeps two deployments (or two test sessions) with the same user id apart.

Both cgroup versions behind one interface: v2 (Kubernetes nodes: one hierarchy, controllers
enabled through `cgroup.subtree_control`) and v1 (`memory` and `pids` mounted apart, as on these
machines). Processes join before they exec ("0" written into each `cgroup.procs` by `join_argv`'s
shell or the background launcher), so no child can be forked outside the group. Where neither is writable, see `detect` and
docs/decisions.md: the executor starts with a loud warning (per-process rlimits only), unless
`ZCBOT_SANDBOX_CGROUP=required`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from zcbot_core.errors import ZcbotError

log = logging.getLogger(__name__)

CGROUP_FS = Path("/sys/fs/cgroup")
GROUP_DIR = "zcbot"
RUNNER_LEAF = "runner"
WARNING = ("no writable cgroup (v2, or v1 memory+pids) for sandboxes: a user's processes are limited one by one "
           "(rlimits) only, not as a whole; set ZCBOT_SANDBOX_CGROUP=required to refuse to start like this")


class CgroupError(ZcbotError, RuntimeError):
    code = "cgroup_error"
    pass


@dataclass(frozen=True)
class CpuLimits:
    """A user's CPU on a host: `weight` relative to the other users (1..10000, 100 = the default
    weight), `cores` a hard cap (0: none)."""

    weight: int = 100
    cores: float = 0.0
    period_us: int = 100_000

    @property
    def quota_us(self) -> int | None:
        return max(1000, int(self.cores * self.period_us)) if self.cores > 0 else None

    def v2_files(self) -> tuple[tuple[str, str], ...]:
        quota = self.quota_us
        return (("cpu.weight", str(self.weight)), ("cpu.max", f"{quota if quota else 'max'} {self.period_us}"))

    def v1_files(self) -> tuple[tuple[str, str], ...]:
        shares = max(2, min(262_144, self.weight * 1024 // 100))
        quota = self.quota_us
        return (("cpu.shares", str(shares)), ("cpu.cfs_period_us", str(self.period_us)),
                ("cpu.cfs_quota_us", str(quota if quota else -1)))


@dataclass(frozen=True)
class _Tree:
    """One hierarchy this executor uses: its zcbot folder and the files the user folder gets."""

    base: Path  # <mount>/<own cgroup>/zcbot
    limits: tuple[tuple[str, str], ...]  # (file, value) written on each user folder, in order
    oom_file: str  # where the OOM-kill counter is
    v2: bool

    @property
    def controllers(self) -> str:
        """What a v2 folder delegates to its children: the controllers of the limit files."""
        return " ".join(f"+{c}" for c in sorted({name.split(".")[0] for name, _ in self.limits}))


class UserCgroups:
    """Per-user cgroups on this host (one instance per executor)."""

    def __init__(self, trees: list[_Tree], storage_root: Path) -> None:
        self.trees = trees
        self.version = "v2" if trees[0].v2 else "v1"
        self._suffix = hashlib.sha256(str(storage_root).encode()).hexdigest()[:8]
        self._ready: set[str] = set()

    def user_dirs(self, user_id: str) -> list[Path]:
        return [t.base / f"{user_id}.{self._suffix}" for t in self.trees]

    def prepare(self, user_id: str, leaf: str) -> list[str]:
        """Create the user's folder (limits on it) and `leaf`; returns the `cgroup.procs` files a
        spawner writes "0" into before exec."""
        out = []
        for tree, user_dir in zip(self.trees, self.user_dirs(user_id)):
            if str(user_dir) not in self._ready or not user_dir.is_dir():
                if not tree.base.is_dir():  # an executor sharing this host removed it when it was empty
                    tree.base.mkdir(exist_ok=True)
                    if tree.v2 and tree.controllers:
                        _write(tree.base / "cgroup.subtree_control", tree.controllers)
                user_dir.mkdir(exist_ok=True)
                if tree.v2 and tree.controllers:
                    _write(user_dir / "cgroup.subtree_control", tree.controllers)
                for name, value in tree.limits:
                    _write(user_dir / name, value, optional=name.startswith("memory.memsw") or name == "memory.swap.max")
                self._ready.add(str(user_dir))
            (user_dir / leaf).mkdir(exist_ok=True)
            out.append(str(user_dir / leaf / "cgroup.procs"))
        return out

    def pids(self, user_id: str, leaf: str | None = None) -> set[int]:
        found: set[int] = set()
        for user_dir in self.user_dirs(user_id):
            dirs = [user_dir / leaf] if leaf else [user_dir, *_children(user_dir)]
            for folder in dirs:
                found |= _read_pids(folder / "cgroup.procs")
        return found

    def kill(self, user_id: str, leaf: str, timeout: float = 5.0) -> bool:
        """SIGKILL every process in `leaf`, stopped or not, until it is empty; True when empty."""
        dirs = [d / leaf for d in self.user_dirs(user_id)]
        if self.trees[0].v2 and (dirs[0] / "cgroup.kill").exists():
            _write(dirs[0] / "cgroup.kill", "1", optional=True)
        deadline = time.monotonic() + timeout
        while True:
            members = set().union(*(_read_pids(d / "cgroup.procs") for d in dirs))
            if not members:
                return True
            if time.monotonic() > deadline:
                return False
            for pid in members:  # v1 has no cgroup.kill: forks racing this loop land in the group too
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)

    def remove(self, user_id: str, leaf: str) -> None:
        for user_dir in self.user_dirs(user_id):
            _rmdir(user_dir / leaf)  # only succeeds when empty

    def close(self) -> None:
        """Remove this deployment's empty groups (leaves, then user folders; rmdir never removes a
        group that holds a process). The zcbot folder stays: other executors on the host share it."""
        for tree in self.trees:
            for user_dir in _children(tree.base):
                if not user_dir.name.endswith(f".{self._suffix}"):
                    continue
                for leaf in _children(user_dir):
                    _rmdir(leaf)
                _rmdir(user_dir)
        self._ready.clear()

    def oom_kills(self, user_id: str) -> int:
        """OOM kills counted in the user's folder and its leaves (only compared before/after)."""
        total = 0
        tree = self.trees[0]
        user_dir = self.user_dirs(user_id)[0]
        for folder in (user_dir, *_children(user_dir)):
            try:
                text = (folder / tree.oom_file).read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit():
                    total += int(value)
        return total

    def memory_mb(self) -> int | None:
        for name, value in self.trees[0].limits:
            if name in ("memory.max", "memory.limit_in_bytes"):
                return int(value) // (1024 * 1024)
        return None

    @property
    def cpu_limited(self) -> bool:
        return any(name.startswith("cpu.") for tree in self.trees for name, _ in tree.limits)


def _write(path: Path, text: str, optional: bool = False) -> None:
    try:
        with open(path, "w") as fh:
            fh.write(text)
    except OSError as exc:
        if not optional:
            raise CgroupError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def _read_pids(path: Path) -> set[int]:
    try:
        return {int(x) for x in path.read_text().split()}
    except (OSError, ValueError):
        return set()


def _children(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_dir()]
    except OSError:
        return []


def _own_path(controller: str | None, proc_cgroup: str) -> str:
    """This process's cgroup path for a v1 controller (or the v2 entry when None)."""
    for line in proc_cgroup.splitlines():
        _id, names, path = line.split(":", 2)
        if (controller is None and names == "") or (controller and controller in names.split(",")):
            return path
    raise CgroupError(f"no {controller or 'v2'} entry in /proc/self/cgroup")


def _limit_files(memory_mb: int, max_pids: int, v2: bool) -> tuple[tuple[str, str], ...]:
    mem = str(memory_mb * 1024 * 1024)
    if v2:  # no swap beyond the memory cap either
        return (("memory.max", mem), ("memory.swap.max", "0"), ("pids.max", str(max_pids)))
    # v1: memsw (memory + swap) may only be set at or above the memory limit, hence the order
    return (("memory.limit_in_bytes", mem), ("memory.memsw.limit_in_bytes", mem), ("pids.max", str(max_pids)))


def _v2_trees(root: Path, own: str, memory_mb: int, max_pids: int, cpu: CpuLimits | None = None) -> list[_Tree]:
    parent = root / own.lstrip("/")
    controllers = (root / "cgroup.controllers").read_text().split() if (root / "cgroup.controllers").exists() else []
    available = set((parent / "cgroup.controllers").read_text().split())
    if not {"memory", "pids"} <= available:
        raise CgroupError(f"cgroup v2 at {root}: memory/pids not available (root has {controllers})")
    limits = _limit_files(memory_mb, max_pids, True)
    if cpu is not None and "cpu" in available:
        limits += cpu.v2_files()
    elif cpu is not None:
        log.warning("cgroup v2: the cpu controller is not delegated here; users' sandboxes share the CPU unweighted",
                    extra={"available": sorted(available)})
    delegate = " ".join(f"+{c}" for c in sorted({name.split(".")[0] for name, _ in limits}))
    base = parent / GROUP_DIR
    try:
        _write(parent / "cgroup.subtree_control", delegate)
    except CgroupError:
        # "no internal processes": the executor sits in its cgroup (a container's root); move it into
        # a leaf of its own so the controllers can be delegated to the zcbot folder beside it.
        # Everything in it moves (a container's init too): the whole folder is this container's.
        (parent / "executor").mkdir(exist_ok=True)
        for pid in sorted(_read_pids(parent / "cgroup.procs")):
            _write(parent / "executor" / "cgroup.procs", str(pid), optional=True)
        _write(parent / "cgroup.subtree_control", delegate)
    base.mkdir(exist_ok=True)
    _write(base / "cgroup.subtree_control", delegate)
    return [_Tree(base, limits, "memory.events", True)]


def _v1_trees(root: Path, proc_cgroup: str, memory_mb: int, max_pids: int, cpu: CpuLimits | None = None) -> list[_Tree]:
    limits = dict(_limit_files(memory_mb, max_pids, False))
    trees = []
    for controller, files in (("memory", ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")), ("pids", ("pids.max",))):
        mount = root / controller
        if not (mount / "cgroup.procs").exists():
            raise CgroupError(f"cgroup v1 {controller} not mounted at {mount}")
        base = mount / _own_path(controller, proc_cgroup).lstrip("/") / GROUP_DIR
        base.mkdir(exist_ok=True)
        if controller == "memory":
            _write(base / "memory.use_hierarchy", "1", optional=True)  # leaves count toward the user folder
        trees.append(_Tree(base, tuple((f, limits[f]) for f in files), "memory.oom_control", False))
    if cpu is not None:
        try:
            trees.append(_v1_cpu_tree(root, proc_cgroup, cpu))
        except (OSError, CgroupError) as exc:
            log.warning("cgroup v1: cpu not usable (%s); users' sandboxes share the CPU unweighted", exc)
    return trees


def _v1_cpu_tree(root: Path, proc_cgroup: str, cpu: CpuLimits) -> _Tree:
    mount = root / "cpu"  # also `cpu,cpuacct` mounted together (a `cpu` symlink points at it)
    if not (mount / "cgroup.procs").exists():
        raise CgroupError(f"cgroup v1 cpu not mounted at {mount}")
    base = mount / _own_path("cpu", proc_cgroup).lstrip("/") / GROUP_DIR
    base.mkdir(exist_ok=True)
    files = cpu.v1_files()
    if not (base / "cpu.cfs_quota_us").exists():  # a kernel without CFS bandwidth control: the weight only
        files = tuple(f for f in files if f[0] == "cpu.shares")
    return _Tree(base, files, "", False)


def detect(storage_root: Path, memory_mb: int, max_pids: int, mode: str = "auto",
           root: Path = CGROUP_FS, proc_cgroup: str | None = None, cpu: CpuLimits | None = None) -> UserCgroups | None:
    """The per-user cgroups of this host, or None (mode "off", or "auto" with nothing writable:
    logged loudly). Mode "required" raises instead; "v1"/"v2" force one version. `cpu`: the users'
    CPU weight and cap, where the cpu controller can be used (None: not asked for)."""
    if mode == "off":
        return None
    proc_cgroup = proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text()
    errors = []
    attempts = {"v2": (), "v1": ()}
    order = [mode] if mode in attempts else ["v2", "v1"]
    for version in order:
        try:
            if version == "v2":
                v2_root = root if (root / "cgroup.controllers").exists() else root / "unified"
                trees = _v2_trees(v2_root, _own_path(None, proc_cgroup), memory_mb, max_pids, cpu)
            else:
                trees = _v1_trees(root, proc_cgroup, memory_mb, max_pids, cpu)
            return UserCgroups(trees, storage_root)
        except (OSError, CgroupError) as exc:
            errors.append(f"{version}: {exc}")
    if mode in ("required", "v1", "v2"):
        raise CgroupError("no usable cgroup for sandboxes (" + "; ".join(errors) + ")")
    log.warning(WARNING, extra={"cgroup_errors": errors})
    return None


# Joins the cgroups, then execs the command. Not a preexec_fn: that forbids vfork, and forking the
# executor (hundreds of MB mapped) cost ~16 ms per cold sandbox here; this costs ~1 ms.
_JOIN_SH = 'while [ "$1" != -- ]; do echo 0 > "$1" || exit 125; shift; done; shift; exec "$@"'


def join_argv(procs_files: list[str], argv: list[str]) -> list[str]:
    """`argv` prefixed so that the process joins `procs_files` (`cgroup.procs`) before it execs:
    it is inside before it can fork anything."""
    if not procs_files:
        return argv
    return ["/bin/sh", "-c", _JOIN_SH, "zcbot-join", *procs_files, "--", *argv]


def for_config(config) -> UserCgroups | None:  # noqa: ANN001 (ExecutorConfig: no import cycle)
    """The executor's per-user cgroups from its settings (ZCBOT_USER_MEMORY_MB/_MAX_PROCS/_CPU_WEIGHT/
    _CPU_CORES, ZCBOT_SANDBOX_CGROUP)."""
    cpu = CpuLimits(weight=config.user_cpu_weight, cores=config.user_cpu_cores)
    found = detect(config.storage_root, config.user_memory_mb, config.user_max_procs, config.cgroup_mode, cpu=cpu)
    if found is not None:
        log.info("per-user sandbox cgroups", extra={"version": found.version, "memory_mb": config.user_memory_mb,
                                                    "max_procs": config.user_max_procs,
                                                    "cpu_weight": config.user_cpu_weight if found.cpu_limited else None,
                                                    "cpu_cores": config.user_cpu_cores if found.cpu_limited else None})
    return found
