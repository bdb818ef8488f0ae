"""Issue 29 through the real services (gateway, runner, executor with bwrap, NATS, PostgreSQL;
only the LLM is faked): an agent run overwrites, edits and deletes files (fs tools and a shell
call that also tries to reach the version store), `done` counts the files it changed, and
`revert-files` puts the task folder back exactly as it was."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.db import db_rows
from tests.helpers.stack import Stack

SHELL = ("rm old.txt && printf 'made by the run' > made.txt; "
         # the sandbox tries to reach the version store (outside its mounts) and destroy it
         "rm -rf /workspace/../.versions ../../.versions /storage/.versions 2>/dev/null; "
         "ls -a /workspace/.. 2>&1 | head -5; true")
RUN = [
    {"tool_calls": [{"name": "write", "arguments": {"path": "report.md", "content": "rewritten by the agent\n"}}]},
    {"tool_calls": [{"name": "edit", "arguments": {"path": "notes.txt", "old_str": "keep me", "new_str": "changed"}}]},
    {"tool_calls": [{"name": "shell", "arguments": {"command": SHELL}}]},
    {"text": "Done: files reworked."},
]
ORIGINAL = {"report.md": b"the user's finished proposal\n", "notes.txt": b"please keep me\n", "old.txt": b"old data\n",
            "untouched.txt": b"never changed\n"}


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and not p.name.startswith(".")}


async def test_run_is_reverted_exactly(stack: Stack) -> None:
    stack.fake.script("KEY-history", RUN)
    token = await stack.login("hana")
    task = await stack.create_task(token, "Proposal")
    folder = stack.settings.storage_root / "hana" / task["working_dir"]
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in ORIGINAL.items():
        (folder / name).write_bytes(data)

    r = await stack.post(token, task["task_id"], "KEY-history rework the files")
    assert r.status_code == 202, r.text
    run_id = r.json()["run_id"]
    events = await stack.events(token, r.json()["events_url"])
    done = events[-1]
    assert done["event"] == "done" and done["data"]["status"] == "ok", done
    results = [e["data"] for e in events if e["event"] == "tool_result"]
    assert all(t["ok"] for t in results), results
    assert done["data"]["files_changed"] == 4, done  # report.md, notes.txt, old.txt, made.txt
    assert _tree(folder) == {"made.txt": b"made by the run", "notes.txt": b"please changed\n",
                             "report.md": b"rewritten by the agent\n", "untouched.txt": b"never changed\n"}

    wd = task["working_dir"]
    rows = db_rows(stack.settings.zcbot_db_url, "select path, kind from data_events where run_id=:r order by id", r=run_id)
    assert [tuple(x) for x in rows] == [(f"{wd}/report.md", "modify"), (f"{wd}/notes.txt", "modify"),
                                        (f"{wd}/made.txt", "create"), (f"{wd}/old.txt", "delete")]
    store = stack.settings.storage_root / ".versions" / "hana"
    assert store.is_dir() and any(store.rglob("*"))  # the sandbox's attempt did not reach it

    async with stack.client(token) as c:
        versions = (await c.get("/v1/files/versions", params={"path": f"{wd}/report.md"})).json()
        assert versions["total"] == 1 and versions["items"][0]["available"], versions
        rev = await c.post(f"/v1/tasks/{task['task_id']}/runs/{run_id}/revert-files", json={})
    assert rev.status_code == 200, rev.text
    assert rev.json()["ok"] and rev.json()["conflicts"] == [], rev.json()
    assert _tree(folder) == ORIGINAL
