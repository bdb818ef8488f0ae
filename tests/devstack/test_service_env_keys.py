"""`zcbot up` hands the web search keys to the runner only (issue 25: keys never in a sandbox, and
not in the executor that starts sandboxes, nor in any other service)."""

from __future__ import annotations

from zcbot_devstack.bootstrap import service_env
from zcbot_devstack.services import SERVICES


def test_search_keys_reach_the_runner_alone() -> None:
    env = {"ZCBOT_TAVILY_API_KEY": "tvly-x", "ZCBOT_BOCHA_API_KEY": "sk-y", "ZCBOT_SEARXNG_URL": "http://s"}
    names = [spec.name for spec in SERVICES]
    assert "runner" in names and "executor" in names
    for name in names:
        got = service_env(name, dict(env))
        has_keys = "ZCBOT_TAVILY_API_KEY" in got or "ZCBOT_BOCHA_API_KEY" in got
        assert has_keys == (name == "runner"), name
        assert got["ZCBOT_SEARXNG_URL"] == "http://s"  # not a secret: every service may read it
