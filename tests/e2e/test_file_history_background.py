"""Issue 29 through the real services (gateway, runner, executor with bwrap, NATS, PostgreSQL; only
the LLM is faked): what a *background* process does to the task folder is recorded when it ends,
for the run that started it (the executor's file-changes report, recorded by a runner); folders
made and removed are in the log; and `revert-files` puts the tree back exactly (a made folder
removed, a removed folder made again with its files, a moved file moved back)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.helpers.db import db_rows
from tests.helpers.stack import Stack

BACKGROUND = ("sleep 1; printf 'made in the background' > bg.txt; rm keep/inner/doc.txt; rmdir keep/inner; "
              "rm -r old_dir; mkdir -p fresh/deeper; printf 'rewritten' > report.md")
RUN = [
    {"tool_calls": [{"name": "shell", "arguments": {"command": BACKGROUND, "background": True}}]},
    # foreground: a move (one rename change) and a write that makes its folder
    {"tool_calls": [{"name": "shell", "arguments": {"command": "mv notes.txt moved.txt"}}]},
    {"tool_calls": [{"name": "write", "arguments": {"path": "out/new/result.txt", "content": "result\n"}}]},
    {"text": "Started the job."},
]
ORIGINAL = {"report.md": b"the user's proposal\n", "notes.txt": b"notes\n", "old_dir/a.txt": b"a\n",
            "old_dir/sub/b.txt": b"b\n", "keep/inner/doc.txt": b"doc\n"}
ORIGINAL_DIRS = {"old_dir", "old_dir/sub", "old_dir/empty", "keep", "keep/inner"}


def _tree(folder: Path) -> tuple[dict[str, bytes], set[str]]:
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
             if p.is_file() and not p.name.startswith(".")}
    dirs = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_dir() and not p.name.startswith(".")}
    return files, dirs


async def _rows(stack: Stack, run_id: str, want: int) -> list[tuple[str, str, str | None]]:
    rows: list[tuple[str, str, str | None]] = []
    for _ in range(150):  # the background job ends ~1 s after it starts; the executor sees it within a second
        rows = [tuple(x) for x in db_rows(stack.settings.zcbot_db_url,
                                          "select path, kind, old_path from data_events where run_id=:r order by id",
                                          r=run_id)]
        if len(rows) >= want:
            return rows
        await asyncio.sleep(0.2)
    return rows


async def test_background_changes_recorded_and_tree_reverted(stack: Stack) -> None:
    stack.fake.script("KEY-bg-history", RUN)
    token = await stack.login("bea")
    task = await stack.create_task(token, "Background")
    folder = stack.settings.storage_root / "bea" / task["working_dir"]
    for rel in ORIGINAL_DIRS:
        (folder / rel).mkdir(parents=True, exist_ok=True)
    for rel, data in ORIGINAL.items():
        (folder / rel).write_bytes(data)
    before = _tree(folder)

    r = await stack.post(token, task["task_id"], "KEY-bg-history start the job")
    assert r.status_code == 202, r.text
    run_id = r.json()["run_id"]
    events = await stack.events(token, r.json()["events_url"])
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events[-1]
    assert all(e["data"]["ok"] for e in events if e["event"] == "tool_result")

    wd = task["working_dir"]
    foreground = [(f"{wd}/moved.txt", "rename", f"{wd}/notes.txt"), (f"{wd}/out", "mkdir", None),
                  (f"{wd}/out/new", "mkdir", None), (f"{wd}/out/new/result.txt", "create", None)]
    background = {(f"{wd}/fresh", "mkdir", None), (f"{wd}/fresh/deeper", "mkdir", None),
                  (f"{wd}/bg.txt", "create", None), (f"{wd}/report.md", "modify", None),
                  (f"{wd}/old_dir/a.txt", "delete", None), (f"{wd}/old_dir/sub/b.txt", "delete", None),
                  (f"{wd}/keep/inner/doc.txt", "delete", None), (f"{wd}/old_dir/sub", "rmdir", None),
                  (f"{wd}/old_dir/empty", "rmdir", None), (f"{wd}/old_dir", "rmdir", None),
                  (f"{wd}/keep/inner", "rmdir", None)}
    rows = await _rows(stack, run_id, len(foreground) + len(background))
    assert rows[:len(foreground)] == foreground, rows
    assert set(rows[len(foreground):]) == background, rows
    assert len(rows) == len(foreground) + len(background), rows
    # the report's key went in with its rows (a redelivery would write nothing: test_report_once.py)
    keys = db_rows(stack.settings.zcbot_db_url, "select user_id, report_id from file_reports_recorded")
    assert len(keys) == 1 and keys[0][0] == "bea" and keys[0][1].startswith("p"), keys
    bg_rows = rows[len(foreground):]
    assert bg_rows.index((f"{wd}/old_dir/sub", "rmdir", None)) < bg_rows.index((f"{wd}/old_dir", "rmdir", None))
    assert (folder / "bg.txt").read_bytes() == b"made in the background" and not (folder / "old_dir").exists()

    async with stack.client(token) as c:
        versions = (await c.get("/v1/files/versions", params={"path": f"{wd}/report.md"})).json()
        assert versions["total"] == 1 and versions["items"][0]["run_id"] == run_id, versions
        rev = await c.post(f"/v1/tasks/{task['task_id']}/runs/{run_id}/revert-files", json={})
    assert rev.status_code == 200, rev.text
    assert rev.json()["ok"] and rev.json()["conflicts"] == [] and rev.json()["missing_versions"] == [], rev.json()
    assert _tree(folder) == before
