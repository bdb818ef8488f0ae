"""A background process's private record: what the launching host knows of it, never the user's files.

One `ProcRecord` per process this host launched, kept as `<state_dir>/procs/<proc_id>.json` (host
state, not a user tree). On disk it is one flat JSON object — the record's fields plus the backend's
own launch details (`private`: pid and start time, the container, the sandbox's pid-namespace init),
which only the backend reads — so records written before this class existed load unchanged.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

LIMIT_GRACE_SECONDS = 2.0  # the wrapper kills at its limit; the executor only when it did not
_FIELDS = ("user_id", "user_root", "dir", "task_key", "task_id", "run_id", "started_at", "time_limit", "keep",
           "watch", "ended_at")


@dataclass
class ProcRecord:
    proc_id: str
    user_id: str
    user_root: Path
    dir: str  # the proc folder, relative to user_root: `.zcbot_procs/<task_key>/<proc_id>`
    task_key: str
    task_id: str = ""
    run_id: str = ""
    started_at: float = 0.0
    time_limit: float = 0.0
    keep: bool = False  # survives a run cancel / task deletion (`stop_task`)
    watch: dict[str, Any] | None = None  # file_watch.Before.to_json until its changes are reported
    ended_at: float | None = None  # first seen dead by the sweep: the retention starts here
    private: dict[str, Any] = field(default_factory=dict)  # the backend's launch details

    @property
    def proc_dir(self) -> Path:
        return self.user_root / self.dir

    def deadline(self) -> float:
        """When the executor kills this process. A record without a finite start or limit (NaN compares
        false with everything: it would never be past) is past its deadline now."""
        deadline = self.started_at + self.time_limit + LIMIT_GRACE_SECONDS
        return deadline if math.isfinite(deadline) else float("-inf")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.private, "user_id": self.user_id, "user_root": str(self.user_root),
                               "dir": self.dir, "task_key": self.task_key, "task_id": self.task_id,
                               "run_id": self.run_id, "started_at": self.started_at, "time_limit": self.time_limit,
                               "keep": self.keep}
        if self.watch is not None:
            out["watch"] = self.watch
        if self.ended_at is not None:
            out["ended_at"] = self.ended_at
        return out

    @classmethod
    def from_json(cls, proc_id: str, raw: object) -> ProcRecord | None:
        """The record of a stored object, or None when it is not one (no user, no user root)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("user_id"), str) or not raw.get("user_id"):
            return None
        if not isinstance(raw.get("user_root"), str):
            return None
        watch = raw.get("watch")
        return cls(proc_id=proc_id, user_id=raw["user_id"], user_root=Path(raw["user_root"]),
                   dir=str(raw.get("dir") or ""), task_key=str(raw.get("task_key") or ""),
                   task_id=str(raw.get("task_id") or ""), run_id=str(raw.get("run_id") or ""),
                   started_at=_number(raw.get("started_at"), float("nan")),
                   time_limit=_number(raw.get("time_limit"), float("nan")),
                   keep=raw.get("keep") is True, watch=watch if isinstance(watch, dict) and watch else None,
                   ended_at=_finite(raw.get("ended_at")),
                   private={k: v for k, v in raw.items() if k not in _FIELDS})

    # ---- storage (host state) --------------------------------------------------------------------
    @classmethod
    def load(cls, path: Path) -> ProcRecord | None:
        try:
            return cls.from_json(path.stem, json.loads(path.read_text()))
        except (OSError, ValueError):
            return None

    def save(self, private_dir: Path, create: bool = False) -> None:
        """Write the record; `create=False`: only over an existing one (the sweeper may have removed it)."""
        path = private_dir / f"{self.proc_id}.json"
        if not create and not path.exists():
            return
        private_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(self.to_json()))
        tmp.replace(path)


def _number(value: object, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return default
    try:
        return float(value)
    except ValueError:
        return default


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)
