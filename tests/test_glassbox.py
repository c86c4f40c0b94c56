"""The glassbox page (GET /glassbox) in headless Chromium against a real uvicorn serving a small built index.

The index is the bundled example (chunks, GBIM places, registry) in a git repository of its own, plus one page
whose text holds HTML (``<script>``, an ``<img onerror>``) that must show as text; after the build that page is
edited and committed, so its citation must read as changed while the others read as current. Chromium is
Debian's ``/usr/bin/chromium`` driven by Playwright (as in tests/test_dagster_ui.py; .ci/run installs it). The
screenshot goes to ``bench/.work/ui/glassbox.png``, beside the Dagster UI's, the folder CI keeps
(``LIVEMEM_GLASSBOX_SCREENSHOT`` moves it, e.g. to docs/img/glassbox.png).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from context_support import INTERNAL_KEY, make_app
from serving_support import build_and_publish, commit_files, git

from livemem.config import load_sources
from livemem.gbim import export_gbim
from livemem.registry import RegistryConfig, run_verification
from livemem.store import IndexHome

PROJECT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOT = Path(os.environ.get("LIVEMEM_GLASSBOX_SCREENSHOT") or PROJECT / "bench" / ".work" / "ui" / "glassbox.png")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run"]  # fmt: skip
HOSTILE = "coat-drive.md"
HOSTILE_TEXT = (
    "# Winter coat drive\n\nThe winter coat drive hands out free winter coats every Saturday. "
    '<script>window.pwned = 1</script> Bring the children\'s sizes. <img src=x onerror="window.pwned = 2">\n'
)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="no /usr/bin/chromium (apt-get install chromium chromium-driver; .ci/run does)"
)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency (pip install -e .[dev])")


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder) -> IndexHome:
    """The example index with the hostile page, built and published (chunks, GBIM, registry); then the hostile
    page is edited in its repository, so the served version is behind it for that page only."""
    root = tmp_path_factory.mktemp("glassbox")
    shutil.copytree(PROJECT / "examples", root / "examples")
    benefits = root / "examples" / "corpus" / "benefits"
    (benefits / HOSTILE).write_text(HOSTILE_TEXT, encoding="utf-8")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "example corpus")
    config = load_sources(root / "examples" / "sources.yaml")
    home = IndexHome(root / "rag_index")
    build_and_publish(root / "examples" / "sources.yaml", home, embedder)
    gbim = export_gbim(config, home, embedder)
    home.publish(gbim.version_id, gbim.base_version, config.retention)
    registry = run_verification(RegistryConfig.from_sources(config), home)
    home.publish(registry.version_id, registry.base_version, config.retention)
    commit_files(root, {f"examples/corpus/benefits/{HOSTILE}": "# Winter coat drive\n\nThe coat drive has ended.\n"},
                 "coat drive over")  # fmt: skip
    return home


@contextmanager
def serve(app) -> Iterator[str]:
    """``app`` behind a real uvicorn server on a free loopback port; yields its base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def base_url(home, embedder) -> Iterator[str]:
    with serve(make_app(home, embedder)) as url:
        yield url


def test_page_files_are_served_with_a_strict_policy(base_url):
    page = httpx.get(f"{base_url}/glassbox")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "connect-src 'self'" in policy and "default-src 'none'" in policy
    assert "http" not in page.text.replace('content="width', "")  # no external script, style sheet or font
    counties = httpx.get(f"{base_url}/glassbox/wv_counties.geojson")
    assert counties.headers["content-type"] == "application/geo+json" and len(counties.json()["features"]) == 55
    assert httpx.get(f"{base_url}/glassbox/..%2Fapp.py").status_code == 404
    assert "/glassbox" not in httpx.get(f"{base_url}/openapi.json").json()["paths"]


def test_a_person_sees_answer_provenance_currency_registry_and_map(base_url):
    expect = sync_api.expect
    expect.set_options(timeout=20_000)
    requested: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.set_default_timeout(20_000)
            page.on("request", lambda r: requested.append(r.url))
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{base_url}/glassbox")

            # A resource question: registry rows with their age, places on the map, citations current.
            page.fill("#question", "Where is a food pantry in Fayette County?")
            page.click("#ask")
            expect(page.locator("body")).to_have_attribute("data-state", "done")
            expect(page.locator("#answer")).not_to_be_empty()
            chunk = page.locator("#citations li[data-kind=chunk]").first
            expect(chunk).to_contain_text("repository ")
            expect(chunk).to_contain_text("commit ")
            expect(chunk).to_contain_text("path ")
            expect(chunk).to_have_attribute("data-currency", "current")
            rows = page.locator("#registry tbody tr")
            expect(rows.first).to_contain_text("Fayette")
            expect(rows.first).to_contain_text(" days")
            expect(page.locator("#map path.county")).to_have_count(55)
            expect(page.locator("#map path.county.asked")).to_have_count(1)
            expect(page.locator("#map path.county.asked title")).to_have_text("Fayette County")
            expect(page.locator("#map circle.place").first).to_be_visible()
            expect(page.locator("#map")).to_contain_text("Food Pantry")
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)

            # The page with HTML in it: shown as text, nothing runs, and its source has changed since.
            page.fill("#question", "winter coat drive free coats")
            page.click("#ask")
            expect(page.locator("body")).to_have_attribute("data-state", "done")
            hostile = page.locator("#citations li[data-kind=chunk]", has_text="<script>window.pwned = 1</script>")
            expect(hostile).to_have_count(1)
            expect(hostile).to_contain_text('<img src=x onerror="window.pwned = 2">')
            expect(hostile).to_contain_text(f"path examples/corpus/benefits/{HOSTILE}")
            expect(hostile).to_have_attribute("data-currency", "changed")
            expect(hostile.locator(".badge.changed")).to_have_text("changed since indexed")
            assert page.evaluate("window.pwned === undefined")
            assert page.evaluate("document.querySelectorAll('script').length") == 1  # the page's own
            assert page.evaluate("document.querySelectorAll('img').length") == 0

            # The key box: the same keys as the API; an unknown key is the API's 401, shown as text.
            page.fill("#key", "not-a-key")
            page.click("#ask")
            expect(page.locator("body")).to_have_attribute("data-state", "error")
            expect(page.locator("#status")).to_contain_text("401")
            page.fill("#key", INTERNAL_KEY)
            page.click("#ask")
            expect(page.locator("body")).to_have_attribute("data-state", "done")
            assert errors == []
        finally:
            browser.close()
    assert requested and all(url.startswith(base_url) for url in requested), "the page reached beyond the app"
    assert SCREENSHOT.stat().st_size < 1_000_000
