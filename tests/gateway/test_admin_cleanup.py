"""Admin clean-up (issue 40): the purge of old soft-deleted tasks and the orphan-folder scan, through
the real gateway app on the test's PostgreSQL, and the same operations through `zcbot admin`."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from tests.helpers.gateway import create_task, db, set_task, user_dir
from zcbot_core import safe_fs
from zcbot_core.db.models import DataEvent, Message, Task, UsageEvent
from zcbot_core.filehistory.store import VersionStore
from zcbot_core.platform.config import Settings
from zcbot_devstack import cli

pytestmark = pytest.mark.asyncio


def _keep(settings: Settings, user: str, rel: str, text: str) -> str:
    """A real version in the user's store (as the executor keeps one before a change)."""
    root = user_dir(settings, user)
    (root / rel).write_text(text)
    with safe_fs.Root.open(root) as r:
        kept = VersionStore.from_settings(settings, user).keep(r, rel)
    assert kept is not None
    return kept.digest


async def _count(client: httpx.AsyncClient, model: Any, *where: Any) -> int:
    async with db(client) as s:
        return int(await s.scalar(select(func.count()).select_from(model).where(*where)) or 0)


async def _zcbot(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """`zcbot ARGV` in this process (its own event loop in a thread); exit code and stdout+stderr."""
    def run() -> int:
        try:
            cli.main(list(argv))
        except SystemExit as exc:
            return int(exc.code or 0)
        return 0

    code = await asyncio.to_thread(run)
    out = capsys.readouterr()
    return code, out.out + out.err


async def test_purge_dry_run_then_apply(app_client: httpx.AsyncClient, make_user, make_admin, settings: Settings,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    admin = await make_admin(app_client, "root")
    hb = await make_user(app_client, "bob")
    old = (await create_task(app_client, hb, name="old", working_dir="shared"))["task_id"]
    live = (await create_task(app_client, hb, name="live", working_dir="shared"))["task_id"]
    recent = (await create_task(app_client, hb, name="recent"))["task_id"]
    busy = (await create_task(app_client, hb, name="busy"))["task_id"]
    for t in (old, recent, busy):
        assert (await app_client.delete(f"/v1/tasks/{t}", headers=hb)).status_code == 204
    now = datetime.now(UTC)
    await set_task(app_client, old, deleted_at=now - timedelta(days=40))
    await set_task(app_client, recent, deleted_at=now - timedelta(days=1))
    await set_task(app_client, busy, deleted_at=now - timedelta(days=40), run_status="running")
    only_old = _keep(settings, "bob", "shared/a.txt", "first a")  # named only by the old task's history
    both = _keep(settings, "bob", "shared/b.txt", "first b")  # also named by the live task's history
    async with db(app_client) as s:
        s.add_all([Message(task_id=old, idx=i, payload={"role": "user", "content": f"m{i}"}) for i in range(3)])
        s.add(Message(task_id=live, idx=0, payload={"role": "user", "content": "keep me"}))
        s.add_all([DataEvent(user_id="bob", task_id=old, run_id="r-old", path="shared/a.txt", kind="modify",
                             prev_hash=only_old),
                   DataEvent(user_id="bob", task_id=old, run_id="r-old", path="shared/b.txt", kind="modify",
                             prev_hash=both),
                   DataEvent(user_id="bob", task_id=live, run_id="r-live", path="shared/b.txt", kind="modify",
                             prev_hash=both)])
        s.add(UsageEvent(user_id="bob", task_id=old, run_id="r-old", cost=Decimal("0.25"), units={}))
        await s.commit()

    # not an admin: refused; a bad age: 422 in the request's language
    assert (await app_client.post("/v1/admin/purge", json={"older_than": "30d"}, headers=hb)).status_code == 403
    bad = await app_client.post("/v1/admin/purge", json={"older_than": "soon"}, headers=admin)
    assert bad.status_code == 422 and "30d" in bad.json()["detail"] and "须为" in bad.json()["detail"], bad.text

    dry = await app_client.post("/v1/admin/purge", json={"older_than": "30d"}, headers=admin)
    assert dry.status_code == 200, dry.text
    body = dry.json()
    assert body["dry_run"] is True and body["tasks"] == 1 and body["task_ids"] == [old]
    assert (body["messages"], body["data_events"], body["skipped_active"]) == (3, 2, 1)
    assert await _count(app_client, Task, Task.task_id == old) == 1  # a dry run changes nothing
    code, out = await _zcbot(capsys, "admin", "purge", "--older-than", "30")
    assert code == 0 and "would delete" in out and "1 tasks, 3 messages, 2 data events" in out, out

    done = await app_client.post("/v1/admin/purge", json={"older_than": "30d", "apply": True}, headers=admin)
    body = done.json()
    assert body["dry_run"] is False and (body["tasks"], body["messages"], body["data_events"]) == (1, 3, 2), body
    assert body["versions"] == 1 and body["version_bytes"] == len("first a")
    assert await _count(app_client, Task, Task.task_id == old) == 0
    assert await _count(app_client, Message, Message.task_id == old) == 0
    assert await _count(app_client, DataEvent, DataEvent.task_id == old) == 0
    store = VersionStore.from_settings(settings, "bob")
    assert not store.has(only_old) and store.has(both)  # the live task's history still needs `both`
    # untouched: the live task, the recent and the busy deleted ones, the accounting, the folder
    for t in (live, recent, busy):
        assert await _count(app_client, Task, Task.task_id == t) == 1
    assert await _count(app_client, Message, Message.task_id == live) == 1
    assert await _count(app_client, UsageEvent, UsageEvent.task_id == old) == 1
    assert (user_dir(settings, "bob") / "shared" / "a.txt").read_text() == "first a"
    # the CLI applies too (the recent one is past 12 hours)
    code, out = await _zcbot(capsys, "admin", "purge", "--older-than", "12h", "--apply")
    assert code == 0 and "deleted 1 tasks" in out, out
    assert await _count(app_client, Task, Task.task_id == recent) == 0
    code, out = await _zcbot(capsys, "admin", "purge", "--older-than", "soon")
    assert code == 2 and "bad age" in out


def _mk(root: Path, rel: str, files: int = 1) -> None:
    (root / rel).mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (root / rel / f"f{i}.txt").write_text("x" * 100)


async def test_orphan_scan_lists_and_deletes_only_with_confirmation(
        app_client: httpx.AsyncClient, make_user, make_admin, settings: Settings,
        capsys: pytest.CaptureFixture[str]) -> None:
    admin = await make_admin(app_client, "root")
    hb = await make_user(app_client, "bob")
    await create_task(app_client, hb, name="proj")
    gone = (await create_task(app_client, hb, name="trashed"))["task_id"]
    assert (await app_client.delete(f"/v1/tasks/{gone}", headers=hb)).status_code == 204
    nested = (await create_task(app_client, hb, name="nested"))["task_id"]
    await set_task(app_client, nested, working_dir="work/inner")  # web tasks are simple names; older rows nest
    root = user_dir(settings, "bob")
    (root / "nested").rmdir()  # made eagerly by the create
    _mk(root, "work/inner")
    _mk(root, "work/stale", 2)  # beside a nested task folder: an orphan
    _mk(root, "stray", 3)
    _mk(root, ".skills/demo")  # the system's (hidden): never listed
    (root / "loose.txt").write_text("a file, not a folder")
    _mk(root / "proj", "sub")  # inside a task folder: the task's
    _mk(settings.storage_root, "ghost")  # a root whose user does not exist

    assert (await app_client.get("/v1/admin/orphans", headers=hb)).status_code == 403
    r = await app_client.get("/v1/admin/orphans", headers=admin)
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    found = {(o["user_id"], o["path"], o["kind"]) for o in items}
    assert found == {("bob", "stray", "folder"), ("bob", "work/stale", "folder"), ("ghost", "", "user_root")}, found
    stray = next(o for o in items if o["path"] == "stray")
    assert stray["files"] == 3 and stray["bytes"] == 300 and stray["modified"]
    code, out = await _zcbot(capsys, "admin", "orphans", "--user", "bob")
    assert code == 0 and "bob/stray" in out and "bob/work/stale" in out and "ghost" not in out, out

    # no confirmation: 400, nothing deleted (Chinese by default, English when asked)
    r = await app_client.post("/v1/admin/orphans/delete", json={"user_id": "bob", "path": "stray"}, headers=admin)
    assert r.status_code == 400 and r.json()["code"] == "confirmation_required" and "确认" in r.json()["detail"]
    r = await app_client.post("/v1/admin/orphans/delete", json={"user_id": "bob", "path": "stray"},
                              headers={**admin, "Accept-Language": "en"})
    assert r.status_code == 400 and "explicit confirmation" in r.json()["detail"]
    code, out = await _zcbot(capsys, "admin", "orphans", "--delete", "bob/stray")  # not a terminal, no --yes
    assert code == 2 and (root / "stray" / "f0.txt").exists()
    # folders in use are refused even when confirmed: a task folder, one inside it, a deleted task's
    for path in ("proj", "proj/sub", "trashed", "work"):
        r = await app_client.post("/v1/admin/orphans/delete", json={"user_id": "bob", "path": path, "confirm": True},
                                  headers=admin)
        assert r.status_code == 409 and r.json()["code"] == "orphan_refused", (path, r.text)
    assert (root / "proj" / "sub" / "f0.txt").exists() and (root / "work" / "inner").is_dir()
    # a task made in the folder after the listing shares it: refused at delete time
    await create_task(app_client, hb, name="reuse", working_dir="stray")
    r = await app_client.post("/v1/admin/orphans/delete", json={"user_id": "bob", "path": "stray", "confirm": True},
                              headers=admin)
    assert r.status_code == 409 and (root / "stray" / "f2.txt").exists()
    # confirmed and unreferenced: deleted
    r = await app_client.post("/v1/admin/orphans/delete",
                              json={"user_id": "bob", "path": "work/stale", "confirm": True}, headers=admin)
    assert r.status_code == 200 and r.json()["deleted"]["files"] == 2, r.text
    assert not (root / "work" / "stale").exists() and (root / "work" / "inner").is_dir()
    r = await app_client.post("/v1/admin/orphans/delete",
                              json={"user_id": "bob", "path": "work/stale", "confirm": True}, headers=admin)
    assert r.status_code == 404
    code, out = await _zcbot(capsys, "admin", "orphans", "--delete", "ghost", "--yes")
    assert code == 0 and "deleted ghost" in out, out
    assert not (settings.storage_root / "ghost").exists()
    code, out = await _zcbot(capsys, "admin", "orphans", "--delete", "bob", "--yes")  # bob exists
    assert code == 2 and root.is_dir()
    r = await app_client.get("/v1/admin/orphans", headers=admin)
    assert r.json()["items"] == []
