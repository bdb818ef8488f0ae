"""GET /v1/skills: the user's merged registry (the route alone, auth and settings overridden)."""

from __future__ import annotations

import shutil

import pytest
from skillkit import SKILLS

fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from zcbot_core.platform.config import Settings  # noqa: E402
from zcbot_gateway.deps import get_current_user, get_settings_dep  # noqa: E402
from zcbot_gateway.routes import skills as skills_routes  # noqa: E402


def test_list_skills_merges_user_skills(tmp_path, monkeypatch):
    builtin = tmp_path / "builtin"
    shutil.copytree(SKILLS, builtin, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("ZCBOT_SKILLS_DIR", str(builtin))
    storage = tmp_path / "users"
    user_skills = storage / "u1" / ".skills"
    (user_skills / "ppt").mkdir(parents=True)
    (user_skills / "ppt" / "SKILL.md").write_text("---\nname: ppt\ndescription: my decks\n---\nbody\n")
    (user_skills / "broken").mkdir()
    (user_skills / "broken" / "SKILL.md").write_text("no frontmatter here")

    app = fastapi.FastAPI()
    app.include_router(skills_routes.router)
    settings = Settings(ZCBOT_STORAGE_ROOT=str(storage))
    app.dependency_overrides[get_current_user] = lambda: "u1"
    app.dependency_overrides[get_settings_dep] = lambda: settings
    with TestClient(app) as client:
        resp = client.get("/v1/skills")
        assert resp.status_code == 200, resp.text
        body = resp.json()
        by_name = {s["name"]: s for s in body["items"]}
        assert set(by_name) == {"ppt", "proposal", "brief", "coding"}
        assert by_name["ppt"] == {"name": "ppt", "description": "my decks", "source": "user", "overrides": True, "model": None}
        assert by_name["coding"]["source"] == "builtin" and by_name["coding"]["overrides"] is False
        assert body["load_errors"] == [{"source": "user", "path": ".skills/broken/SKILL.md",
                                        "error": "SKILL.md must start with YAML frontmatter between '---' lines (name, description)"}]

        app.dependency_overrides[get_current_user] = lambda: "u2"  # another user: built-ins only
        body = client.get("/v1/skills").json()
        assert {s["source"] for s in body["items"]} == {"builtin"} and body["load_errors"] == []
