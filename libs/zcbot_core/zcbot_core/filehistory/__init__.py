"""File history (issue 29): a per-user version store outside the user root, the `data_events`
log of every file mutation, and the operations built on both (restore a version, revert a run).

- `store.VersionStore`: content-addressed copies in `<storage_root>/.versions/<user>/`, retention
  by age and a per-user byte budget (counted beside the disk quota, not in it: docs/decisions.md).
- `events.Change` / `events.record`: the one writer of `data_events` rows.
- `ops`: keep-then-act helpers used by the files API, the executor's tool hooks and revert.
"""

from zcbot_core.filehistory.events import KINDS, Change, record
from zcbot_core.filehistory.ops import file_hash, keep_before, restore, written
from zcbot_core.filehistory.store import STORE_DIR, Kept, VersionStore

__all__ = ["Change", "KINDS", "record", "VersionStore", "Kept", "STORE_DIR", "file_hash", "keep_before", "restore",
           "written"]
