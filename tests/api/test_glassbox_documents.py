"""The glassbox page (headless Chromium, a real uvicorn) names the page of a cited PDF chunk: "page 2 of
winter-heating-flyer.pdf", from the chunk's metadata (/chunks/{id}), beside its currency badge. The index is the
bundled example's chunks (examples/make_documents.py wrote the flyer); see tests/api/test_glassbox.py for the page's
other promises."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.context import make_app
from support.examples import copy_bundled_example
from support.serving import serve

from livemem.ingest.build import build_version
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run"]  # fmt: skip
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="no /usr/bin/chromium (apt-get install chromium chromium-driver; .ci/run does)"
)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency (pip install -e .[dev])")


@pytest.fixture(scope="module")
def base_url(tmp_path_factory, embedder) -> Iterator[str]:
    root = tmp_path_factory.mktemp("glassbox-documents")
    _, sources = copy_bundled_example(root)
    config = load_sources(sources)
    home = IndexHome(root / "rag_index")
    result = build_version(config, home, embedder)
    home.publish(result.version_id, result.base_version, config.retention)
    with serve(make_app(home, embedder)) as url:
        yield url


def test_a_cited_pdf_chunk_shows_its_page(base_url) -> None:
    expect = sync_api.expect
    expect.set_options(timeout=20_000)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{base_url}/glassbox")
            page.fill(
                "#question", "My heat was shut off and I have less than a week of fuel. Is there Emergency LIEAP?"
            )
            page.click("#ask")
            expect(page.locator("body")).to_have_attribute("data-state", "done")
            cited = page.locator("#citations li[data-kind=chunk]", has_text="winter-heating-flyer.pdf")
            expect(cited.first).to_have_attribute("data-currency", "current")
            expect(cited.first).to_have_attribute("data-page", "page 2 of winter-heating-flyer.pdf")
            expect(cited.first.locator(".cite-head .page")).to_have_text("page 2 of winter-heating-flyer.pdf")
            markdown = page.locator("#citations li[data-kind=chunk]", has_text="path examples/corpus/benefits/fa")
            if markdown.count():
                assert markdown.first.get_attribute("data-page") is None  # a markdown chunk has no page
            assert errors == []
        finally:
            browser.close()
