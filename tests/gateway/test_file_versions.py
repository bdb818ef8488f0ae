"""File versions through the gateway (issue 29): the files API keeps what it replaces or deletes,
data_events rows name each change, versions are listed and restored, and a run's changes are
reverted (conflicts skipped unless forced, 409 while a run is active)."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from tests.helpers.gateway import create_task, db, set_task, user_dir
from zcbot_core import filehistory, safe_fs
from zcbot_core.db.models import DataEvent, Message
from zcbot_core.filehistory.revert import CONFLICT_CODES
from zcbot_core.platform.config import Settings
from zcbot_gateway.file_history_texts import CONFLICTS

pytestmark = pytest.mark.asyncio


async def _upload(client: httpx.AsyncClient, h: dict[str, str], name: str, data: bytes) -> None:
    resp = await client.post("/v1/files/upload", headers=h, params={"path": "docs"},
                             files=[("file", (name, data, "application/octet-stream"))])
    assert resp.status_code == 201, resp.text


async def _events(client: httpx.AsyncClient, user: str) -> list[DataEvent]:
    async with db(client) as s:
        return list((await s.scalars(select(DataEvent).where(DataEvent.user_id == user).order_by(DataEvent.id))).all())


async def test_versions_and_restore(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "vera")
    other = await make_user(app_client, "mallory")
    await _upload(app_client, h, "plan.md", b"first draft")
    await _upload(app_client, h, "plan.md", b"second draft")
    assert (await app_client.post("/v1/files/delete", headers=h, json={"path": "docs/plan.md"})).status_code == 200
    kinds = [(e.path, e.kind) for e in await _events(app_client, "vera")]
    assert kinds == [("docs/plan.md", "create"), ("docs/plan.md", "modify"), ("docs/plan.md", "delete")]

    resp = await app_client.get("/v1/files/versions", headers=h, params={"path": "docs/plan.md"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["total"] == 2 and [i["replaced_by"] for i in body["items"]] == ["delete", "modify"]
    assert all(i["available"] for i in body["items"])
    assert [i["size"] for i in body["items"]] == [len(b"second draft"), len(b"first draft")]
    first = body["items"][1]  # what the overwrite replaced: the first draft
    # another user sees none of it and cannot restore it
    theirs = await app_client.get("/v1/files/versions", headers=other, params={"path": "docs/plan.md"})
    assert theirs.json()["total"] == 0
    denied = await app_client.post("/v1/files/restore", headers=other, json={"path": "docs/plan.md", "version_id": first["id"]})
    assert denied.status_code == 404

    ok = await app_client.post("/v1/files/restore", headers=h, json={"path": "docs/plan.md", "version_id": first["id"]})
    assert ok.status_code == 200, ok.text
    assert (user_dir(settings, "vera") / "docs" / "plan.md").read_bytes() == b"first draft"
    assert (await _events(app_client, "vera"))[-1].kind == "restore"
    for bad in ({"path": "../x", "version_id": 1}, {"path": "docs/plan.md", "version_id": 0},
                {"path": "docs/plan.md", "version_id": 10**9}, {"path": "docs/plan.md"}):
        resp = await app_client.post("/v1/files/restore", headers=h, json=bad)
        assert 400 <= resp.status_code < 500, (bad, resp.status_code, resp.text)
    assert (await app_client.get("/v1/files/versions", headers=h, params={"path": "/etc/passwd"})).status_code == 400


async def _fake_run_changes(client: httpx.AsyncClient, settings: Settings, user: str, task_id: str, run_id: str) -> None:
    """The changes a run makes, through the same ops the executor's hooks use."""
    root = user_dir(settings, user)
    store = filehistory.VersionStore.from_settings(settings, user)
    changes = []
    with safe_fs.Root.open(root) as r:
        for rel, data in (("T/a.txt", b"run A"), ("T/new.txt", b"made by the run")):
            prev = filehistory.keep_before(store, r, rel)
            existed = r.exists(rel)
            r.write_bytes(rel, data, mkdirs=True)
            changes.append(filehistory.written(r, rel, prev, existed))
        prev = filehistory.keep_before(store, r, "T/b.txt")
        r.unlink("T/b.txt")
        changes.append(filehistory.Change("T/b.txt", "delete", None, None, prev))
    async with db(client) as s:
        await filehistory.record(s, user, changes, task_id=task_id, run_id=run_id)
        await s.commit()


async def test_revert_run(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "rita")
    task = await create_task(app_client, h, name="T")
    root = user_dir(settings, "rita")
    (root / "T").mkdir(exist_ok=True)
    (root / "T" / "a.txt").write_bytes(b"user A")
    (root / "T" / "b.txt").write_bytes(b"user B")
    await _fake_run_changes(app_client, settings, "rita", task["task_id"], "run1")
    url = f"/v1/tasks/{task['task_id']}/runs/run1/revert-files"

    await set_task(app_client, task["task_id"], run_status="running")
    busy = await app_client.post(url, headers=h, json={})
    assert busy.status_code == 409, busy.text
    assert busy.json()["detail"] == "这个任务正在运行；请等它结束或先取消，再撤销文件改动。", busy.json()
    busy_en = await app_client.post(url, headers={**h, "Accept-Language": "en-US,en;q=0.9"}, json={})
    assert busy_en.json()["detail"].startswith("The task has an active run (running)"), busy_en.json()
    await set_task(app_client, task["task_id"], run_status="idle")

    async with db(app_client) as s:  # the run's messages: the history page reports on the runs it shows
        s.add_all([Message(task_id=task["task_id"], idx=i, run_id="run1", payload={"role": role, "content": "m"})
                   for i, role in enumerate(("user", "assistant"))])
        await s.commit()
    messages = f"/v1/tasks/{task['task_id']}/messages"

    (root / "T" / "new.txt").write_bytes(b"the user edited it after the run")
    resp = await app_client.post(url, headers=h, json={})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert sorted(body["reverted"]) == ["T/a.txt", "T/b.txt"]
    assert [c["path"] for c in body["conflicts"]] == ["T/new.txt"] and body["ok"] is False
    # the conflict's stable code, and its reason in the request's language (Chinese by default)
    assert body["conflicts"][0]["code"] == "changed_since_run"
    assert body["conflicts"][0]["reason"] == CONFLICTS["changed_since_run"]["zh"]
    assert body["conflicts"][0]["reason"].startswith("这个文件在运行之后又被改过")
    assert (root / "T" / "a.txt").read_bytes() == b"user A" and (root / "T" / "b.txt").read_bytes() == b"user B"
    assert (root / "T" / "new.txt").read_bytes() == b"the user edited it after the run"  # skipped
    again_en = (await app_client.post(url, headers={**h, **EN}, json={})).json()
    assert again_en["reverted"] == [] and [(c["path"], c["code"]) for c in again_en["conflicts"]] == \
        [("T/new.txt", "changed_since_run")]
    assert again_en["conflicts"][0]["reason"].startswith("The file was changed again after the run")
    # skipped paths: after a reload the undo is still offered (force is still to be done)
    page = (await app_client.get(messages, headers=h)).json()
    assert page["files_changed"] == {"run1": 3} and page["files_undone"] == []

    forced = await app_client.post(url, headers=h, json={"force": True})
    assert forced.status_code == 200 and forced.json()["reverted"] == ["T/new.txt"], forced.text
    assert forced.json()["ok"] is True
    assert not (root / "T" / "new.txt").exists()  # the run created it: gone
    # Undone: a reload says so instead of offering it again (from the rows, not the page's memory).
    page = (await app_client.get(messages, headers=h)).json()
    assert page["files_changed"] == {"run1": 3} and page["files_undone"] == ["run1"]
    # A background process of the run reporting changes after the undo: there is something to undo again.
    async with db(app_client) as s:
        await filehistory.record(s, "rita", [filehistory.Change("T/late.txt", "create", 1)], task_id=task["task_id"],
                                 run_id="run1")
        await s.commit()
    page = (await app_client.get(messages, headers=h)).json()
    assert page["files_changed"] == {"run1": 4} and page["files_undone"] == []
    assert (await app_client.post(f"/v1/tasks/{task['task_id']}/runs/nope/revert-files", headers=h)).status_code == 404


async def _versions(client: httpx.AsyncClient, h: dict[str, str], path: str) -> list[dict]:
    resp = await client.get("/v1/files/versions", headers=h, params={"path": path})
    assert resp.status_code == 200, resp.text
    return resp.json()["items"]


async def _rename(client: httpx.AsyncClient, h: dict[str, str], path: str, new_name: str) -> None:
    resp = await client.post("/v1/files/rename", headers=h, json={"path": path, "new_name": new_name})
    assert resp.status_code == 200, resp.text


async def test_history_follows_renames(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    """A renamed file's history keeps what it had under its old name (file and folder renames);
    the old path's history still lists its own versions; a new file at the old path is not mixed in."""
    h = await make_user(app_client, "rena")
    await _upload(app_client, h, "plan.md", b"first draft")
    await _upload(app_client, h, "plan.md", b"second draft")  # keeps "first draft" at docs/plan.md
    await _rename(app_client, h, "docs/plan.md", "final.md")
    rename = (await _events(app_client, "rena"))[-1]
    assert (rename.kind, rename.path, rename.old_path) == ("rename", "docs/final.md", "docs/plan.md")

    old = await _versions(app_client, h, "docs/plan.md")
    assert [i["path"] for i in old] == ["docs/plan.md"], old  # still listed under the old path
    new = await _versions(app_client, h, "docs/final.md")
    assert [(i["id"], i["path"]) for i in new] == [(old[0]["id"], "docs/plan.md")], new

    # a new file at the old path: its versions are the old path's, never the renamed file's
    await _upload(app_client, h, "plan.md", b"another plan")
    await _upload(app_client, h, "plan.md", b"another plan, v2")
    assert len(await _versions(app_client, h, "docs/plan.md")) == 2
    assert [i["id"] for i in await _versions(app_client, h, "docs/final.md")] == [old[0]["id"]]

    # a folder rename carries the history of everything in it
    await _rename(app_client, h, "docs", "papers")
    moved = await _versions(app_client, h, "papers/final.md")
    assert [i["id"] for i in moved] == [old[0]["id"]], moved
    ok = await app_client.post("/v1/files/restore", headers=h, json={"path": "papers/final.md", "version_id": old[0]["id"]})
    assert ok.status_code == 200, ok.text
    assert (user_dir(settings, "rena") / "papers" / "final.md").read_bytes() == b"first draft"
    after = await _versions(app_client, h, "papers/final.md")  # the restore kept "second draft" here
    assert [i["path"] for i in after] == ["papers/final.md", "docs/plan.md"], after
    # a version of the other file is not restorable under this name
    theirs = (await _versions(app_client, h, "papers/plan.md"))[0]
    wrong = await app_client.post("/v1/files/restore", headers=h, json={"path": "papers/final.md", "version_id": theirs["id"]})
    assert wrong.status_code == 404, wrong.text


async def test_revert_run_folders(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    """A run that made and removed folders is reverted to the exact tree: the folder it made (empty
    now that its file is gone) is removed, the one it removed is made again with its files; a
    folder it made that holds someone else's file since is listed, not removed."""
    h = await make_user(app_client, "dora")
    task = await create_task(app_client, h, name="D")
    root = user_dir(settings, "dora")
    (root / "D" / "gone" / "empty").mkdir(parents=True)
    (root / "D" / "gone" / "f.txt").write_bytes(b"in the folder")
    store = filehistory.VersionStore.from_settings(settings, "dora")
    with safe_fs.Root.open(root) as r:  # the run's changes, through the ops the executor's hooks use
        prev = filehistory.keep_before(store, r, "D/gone/f.txt")
        r.rmtree("D/gone")
        r.makedirs("D/made/deep")
        r.makedirs("D/other")
        r.write_bytes("D/made/deep/x.txt", b"run file")
        changes = [filehistory.Change("D/made", "mkdir"), filehistory.Change("D/made/deep", "mkdir"),
                   filehistory.Change("D/other", "mkdir"), filehistory.written(r, "D/made/deep/x.txt", None, False),
                   filehistory.Change("D/gone/f.txt", "delete", None, None, prev),
                   filehistory.Change("D/gone/empty", "rmdir"), filehistory.Change("D/gone", "rmdir")]
    async with db(app_client) as s:
        await filehistory.record(s, "dora", changes, task_id=task["task_id"], run_id="run-d")
        await s.commit()
    (root / "D" / "other" / "mine.txt").write_bytes(b"the user's, after the run")

    resp = await app_client.post(f"/v1/tasks/{task['task_id']}/runs/run-d/revert-files", headers=h, json={})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert [(c["path"], c["code"]) for c in body["conflicts"]] == [("D/other", "folder_not_empty")], body
    assert body["conflicts"][0]["reason"] == "这次运行新建的文件夹里还有不是它留下的内容，已保留该文件夹。"
    assert sorted(p.relative_to(root / "D").as_posix() for p in (root / "D").rglob("*")) == \
        ["gone", "gone/empty", "gone/f.txt", "other", "other/mine.txt"]
    assert (root / "D" / "gone" / "f.txt").read_bytes() == b"in the folder"
    assert sorted(body["reverted"]) == ["D/gone", "D/gone/empty", "D/gone/f.txt", "D/made", "D/made/deep",
                                        "D/made/deep/x.txt"]


async def _three_file_run(client: httpx.AsyncClient, settings: Settings, user: str, task_id: str) -> Path:
    """A run that rewrote H/a.txt, H/sub/b.txt and H/c.txt (in that order); the folder H."""
    root = user_dir(settings, user)
    for rel in ("a.txt", "sub/b.txt", "c.txt"):
        (root / "H" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "H" / rel).write_bytes(f"user {rel}".encode())
    store = filehistory.VersionStore.from_settings(settings, user)
    changes = []
    with safe_fs.Root.open(root) as r:
        for rel in ("H/a.txt", "H/sub/b.txt", "H/c.txt"):
            prev = filehistory.keep_before(store, r, rel)
            r.write_bytes(rel, f"run {rel}".encode())
            changes.append(filehistory.written(r, rel, prev, True))
    async with db(client) as s:
        await filehistory.record(s, user, changes, task_id=task_id, run_id="run-h")
        await s.commit()
    return root / "H"


async def _restore_rows(client: httpx.AsyncClient, user: str) -> list[tuple[str, str]]:
    return [(e.path, e.kind) for e in await _events(client, user) if e.run_id is None]


async def test_a_revert_failing_half_way_records_what_it_applied(
        app_client: httpx.AsyncClient, settings: Settings, make_user, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34: every path is checked before anything changes (a folder above a path turned into a
    file is a conflict, not a 400 after the paths before it were changed), a change that fails
    half-way (an injected ENOSPC on the last path) is a conflict too, and every change made is
    recorded, so the version each one replaced can still be listed and restored."""
    h = await make_user(app_client, "hana")
    task = await create_task(app_client, h, name="H")
    folder = await _three_file_run(app_client, settings, "hana", task["task_id"])
    url = f"/v1/tasks/{task['task_id']}/runs/run-h/revert-files"
    shutil.rmtree(folder / "sub")
    (folder / "sub").write_bytes(b"a file where the folder was")  # the parent of H/sub/b.txt is a file now

    real = filehistory.VersionStore.restore_into

    def disk_full(self: filehistory.VersionStore, r: safe_fs.Root, rel: str, digest: str, **kw: object) -> int:
        if rel == "H/c.txt":
            raise OSError(28, "No space left on device", "/host/path/never/shown")
        return real(self, r, rel, digest, **kw)

    monkeypatch.setattr(filehistory.VersionStore, "restore_into", disk_full)
    resp = await app_client.post(url, headers={**h, **EN}, json={"force": True})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["ok"] is False and body["reverted"] == ["H/a.txt"], body
    assert [(c["path"], c["code"]) for c in body["conflicts"]] == \
        [("H/sub/b.txt", "parent_not_folder"), ("H/c.txt", "not_applied")], body
    assert body["conflicts"][1]["why"] == "No space left on device" and "/host" not in resp.text
    assert body["conflicts"][1]["reason"].startswith("Reverting this path failed (No space left on device)")
    assert (folder / "a.txt").read_bytes() == b"user a.txt" and (folder / "c.txt").read_bytes() == b"run H/c.txt"
    assert await _restore_rows(app_client, "hana") == [("H/a.txt", "restore")]

    # The version the applied revert replaced (what the run left) is listed and can be put back.
    versions = await _versions(app_client, h, "H/a.txt")
    assert versions[0]["replaced_by"] == "restore" and versions[0]["available"], versions
    back = await app_client.post("/v1/files/restore", headers=h, json={"path": "H/a.txt",
                                                                       "version_id": versions[0]["id"]})
    assert back.status_code == 200, back.text
    assert (folder / "a.txt").read_bytes() == b"run H/a.txt"

    # Fixed (the disk has room, the file moved away): a second undo does the rest, Chinese reasons by default.
    monkeypatch.setattr(filehistory.VersionStore, "restore_into", real)
    zh = (await app_client.post(url, headers=h, json={"force": True})).json()
    assert [(c["path"], c["code"]) for c in zh["conflicts"]] == [("H/sub/b.txt", "parent_not_folder")], zh
    assert zh["conflicts"][0]["reason"] == CONFLICTS["parent_not_folder"]["zh"]
    assert sorted(zh["reverted"]) == ["H/a.txt", "H/c.txt"] and (folder / "c.txt").read_bytes() == b"user c.txt"
    (folder / "sub").unlink()
    done = (await app_client.post(url, headers=h, json={"force": True})).json()
    assert done["ok"] is True and done["reverted"] == ["H/sub/b.txt"], done
    assert (folder / "sub" / "b.txt").read_bytes() == b"user sub/b.txt"


EN = {"Accept-Language": "en-GB,en;q=0.9,zh;q=0.5"}
ZH_FIRST = {"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.8"}


async def test_refusals_speak_the_request_language(app_client: httpx.AsyncClient, make_user) -> None:
    """Chinese by default and when Chinese comes first; English when English comes first. The
    status and code stay what they were (clients branch on those, people read `detail`)."""
    h = await make_user(app_client, "lang-li")
    task = await create_task(app_client, h, name="L")
    cases = [  # (method, url, params/json, status, code, zh, en)
        ("get", "/v1/files/versions", {"params": {"path": "../x"}}, 400, "bad_request", "路径无效", "Invalid path: "),
        ("post", "/v1/files/restore", {"json": {"path": "a.txt", "version_id": 10**9}}, 404, "not_found",
         "这个文件没有这个版本。", "No such version of this file."),
        ("post", f"/v1/tasks/{task['task_id']}/runs/nope/revert-files", {"json": {}}, 404, "not_found",
         "这次运行没有改动文件", "This run changed no files"),
        ("post", "/v1/tasks/nosuchtask/runs/r/revert-files", {"json": {}}, 404, "task_not_found",
         "任务不存在。", "Task not found."),
        ("post", f"/v1/tasks/{task['task_id']}/runs/{'r' * 65}/revert-files", {"json": {}}, 404, "not_found",
         "没有这次运行。", "No such run."),
    ]
    for method, url, kw, status, code, zh, en in cases:
        for extra, want in (({}, zh), (ZH_FIRST, zh), (EN, en)):
            resp = await getattr(app_client, method)(url, headers={**h, **extra}, **kw)
            body = resp.json()
            assert (resp.status_code, body["code"]) == (status, code), (url, extra, body)
            assert body["detail"].startswith(want), (url, extra, body)


async def test_every_conflict_code_has_both_texts() -> None:
    assert set(CONFLICTS) == CONFLICT_CODES
    assert all(set(texts) == {"zh", "en"} and all(texts.values()) for texts in CONFLICTS.values())
