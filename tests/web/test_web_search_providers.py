"""The search providers against a fake provider server on loopback (real HTTP): each one's request
and answer shape, the key only in the Authorization header, and failures as `SearchError`s that
never carry the key."""

from __future__ import annotations

import pytest

from tests.helpers.fake_web import SEARCH_RESULTS, FakeWeb, fake_web  # noqa: F401  (fixture)
from zcbot_core.web.search import BochaProvider, SearchError, format_results, make_provider
from zcbot_core.web.settings import HostToolSettings

TAVILY_KEY = "tvly-test-secret-key"
BOCHA_KEY = "sk-bocha-test-secret"


def settings(**values: str) -> HostToolSettings:
    return HostToolSettings.model_validate(values)


@pytest.mark.parametrize("name", ["searxng", "tavily", "bocha"])
async def test_each_provider_returns_title_url_snippet_date(fake_web: FakeWeb, name: str) -> None:
    base = fake_web.base_url
    config = {"searxng": {"ZCBOT_SEARXNG_URL": base},
              "tavily": {"ZCBOT_TAVILY_API_KEY": TAVILY_KEY, "ZCBOT_TAVILY_URL": base},
              "bocha": {"ZCBOT_BOCHA_API_KEY": BOCHA_KEY, "ZCBOT_BOCHA_URL": base}}[name]
    s = settings(**config)
    assert s.chosen_provider() == name
    provider = make_provider(s)
    assert provider is not None and provider.name == name
    results = await provider.search("solar record", 5)
    await provider.close()
    assert [r.url for r in results] == [r["url"] for r in SEARCH_RESULTS]
    assert results[0].title == "Solar output hits record"
    assert results[0].snippet.startswith("Grid operators report record solar")
    assert results[0].date is not None and results[0].date.startswith("2026-05-30")
    [hit] = fake_web.hits
    if name == "searxng":
        assert hit["query"] == {"q": "solar record", "format": "json"}
    else:
        key = TAVILY_KEY if name == "tavily" else BOCHA_KEY
        assert hit["headers"]["Authorization"] == f"Bearer {key}"
        assert key not in hit["body"] and key not in str(hit["query"])  # only in the header
    text = format_results("solar record", results)
    assert "[Solar output hits record](https://news.example.com/solar-record) (2026-05-30" in text


async def test_a_refused_key_is_an_error_without_the_key(fake_web: FakeWeb) -> None:
    wrong = "sk-bocha-wrong-key-123"
    provider = BochaProvider(fake_web.base_url, 5.0, wrong)
    with pytest.raises(SearchError) as caught:
        await provider.search("x", 3)
    await provider.close()
    assert "HTTP 401" in str(caught.value) and wrong not in str(caught.value)


async def test_an_unreachable_provider_is_an_error() -> None:
    s = settings(ZCBOT_SEARXNG_URL="http://127.0.0.1:9")  # the discard port: connection refused
    provider = make_provider(s)
    assert provider is not None
    with pytest.raises(SearchError, match="unreachable"):
        await provider.search("x", 3)
    await provider.close()


def test_provider_choice() -> None:
    assert settings().chosen_provider() is None and make_provider(settings()) is None
    both = settings(ZCBOT_SEARXNG_URL="http://s", ZCBOT_BOCHA_API_KEY=BOCHA_KEY)
    assert both.chosen_provider() == "searxng"
    assert settings(ZCBOT_SEARXNG_URL="http://s", ZCBOT_BOCHA_API_KEY=BOCHA_KEY,
                    ZCBOT_WEB_SEARCH_PROVIDER="bocha").chosen_provider() == "bocha"
    with pytest.raises(ValueError, match="needs ZCBOT_TAVILY_API_KEY"):
        settings(ZCBOT_WEB_SEARCH_PROVIDER="tavily")
    assert BOCHA_KEY not in repr(both)
