"""Files API: listing, upload, download, mkdir, delete, rename (DB-aware), escapes and isolation."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from tests.helpers.gateway import create_task, db, get_task_row, set_task, user_dir
from tests.helpers.seed import legacy_task
from zcbot_core.db.models import ScheduledJob
from zcbot_core.platform.config import Settings
from zcbot_core.safe_fs import resolve as safe_fs_resolve
from zcbot_gateway.config import GatewaySettings

pytestmark = pytest.mark.asyncio

ENTRY_KEYS = {"name", "path", "type", "size", "mtime"}
BAD_PATHS = ["../x", "/etc/passwd", "a/../../b", "x\x00y", "..", "a\\b", "C:/x", ".memory", "a/.hidden"]


def tree(root: Path, spec: dict[str, str | None]) -> None:
    """{"a/b.txt": "text", "dir/": None} -> files and folders under root."""
    for rel, content in spec.items():
        path = root / rel
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)


async def post(client: httpx.AsyncClient, h: dict[str, str], op: str, **body: Any) -> httpx.Response:
    return await client.post(f"/v1/files/{op}", headers=h, json=body)


def raw_multipart(filename: bytes, data: bytes = b"x") -> tuple[bytes, dict[str, str]]:
    """A multipart body with the filename bytes exactly as given (httpx would escape NUL, quotes...)."""
    boundary = b"zcbotboundary"
    body = (b"--" + boundary + b'\r\nContent-Disposition: form-data; name="file"; filename="' + filename
            + b'"\r\nContent-Type: application/octet-stream\r\n\r\n' + data + b"\r\n--" + boundary + b"--\r\n")
    return body, {"content-type": f"multipart/form-data; boundary={boundary.decode()}"}


async def upload(client: httpx.AsyncClient, h: dict[str, str], path: str, *files: tuple[str, bytes]) -> httpx.Response:
    return await client.post("/v1/files/upload", headers=h, params={"path": path},
                             files=[("file", (name, data, "application/octet-stream")) for name, data in files])


# ---- list ------------------------------------------------------------------------------------


async def test_list(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "alice")
    fresh = await app_client.get("/v1/files", headers=h)  # no folder on disk yet
    assert fresh.status_code == 200, fresh.text
    assert fresh.json() == {"items": [], "total": 0, "page": 1, "page_size": 5000,
                            "crumbs": [{"name": "~", "path": ""}], "exists": True,
                            "root": "/workspace", "current": "", "truncated": False}

    root = user_dir(settings, "alice")
    tree(root, {"b.txt": "hello", "Adir/": None, "adir2/x.md": "x", ".memory/core.md": "secret", ".env": "K=V",
                "Adir/sub/deep.txt": "deep", "Adir/.hid": "h"})
    os.mkfifo(root / "pipe")
    body = (await app_client.get("/v1/files", headers=h)).json()
    assert [e["name"] for e in body["items"]] == ["Adir", "adir2", "b.txt"]  # dirs first, dotfiles/fifo hidden
    assert all(set(e) == ENTRY_KEYS for e in body["items"])
    b = body["items"][2]
    assert b["path"] == "b.txt" and b["type"] == "file" and b["size"] == 5 and b["mtime"].endswith("+00:00")
    assert body["items"][0]["type"] == "dir" and body["items"][0]["size"] is None

    sub = (await app_client.get("/v1/files", headers=h, params={"path": "Adir/sub/"})).json()
    assert sub["exists"] and sub["current"] == "Adir/sub"
    assert sub["crumbs"] == [{"name": "~", "path": ""}, {"name": "Adir", "path": "Adir"},
                             {"name": "sub", "path": "Adir/sub"}]
    assert [(e["name"], e["path"]) for e in sub["items"]] == [("deep.txt", "Adir/sub/deep.txt")]
    assert [e["name"] for e in (await app_client.get("/v1/files", headers=h, params={"path": "Adir"})).json()["items"]] == ["sub"]

    missing = await app_client.get("/v1/files", headers=h, params={"path": "nope/deeper"})
    assert missing.status_code == 200 and missing.json()["exists"] is False and missing.json()["items"] == []
    as_file = await app_client.get("/v1/files", headers=h, params={"path": "b.txt"})
    assert as_file.status_code == 400


async def test_bad_paths_are_400_everywhere(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "alice")
    tree(user_dir(settings, "alice"), {"ok.txt": "x"})
    for bad in BAD_PATHS:
        calls = {
            "list": await app_client.get("/v1/files", headers=h, params={"path": bad}),
            "download": await app_client.get("/v1/files/download", headers=h, params={"path": bad}),
            "upload": await upload(app_client, h, bad, ("f.txt", b"x")),
            "mkdir": await post(app_client, h, "mkdir", path=bad),
            "delete": await post(app_client, h, "delete", path=bad),
            "rename": await post(app_client, h, "rename", path=bad, new_name="fine"),
        }
        for op, resp in calls.items():
            assert resp.status_code == 400, (bad, op, resp.status_code, resp.text)
            assert isinstance(resp.json()["detail"], str)
    assert not (settings.storage_root / "x").exists() and not (settings.storage_root.parent / "b").exists()


async def test_symlink_escapes_are_400(app_client: httpx.AsyncClient, settings: Settings, make_user,
                                       tmp_path: Path) -> None:
    h = await make_user(app_client, "alice")
    root = user_dir(settings, "alice")
    outside = tmp_path / "outside"
    tree(outside, {"secret.txt": "TOP SECRET", "dir/inner.txt": "inner"})
    tree(root, {"real/file.txt": "mine"})
    os.symlink(outside / "secret.txt", root / "leak.txt")
    os.symlink(outside / "dir", root / "leakdir")
    os.symlink("/etc", root / "etc")
    os.symlink(root / "real" / "file.txt", root / "inside-link.txt")  # even inside: never followed

    listing = (await app_client.get("/v1/files", headers=h)).json()
    assert {e["name"] for e in listing["items"]} == {"real"}
    for path in ("leak.txt", "leakdir", "etc/passwd", "leakdir/inner.txt", "inside-link.txt"):
        calls = {
            "list": await app_client.get("/v1/files", headers=h, params={"path": path}),
            "download": await app_client.get("/v1/files/download", headers=h, params={"path": path}),
            "delete": await post(app_client, h, "delete", path=path),
            "rename": await post(app_client, h, "rename", path=path, new_name="renamed"),
            "mkdir": await post(app_client, h, "mkdir", path=f"{path}/new"),
            "upload": await upload(app_client, h, path, ("f.txt", b"x")),
        }
        for op, resp in calls.items():
            assert resp.status_code == 400, (path, op, resp.status_code, resp.text)
            assert "TOP SECRET" not in resp.text
    assert (outside / "secret.txt").read_text() == "TOP SECRET" and sorted(os.listdir(outside)) == ["dir", "secret.txt"]
    assert sorted(os.listdir(outside / "dir")) == ["inner.txt"] and os.path.islink(root / "leak.txt")

    ok = await app_client.get("/v1/files/download", headers=h, params={"path": "real/file.txt"})
    assert ok.status_code == 200 and ok.content == b"mine"


# ---- upload / download / mkdir ---------------------------------------------------------------


async def test_upload_and_download(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "alice")
    root = user_dir(settings, "alice")
    resp = await upload(app_client, h, "reports/2026", ("a.txt", b"alpha"), ("报告 final.docx", b"\x00\x01docx"))
    assert resp.status_code == 201, resp.text
    body = resp.json()
    assert body["path"] == "reports/2026"
    assert [(e["name"], e["path"], e["size"], e["type"]) for e in body["uploaded"]] == [
        ("a.txt", "reports/2026/a.txt", 5, "file"), ("报告 final.docx", "reports/2026/报告 final.docx", 6, "file")]
    assert (root / "reports/2026/a.txt").read_bytes() == b"alpha"
    # Overwrite is atomic (temp file + rename) and leaves no temp files behind.
    again = await upload(app_client, h, "reports/2026", ("a.txt", b"beta!"))
    assert again.status_code == 201 and (root / "reports/2026/a.txt").read_bytes() == b"beta!"
    assert sorted(os.listdir(root / "reports/2026")) == ["a.txt", "报告 final.docx"]
    to_root = await upload(app_client, h, "", ("top.txt", b"t"))
    assert to_root.status_code == 201 and (root / "top.txt").read_bytes() == b"t"
    # The folder as a form field (what a browser form sends) lands there, not in the root.
    form = await app_client.post("/v1/files/upload", headers=h, data={"path": "in/form"},
                                 files=[("file", ("f.txt", b"form"))])
    assert form.status_code == 201 and form.json()["path"] == "in/form", form.text
    assert (root / "in/form/f.txt").read_bytes() == b"form" and not (root / "f.txt").exists()
    same = await app_client.post("/v1/files/upload", headers=h, params={"path": "in/form"}, data={"path": "in/form"},
                                 files=[("file", ("g.txt", b"g"))])
    assert same.status_code == 201 and (root / "in/form/g.txt").exists()
    # Never a silent wrong place: an unknown field or two different folders are refused, nothing written.
    for params, data in (({}, {"folder": "x"}), ({"path": "a"}, {"path": "b"}), ({}, {"dir": "x", "path": "y"})):
        bad = await app_client.post("/v1/files/upload", headers=h, params=params, data=data,
                                    files=[("file", ("h.txt", b"h"))])
        assert bad.status_code == 422 and bad.json()["code"] == "validation_error", (params, data, bad.text)
    assert not any(p.name == "h.txt" for p in root.rglob("h.txt"))

    dl = await app_client.get("/v1/files/download", headers=h, params={"path": "reports/2026/报告 final.docx"})
    assert dl.status_code == 200 and dl.content == b"\x00\x01docx"
    assert dl.headers["content-disposition"].startswith("attachment;")
    assert "%E6%8A%A5%E5%91%8A" in dl.headers["content-disposition"]
    assert dl.headers["content-length"] == "6"
    text = await app_client.get("/v1/files/download", headers=h, params={"path": "reports/2026/a.txt"})
    assert text.content == b"beta!" and text.headers["content-type"].startswith("text/plain")
    for path, code in [("reports", 400), ("", 400), ("reports/nope.txt", 404), ("nope/deeper.txt", 404)]:
        resp = await app_client.get("/v1/files/download", headers=h, params={"path": path})
        assert resp.status_code == code, (path, resp.text)


async def test_upload_rejections(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "alice")
    root = user_dir(settings, "alice")
    tree(root, {"docs/keep.txt": "keep", "docs/folder/": None, "afile": "x"})
    for name in [b"../evil.txt", b"a/b.txt", b"a\\b.txt", b"..", b".", b".hidden", b"x\x00y", b" lead.txt",
                 b"tab\t.txt", b"/etc/passwd", b"\\\\server\\x", b""]:
        body, headers = raw_multipart(name)
        resp = await app_client.post("/v1/files/upload", headers={**h, **headers}, params={"path": "docs"}, content=body)
        assert resp.status_code == 400, (name, resp.text)
    # (python-multipart itself reduces an old-IE full path "C:\\dir\\x.txt" to its basename "x.txt".)
    dup = await upload(app_client, h, "docs", ("same.txt", b"1"), ("same.txt", b"2"))
    assert dup.status_code == 400
    no_file = await app_client.post("/v1/files/upload", headers=h, params={"path": "docs"}, data={"file": "text"})
    assert no_file.status_code == 400
    not_multipart = await app_client.post("/v1/files/upload", headers=h, params={"path": "docs"}, content=b"raw")
    assert not_multipart.status_code == 400
    assert (await upload(app_client, h, "docs", ("folder", b"x"))).status_code == 409  # a folder is in the way
    assert (await upload(app_client, h, "afile/sub", ("f.txt", b"x"))).status_code == 409  # a file is in the way

    settings_live: GatewaySettings = app_client.app.state.settings  # type: ignore[attr-defined]
    settings_live.zcbot_upload_max_bytes = 100
    over = await upload(app_client, h, "docs", ("ok.txt", b"a" * 60), ("big.txt", b"b" * 60))  # counted while writing
    assert over.status_code == 413, over.text
    huge = await upload(app_client, h, "docs", ("huge.bin", b"h" * 200_000))  # refused from Content-Length
    assert huge.status_code == 413
    exact = await upload(app_client, h, "docs", ("exact.txt", b"e" * 100))
    assert exact.status_code == 201
    assert sorted(os.listdir(root / "docs")) == ["exact.txt", "folder", "keep.txt"]  # all-or-nothing, no temp files


async def test_mkdir(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "alice")
    root = user_dir(settings, "alice")
    made = await post(app_client, h, "mkdir", path="new/nested/deep")
    assert made.status_code == 201, made.text
    assert made.json()["path"] == "new/nested/deep" and made.json()["type"] == "dir"
    assert (root / "new/nested/deep").is_dir()
    assert (await post(app_client, h, "mkdir", path="new/nested/deep")).status_code == 409
    tree(root, {"f.txt": "x"})
    assert (await post(app_client, h, "mkdir", path="f.txt")).status_code == 409
    assert (await post(app_client, h, "mkdir", path="f.txt/sub")).status_code == 409
    for bad in ["", "  ", "a/ b", "tab\there", "x" * 300]:
        assert (await post(app_client, h, "mkdir", path=bad)).status_code == 400, bad
    assert (await app_client.post("/v1/files/mkdir", headers=h, json={"path": "a", "extra": 1})).status_code == 422


# ---- delete ----------------------------------------------------------------------------------


async def test_delete(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "alice")
    root = user_dir(settings, "alice")
    await create_task(app_client, h, name="Deck")  # folder "Deck" (empty, but a task's folder)
    await legacy_task(app_client, "alice", name="Inner", working_dir="outer/inner")
    gone = await create_task(app_client, h, name="Old")
    assert (await app_client.delete(f"/v1/tasks/{gone['task_id']}", headers=h)).status_code == 204
    tree(root, {"notes.txt": "n", "full/x.txt": "x", "empty/": None, "outer/other.txt": "o"})

    cases = [
        ("notes.txt", 200), ("empty", 200), ("full", 400), ("full/x.txt", 200), ("full", 200),
        ("", 400), ("missing.txt", 404), ("missing/deeper", 404),
        ("Deck", 409), ("outer/inner", 409), ("outer", 409),  # a live task's folder, or one containing it
        ("outer/other.txt", 200), ("Old", 200),  # a soft-deleted task's folder is deletable
    ]
    for path, code in cases:
        resp = await post(app_client, h, "delete", path=path)
        assert resp.status_code == code, (path, resp.status_code, resp.text)
    assert sorted(os.listdir(root)) == ["Deck", "outer"] and sorted(os.listdir(root / "outer")) == ["inner"]


# ---- rename ----------------------------------------------------------------------------------


async def test_rename_files_and_plain_folders(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "alice")
    root = user_dir(settings, "alice")
    tree(root, {"a.txt": "a", "b.txt": "b", "dir/x.txt": "x", "dir2/": None})
    ok = await post(app_client, h, "rename", path="a.txt", new_name="c.txt")
    assert ok.status_code == 200, ok.text
    assert ok.json()["path"] == "c.txt" and ok.json()["old_path"] == "a.txt" and ok.json()["tasks_moved"] == 0
    assert (root / "c.txt").read_text() == "a" and not (root / "a.txt").exists()
    moved = await post(app_client, h, "rename", path="dir/x.txt", new_name="y.txt")
    assert moved.status_code == 200 and moved.json()["path"] == "dir/y.txt"
    cases = [
        ("b.txt", "c.txt", 409), ("dir", "dir2", 409), ("c.txt", "c.txt", 400),
        ("c.txt", "../up.txt", 400), ("c.txt", "a/b", 400), ("c.txt", ".hidden", 400), ("c.txt", "", 400),
        ("c.txt", "x\x00", 400), ("", "root2", 400), ("missing.txt", "z.txt", 404),
    ]
    for path, new_name, code in cases:
        resp = await post(app_client, h, "rename", path=path, new_name=new_name)
        assert resp.status_code == code, (path, new_name, resp.status_code, resp.text)
    folder = await post(app_client, h, "rename", path="dir", new_name="dir3")
    assert folder.status_code == 200 and (root / "dir3/y.txt").read_text() == "x"
    assert sorted(os.listdir(root)) == ["b.txt", "c.txt", "dir2", "dir3"]


async def test_rename_task_folder_rewrites_tasks_and_jobs(app_client: httpx.AsyncClient, settings: Settings,
                                                          make_user) -> None:
    h = await make_user(app_client, "alice")
    root = user_dir(settings, "alice")
    one = await create_task(app_client, h, name="One", working_dir="proj")
    two = await create_task(app_client, h, name="Two", working_dir="proj")
    deep = await legacy_task(app_client, "alice", name="Deep", working_dir="client/site")
    trashed = await legacy_task(app_client, "alice", name="Trashed", working_dir="client/old")
    await app_client.delete(f"/v1/tasks/{trashed['task_id']}", headers=h)
    keep = await create_task(app_client, h, name="Keep", working_dir="clientele")  # a prefix, not a child
    tree(root, {"proj/deck.pptx": "p", "client/site/index.html": "i"})
    async with db(app_client) as s:
        s.add(ScheduledJob(user_id="alice", name="daily", cron="0 9 * * *", prompt="brief", working_dir="client/site"))
        await s.commit()

    resp = await post(app_client, h, "rename", path="proj", new_name="Project 2026")
    assert resp.status_code == 200, resp.text
    assert resp.json()["tasks_moved"] == 2 and resp.json()["path"] == "Project 2026"
    for t in (one, two):
        assert (await get_task_row(app_client, t["task_id"])).working_dir == "Project 2026"
    assert (root / "Project 2026/deck.pptx").read_text() == "p" and not (root / "proj").exists()

    resp = await post(app_client, h, "rename", path="client", new_name="customer")
    assert resp.status_code == 200 and resp.json()["tasks_moved"] == 2
    assert (await get_task_row(app_client, deep["task_id"])).working_dir == "customer/site"
    assert (await get_task_row(app_client, trashed["task_id"])).working_dir == "customer/old"
    assert (await get_task_row(app_client, keep["task_id"])).working_dir == "clientele"
    async with db(app_client) as s:
        assert (await s.scalars(select(ScheduledJob.working_dir))).all() == ["customer/site"]
    assert (root / "customer/site/index.html").exists()
    folders = (await app_client.get("/v1/folders", headers=h)).json()["items"]
    assert {f["working_dir"] for f in folders} == {"Project 2026", "customer/site", "clientele"}

    # A symlink inside the root is not followed: no alias can delete or move a task's folder.
    os.symlink(root / "customer", root / "alias")
    assert (await post(app_client, h, "delete", path="alias/site")).status_code == 400
    assert (await post(app_client, h, "rename", path="alias/site", new_name="site2")).status_code == 400
    assert (await post(app_client, h, "delete", path="customer/site")).status_code == 409
    resp = await post(app_client, h, "rename", path="customer/site", new_name="site2")
    assert resp.status_code == 200 and resp.json()["tasks_moved"] == 1
    assert (await get_task_row(app_client, deep["task_id"])).working_dir == "customer/site2"
    assert (root / "customer/site2/index.html").exists()


async def test_rename_refused_while_a_run_is_active(app_client: httpx.AsyncClient, settings: Settings,
                                                    make_user) -> None:
    h = await make_user(app_client, "alice")
    task = await legacy_task(app_client, "alice", name="Busy", working_dir="outer/busy")
    for run_status in ("waiting", "queued", "running", "cancelling"):
        await set_task(app_client, task["task_id"], run_status=run_status)
        for path in ("outer/busy", "outer"):
            resp = await post(app_client, h, "rename", path=path, new_name="elsewhere")
            assert resp.status_code == 409, (run_status, path, resp.text)
            assert run_status in resp.json()["detail"]
    assert (await get_task_row(app_client, task["task_id"])).working_dir == "outer/busy"
    assert (user_dir(settings, "alice") / "outer/busy").is_dir()
    await set_task(app_client, task["task_id"], run_status="error")
    assert (await post(app_client, h, "rename", path="outer", new_name="elsewhere")).status_code == 200
    assert (await get_task_row(app_client, task["task_id"])).working_dir == "elsewhere/busy"


async def test_rename_refuses_nesting_tasks(app_client: httpx.AsyncClient, settings: Settings, make_user) -> None:
    h = await make_user(app_client, "alice")
    root = user_dir(settings, "alice")
    await legacy_task(app_client, "alice", name="W", working_dir="w/inner")
    z = await create_task(app_client, h, name="Z", working_dir="z")
    (root / "w/inner").rmdir()
    (root / "w").rmdir()  # the folder is gone from disk, the task still points into it
    resp = await post(app_client, h, "rename", path="z", new_name="w")
    assert resp.status_code == 409 and "nest" in resp.json()["detail"]
    assert (await get_task_row(app_client, z["task_id"])).working_dir == "z" and (root / "z").is_dir()


async def test_rename_rolls_back_the_db_when_the_disk_rename_fails(
    app_client: httpx.AsyncClient, settings: Settings, make_user, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = await make_user(app_client, "alice")
    task = await legacy_task(app_client, "alice", name="T", working_dir="proj/t")
    real_rename = safe_fs_resolve.renameat2

    def failing_rename(sfd: int, src: str, dfd: int, dst: str, flags: int = 0) -> None:
        if dst == "renamed":
            # The DB row is already rewritten (uncommitted) when the disk rename runs.
            raise OSError(errno.EIO, "simulated I/O error")
        real_rename(sfd, src, dfd, dst, flags)

    monkeypatch.setattr(safe_fs_resolve, "renameat2", failing_rename)
    resp = await post(app_client, h, "rename", path="proj", new_name="renamed")
    assert resp.status_code == 400 and "nothing was changed" in resp.json()["detail"]  # never a 500
    assert (await get_task_row(app_client, task["task_id"])).working_dir == "proj/t"
    assert (user_dir(settings, "alice") / "proj/t").is_dir()
    monkeypatch.setattr(safe_fs_resolve, "renameat2", real_rename)
    assert (await post(app_client, h, "rename", path="proj", new_name="renamed")).status_code == 200
    assert (await get_task_row(app_client, task["task_id"])).working_dir == "renamed/t"


# ---- isolation -------------------------------------------------------------------------------


async def test_users_cannot_reach_each_others_files(app_client: httpx.AsyncClient, settings: Settings,
                                                    make_user) -> None:
    a = await make_user(app_client, "alice")
    b = await make_user(app_client, "bob")
    assert (await upload(app_client, a, "private", ("plan.txt", b"alice only"))).status_code == 201
    await create_task(app_client, a, name="AliceTask")
    assert (await upload(app_client, b, "", ("mine.txt", b"bob"))).status_code == 201

    listing = (await app_client.get("/v1/files", headers=b)).json()
    assert [e["name"] for e in listing["items"]] == ["mine.txt"]
    assert (await app_client.get("/v1/files", headers=b, params={"path": "private"})).json()["exists"] is False
    assert (await app_client.get("/v1/files/download", headers=b, params={"path": "private/plan.txt"})).status_code == 404
    assert (await post(app_client, b, "delete", path="private/plan.txt")).status_code == 404
    assert (await post(app_client, b, "rename", path="AliceTask", new_name="x")).status_code == 404
    for path in ("../alice/private/plan.txt", "/alice/private/plan.txt"):
        assert (await app_client.get("/v1/files/download", headers=b, params={"path": path})).status_code == 400
    assert (user_dir(settings, "alice") / "private/plan.txt").read_bytes() == b"alice only"
    assert (await app_client.get("/v1/files")).status_code == 401
    assert (await app_client.get("/v1/files/download", params={"path": "x"})).status_code == 401
