"""The Dagster UI of the example project, checked in a real browser.

``dagster dev`` serves the code location on loopback with a temp DAGSTER_HOME and index home; a build of the
example index is launched through Dagster's GraphQL API and observed to succeed; headless Chromium (Debian's
``/usr/bin/chromium``, driven by Playwright, which never downloads a browser of its own here) then loads the asset
lineage, the asset list, each asset's checks, the automation page and the published index's latest
materialization, and confirms each shows what it must. Each run keeps its screenshot of the lineage as
``bench/.work/ui/dagster-ui.png`` (the CI artifact; set ``LIVEMEM_UI_SCREENSHOT`` to write it elsewhere, e.g.
``docs/img/dagster-ui.png`` to refresh the one in the docs).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from livemem.version.store import IndexHome
from orchestration.definitions import build_definitions

PROJECT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOT = Path(os.environ.get("LIVEMEM_UI_SCREENSHOT") or PROJECT / "bench" / ".work" / "ui" / "dagster-ui.png")
LOCATION = "orchestration.definitions"
EXAMPLE = PROJECT / "examples" / "sources.yaml"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="no /usr/bin/chromium (apt-get install chromium chromium-driver; .ci/run does)"
)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency (pip install -e .[dev])")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def dagster_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``dagster dev`` on a free loopback port; yields its URL and the index home it builds into."""
    tmp = tmp_path_factory.mktemp("dagster_ui")
    home = tmp / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    port = free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "RAG_SOURCES": str(EXAMPLE),
        "RAG_INDEX_DIR": str(tmp / "index"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(PROJECT),
    }
    dagster = Path(sys.executable).parent / "dagster"
    log = (tmp / "dagster-dev.log").open("wb")
    proc = subprocess.Popen(
        [str(dagster), "dev", "-m", LOCATION, "-h", "127.0.0.1", "-p", str(port)],
        cwd=PROJECT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _answers(f"{url}/server_info"):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"dagster dev did not start:\n{(tmp / 'dagster-dev.log').read_text()[-3000:]}")
            time.sleep(0.3)
        yield url, tmp / "index"
    finally:
        # dagster dev stops its webserver, daemon and code server on SIGTERM; the group catches any straggler.
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def launch_and_wait(url: str, job: str, timeout: float = 120.0) -> str:
    """Launch ``job`` through the GraphQL API (launchRun) and poll until it ends; returns the run id."""
    from dagster import DagsterRunStatus
    from dagster_graphql import DagsterGraphQLClient

    port = int(url.rsplit(":", 1)[1])
    client = DagsterGraphQLClient("127.0.0.1", port_number=port, timeout=30)
    run_id = client.submit_job_execution(job, repository_location_name=LOCATION, repository_name="__repository__")
    deadline = time.monotonic() + timeout
    status = client.get_run_status(run_id)
    while status not in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED):
        assert time.monotonic() < deadline, f"run {run_id} of {job} still {status.value} after {timeout:.0f} s"
        time.sleep(1)
        status = client.get_run_status(run_id)
    assert status == DagsterRunStatus.SUCCESS, f"run {run_id} of {job} ended {status.value}"
    return run_id


def test_ui_shows_assets_checks_schedule_and_latest_materialization(dagster_ui: tuple[str, Path]) -> None:
    url, index_dir = dagster_ui
    launch_and_wait(url, "build_index")
    manifest = IndexHome(index_dir).current_manifest()
    assert manifest is not None, "the run succeeded but published nothing"

    graph = build_definitions(EXAMPLE).resolve_asset_graph()
    asset_keys = sorted(graph.get_all_asset_keys())
    checks_by_asset: dict[str, list[str]] = defaultdict(list)
    for check in graph.asset_check_keys:
        checks_by_asset[check.asset_key.to_user_string()].append(check.name)
    expect = sync_api.expect
    expect.set_options(timeout=20_000)  # as for actions: the lineage of every asset renders slowly on 2 loaded cores

    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.set_default_timeout(20_000)
            # The UI greets a new browser with a "Join the Dagster community" dialog; skip it whenever it appears.
            skip = page.get_by_role("button", name="Skip")
            page.add_locator_handler(skip, lambda: skip.click())
            body = page.locator("body")

            # each group's lineage names its assets (sources by the last part of their key, shown upstream of
            # living_memory); personal memory is a group of its own, not part of any index version
            groups = {key: graph.get(key).group_name for key in asset_keys}
            page.goto(f"{url}/locations/{LOCATION}/asset-groups/personal_memory/lineage")
            for key in [k for k in asset_keys if groups[k] == "personal_memory"]:
                expect(body).to_contain_text(key.path[-1])
            page.goto(f"{url}/locations/{LOCATION}/asset-groups/living_memory/lineage")
            for key in [k for k in asset_keys if groups[k] != "personal_memory"]:
                expect(body).to_contain_text(key.path[-1])
            expect(page.get_by_text("Materialized").first).to_be_visible()
            page.wait_for_timeout(500)  # let the graph settle its layout before the picture
            if skip.is_visible():  # the handler may be closing it already: a missed click is fine
                with contextlib.suppress(sync_api.TimeoutError):
                    skip.click(timeout=2_000)
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT))

            page.goto(f"{url}/assets")
            for key in asset_keys:
                expect(body).to_contain_text(" / ".join(key.path))

            for asset, names in checks_by_asset.items():
                page.goto(f"{url}/assets/{asset}?view=checks")
                expect(body).to_contain_text(f"Checks ({len(names)})")
                for name in names:
                    expect(body).to_contain_text(name)
                if asset == "chunks":  # the build ran chunks' checks
                    expect(body).to_contain_text("Succeeded")

            page.goto(f"{url}/automation")
            expect(body).to_contain_text("nightly_attention_rollup")

            page.goto(f"{url}/assets/published_index")
            expect(body).to_contain_text("Latest materialization")
            expect(body).to_contain_text("Row count")
            expect(body).to_contain_text(str(manifest["total_chunks"]))
            expect(body).to_contain_text("published")
            expect(body).to_contain_text(manifest["version_id"])
        finally:
            browser.close()
    assert SCREENSHOT.stat().st_size < 1_000_000
