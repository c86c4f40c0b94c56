"""The glassbox page asks an older version (issue 37), and how many older versions a process keeps open
(``RAG_OPEN_VERSIONS``), over the three-version history of ``support.history`` (v1 the corpus; v2 Mingo County
added, a file deleted; v3 an attention publish, current).

The page's version picker is filled from ``GET /versions``; the chosen version (or an "as of" date-time or commit)
goes to /chat as ``version`` / ``as_of``, and an answer from a version ``CURRENT`` no longer names says so. Driven
in headless Chromium by Playwright as tests/api/test_glassbox.py does; everything is read as text.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from support.history import build_history, git_head
from support.serving import API_KEYS, INTERNAL_KEY, serve

from livemem.errors import ConfigError
from livemem.settings import ServingSettings
from serving.app import create_app
from serving.settings import Settings

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run"]  # fmt: skip
MINGO = "Where do SNAP applications in Mingo County go?"  # Mingo County was added in v2


@pytest.fixture(scope="module")
def history(tmp_path_factory, embedder) -> dict:
    return build_history(tmp_path_factory.mktemp("glassbox-history"), embedder)


def app_for(history: dict, embedder, **settings):
    return create_app(Settings(index_dir=history["home"].root, warm_up=False, api_keys=API_KEYS, **settings), embedder)


@pytest.fixture(scope="module")
def base_url(history, embedder) -> Iterator[str]:
    with serve(app_for(history, embedder)) as url:
        yield url


# --- RAG_OPEN_VERSIONS ------------------------------------------------------------------------------------------
def ask(client: TestClient, version: str) -> dict:
    answer = client.post("/query", json={"query": "SNAP office", "top_k": 3, "version": version})
    assert answer.status_code == 200, answer.text
    assert answer.json()["index_version"] == version and answer.json()["answered_from"]["current"] is False
    return answer.json()


def test_open_versions_bounds_the_older_versions_a_process_keeps(history, embedder) -> None:
    v1, v2 = history["v1"], history["v2"]
    assert ServingSettings.defaults().open_versions == 2
    with TestClient(app_for(history, embedder, open_versions=1, cache_size=0)) as client:
        older = client.app.state.serving.older
        ask(client, v1)
        ask(client, v2)  # the least recently used (v1) goes
        assert older.loaded() == [v2] and older.loads == 2
        ask(client, v2)
        assert older.loads == 2  # kept: not loaded again
    with TestClient(app_for(history, embedder, open_versions=0, cache_size=0)) as client:
        older = client.app.state.serving.older
        ask(client, v1)
        ask(client, v1)  # 0: none kept open, each request loads its version (and it is freed after)
        assert older.loaded() == [] and older.loads == 2


def test_open_versions_is_validated_with_its_variable(monkeypatch) -> None:
    monkeypatch.setenv("RAG_OPEN_VERSIONS", "3")
    assert ServingSettings.from_env().open_versions == 3
    for bad in ("-1", "65", "two"):
        monkeypatch.setenv("RAG_OPEN_VERSIONS", bad)
        with pytest.raises(ConfigError, match="RAG_OPEN_VERSIONS"):
            ServingSettings.from_env()


# --- the glassbox page --------------------------------------------------------------------------------------------
@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium (.ci/run installs it)")
def test_the_page_asks_an_older_version_and_says_it_is_not_current(base_url, history) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency")
    v1, v3 = history["v1"], history["v3"]
    published_v1 = history["home"].published_at(v1).isoformat().replace("+00:00", "Z")
    expect = sync_api.expect
    expect.set_options(timeout=20_000)
    sent: list[dict] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.set_default_timeout(20_000)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/chat") else None)
            page.goto(f"{base_url}/glassbox")

            # the picker lists every kept version, newest first, after "current"
            picker = page.locator("#version option")
            expect(picker).to_have_count(4)
            assert [picker.nth(i).get_attribute("value") for i in range(4)] == ["", v3, history["v2"], v1]
            assert picker.nth(1).text_content().endswith(f"{v3} (current)")
            assert picker.nth(3).text_content() == f"{published_v1} · {v1}"

            # the current version: Mingo County is cited, nothing says "older"
            page.fill("#question", MINGO)
            page.click("#ask")
            expect(page.locator("body")).to_have_attribute("data-state", "done")
            expect(page.locator("#citations")).to_contain_text("mingo-county.md")
            expect(page.locator("#answered-from")).to_be_hidden()
            assert "version" not in sent[-1] and "as_of" not in sent[-1]

            # v1, picked: answered from it, marked not current, with its publish time; Mingo was not there yet
            page.select_option("#version", v1)
            page.click("#ask")
            expect(page.locator("body")).to_have_attribute("data-state", "done")
            banner = page.locator("#answered-from")
            expect(banner).to_be_visible()
            expect(banner).to_have_attribute("data-current", "false")
            assert banner.text_content().startswith(
                f"Answered from version {v1} (published {published_v1}), not current"
            )
            expect(page.locator("#route")).to_contain_text(f"{v1} (not current)")
            assert "mingo-county.md" not in page.locator("#citations").text_content()
            assert sent[-1]["version"] == v1

            # as of a commit the current version holds (picker back on current): answered from it, said so
            page.select_option("#version", "")
            page.fill("#as-of", git_head(history["repo"]))
            page.click("#ask")
            expect(page.locator("body")).to_have_attribute("data-state", "done")
            expect(banner).to_have_attribute("data-current", "true")
            assert banner.text_content().startswith(f"Answered from version {v3} (published ")
            assert ", the current one." in banner.text_content()
            assert sent[-1]["as_of"] == git_head(history["repo"]) and "version" not in sent[-1]

            # an as-of before the first publish: the API's 404, shown as text
            page.fill("#as-of", "2001-01-01")
            page.click("#ask")
            expect(page.locator("body")).to_have_attribute("data-state", "error")
            expect(page.locator("#status")).to_contain_text("404")
            expect(page.locator("#status")).to_contain_text("no version was published")

            # a link to an explanation of an older answer: /glassbox?q=...&version=... asks it at once
            page.goto(f"{base_url}/glassbox?q=Mingo+County+SNAP&version={v1}")
            expect(page.locator("body")).to_have_attribute("data-state", "done")
            expect(page.locator("#answered-from")).to_have_attribute("data-current", "false")
            assert page.locator("#version").input_value() == v1

            # the internal key lists the same versions (the picker is read again when the key changes)
            page.fill("#key", INTERNAL_KEY)
            page.locator("#question").focus()
            expect(page.locator("#version option")).to_have_count(4)
            assert errors == []
        finally:
            browser.close()
