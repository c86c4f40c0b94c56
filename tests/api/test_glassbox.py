"""The glassbox page (GET /glassbox) in headless Chromium against a real uvicorn serving a small built index.

The index is the bundled example (chunks, GBIM places, registry) in a git repository of its own, plus one page
whose text holds HTML (``<script>``, an ``<img onerror>``) that must show as text; after the build that page is
edited and committed, so its citation must read as changed while the others read as current. Its sources file
configures ``spatial.counties`` with the shared county boundaries (``../shared/data/geo``, as in
tests/pipelines/test_gbim_export.py), so the GBIM export writes them into the version and the map draws them; a copy of the
index re-exported without them shows the page drawing the places alone. Chromium is
Debian's ``/usr/bin/chromium`` driven by Playwright (as in tests/integration/test_dagster_ui.py; .ci/run installs it). The
screenshot goes to ``bench/.work/ui/glassbox.png``, beside the Dagster UI's, the folder CI keeps
(``LIVEMEM_GLASSBOX_SCREENSHOT`` moves it, e.g. to docs/img/glassbox.png).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from support.context import INTERNAL_KEY, make_app
from support.serving import build_and_publish, commit_files, git, serve

from livemem.gbim import COUNTIES_FILE, export_gbim
from livemem.registry import RegistryConfig, run_verification
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome

PROJECT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
COUNTIES = PROJECT.parent / "shared" / "data" / "geo" / "wv_counties.geojson"
QUESTION = "Where is a food pantry in Fayette County?"
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
    """The example index with the hostile page and county boundaries, built and published (chunks, GBIM with
    counties, registry); then the hostile page is edited in its repository, so the served version is behind it
    for that page only."""
    assert COUNTIES.is_file(), f"{COUNTIES}: the shared data must be beside the project"
    root = tmp_path_factory.mktemp("glassbox")
    shutil.copytree(PROJECT / "examples", root / "examples")
    benefits = root / "examples" / "corpus" / "benefits"
    (benefits / HOSTILE).write_text(HOSTILE_TEXT, encoding="utf-8")
    sources = root / "examples" / "sources.yaml"
    with_counties = f"\nspatial:\n  counties: {{path: {COUNTIES}, name_field: NAME}}\n"
    sources.write_text(sources.read_text(encoding="utf-8").replace("\nspatial:\n", with_counties, 1), encoding="utf-8")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "example corpus")
    config = load_sources(sources)
    assert config.section("spatial", "spatial_config")["counties"]["name_field"] == "NAME"
    home = IndexHome(root / "rag_index")
    build_and_publish(root / "examples" / "sources.yaml", home, embedder)
    gbim = export_gbim(config, home, embedder)
    home.publish(gbim.version_id, gbim.base_version, config.retention)
    registry = run_verification(RegistryConfig.from_sources(config), home)
    home.publish(registry.version_id, registry.base_version, config.retention)
    commit_files(root, {f"examples/corpus/benefits/{HOSTILE}": "# Winter coat drive\n\nThe coat drive has ended.\n"},
                 "coat drive over")  # fmt: skip
    return home


@pytest.fixture(scope="module")
def base_url(home, embedder) -> Iterator[str]:
    with serve(make_app(home, embedder)) as url:
        yield url


@pytest.fixture(scope="module")
def url_without_counties(home, embedder, tmp_path_factory) -> Iterator[str]:
    """A copy of the index whose GBIM export ran again from the example's own sources file (no
    ``spatial.counties``): its current version has places but no county polygons."""
    copy = IndexHome(shutil.copytree(home.root, tmp_path_factory.mktemp("glassbox-no-counties") / "rag_index"))
    config = load_sources(PROJECT / "examples" / "sources.yaml")
    assert "counties" not in config.section("spatial", "spatial_config")
    gbim = export_gbim(config, copy, embedder)
    assert gbim.staged, gbim.reason
    copy.publish(gbim.version_id, gbim.base_version, config.retention)
    with serve(make_app(copy, embedder)) as url:
        yield url


def test_page_files_are_served_with_a_strict_policy(base_url):
    page = httpx.get(f"{base_url}/glassbox")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "connect-src 'self'" in policy and "default-src 'none'" in policy
    assert "http" not in page.text.replace('content="width', "")  # no external script, style sheet or font
    counties = httpx.get(f"{base_url}/glassbox/counties.geojson")
    assert counties.status_code == 200 and counties.headers["content-type"] == "application/geo+json"
    features = counties.json()["features"]
    assert len(features) == 55 and all(set(f["properties"]) == {"name"} for f in features)
    assert "Fayette" in {f["properties"]["name"] for f in features}
    assert httpx.get(f"{base_url}/glassbox/counties.geojson", headers={"x-api-key": "not-a-key"}).status_code == 401
    assert httpx.get(f"{base_url}/glassbox/wv_counties.geojson").status_code == 404  # no copy in the app any more
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
            page.fill("#question", QUESTION)
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
            expect(rows.first).to_contain_text("(304) 555-")  # phones as people write them, not E.164
            expect(page.locator("#map path.county")).to_have_count(55)
            expect(page.locator("#map path.county.asked")).to_have_count(1)
            expect(page.locator("#map path.county.asked title")).to_have_text("Fayette County")
            expect(page.locator("#map circle.place").first).to_be_visible()
            expect(page.locator("#map")).to_contain_text("Food Pantry")
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)

            # One program in two stores: the map place disagrees with the registry, and the page says so.
            page.fill("#question", "heating help in Raleigh County")
            page.click("#ask")
            expect(page.locator("body")).to_have_attribute("data-state", "done")
            expect(page.locator("#route")).to_contain_text("conflict: Raleigh LIEAP Intake")
            expect(page.locator("#route")).to_contain_text('registry "200 Prince Street, Beckley, WV 25801"')

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


def test_the_county_polygons_come_from_the_served_version(home):
    """What the page draws is the file the export wrote into the version (listed and hashed in its manifest)."""
    manifest = home.current_manifest()
    assert COUNTIES_FILE in manifest["files"] and manifest["gbim"]["counties"]["file"] == COUNTIES_FILE
    assert not list((PROJECT / "serving" / "static" / "glassbox").glob("*.geojson"))


def test_without_county_polygons_the_page_draws_the_places_alone(url_without_counties):
    missing = httpx.get(f"{url_without_counties}/glassbox/counties.geojson")
    assert missing.status_code == 404 and "spatial.counties" in missing.json()["detail"]
    expect = sync_api.expect
    expect.set_options(timeout=20_000)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{url_without_counties}/glassbox?q={quote(QUESTION)}")
            expect(page.locator("body")).to_have_attribute("data-state", "done")
            expect(page.locator("#map")).to_have_attribute("data-counties", "0")
            expect(page.locator("#map path.county")).to_have_count(0)
            expect(page.locator("#map circle.place").first).to_be_visible()
            expect(page.locator("#map")).to_contain_text("Food Pantry")
            expect(page.locator("#map-note")).to_contain_text("no county polygons")
            expect(page.locator("#map .scale text")).to_have_text(re.compile(r"^[0-9.]+ km$"))  # a sense of distance
            expect(page.locator("#status")).not_to_have_class("error")
            # The frame is fitted to the places: every dot lies inside the drawing, none on its edge.
            inside = page.evaluate(
                """() => {
                const box = document.querySelector('#map svg').viewBox.baseVal;
                return [...document.querySelectorAll('#map circle.place')].map((c) => {
                  const [x, y] = [Number(c.getAttribute('cx')), Number(c.getAttribute('cy'))];
                  return x > box.x + 10 && x < box.x + box.width - 10 && y > box.y + 10 && y < box.y + box.height - 10;
                });
            }"""
            )
            assert inside and all(inside)
            assert errors == []
        finally:
            browser.close()
