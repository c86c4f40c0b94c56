"""`livemem materialize` shows how a build goes (counts, rate, time left) and Dagster's INFO lines, not its DEBUG
ones unless asked; the same progress is in the Dagster log and the materialization's metadata."""

from __future__ import annotations

import re
from pathlib import Path

from dagster import AssetKey, DagsterInstance
from typer.testing import CliRunner

from livemem.ingest.progress import Progress
from orchestration.cli import app

DOCS = {
    f"guide-{i}.md": f"# Guide {i}\n\n## Help {i}\n\nHeating bill help number {i} opens in Beckley.\n" for i in range(6)
}


def test_progress_lines_have_counts_rate_and_time_left() -> None:
    lines: list[str] = []
    now = [0.0]
    progress = Progress(lines.append, interval_s=10, clock=lambda: now[0])
    progress("chunks", 0, 5183)
    for done, at in ((512, 6.0), (1024, 12.0), (1200, 14.0), (5183, 61.0)):
        now[0] = at
        progress("chunks", done, 5183)
    assert lines == [
        "embedding 5,183 new chunks",
        "embedded 1,024/5,183 chunks, 85/s, about 49 s left",  # 512 at 6 s: within the interval, not said
        "embedded 5,183/5,183 chunks in 61.0 s, 85/s",  # the end is always said
    ]
    assert progress.summary() == {"chunks": "embedded 5,183/5,183 chunks in 61.0 s, 85/s"}


def test_materialize_shows_progress_and_info_but_not_debug(tmp_path: Path, make_repo, monkeypatch) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("LIVEMEM_PROGRESS_INTERVAL_S", "0")  # every batch
    repo = make_repo(files=DOCS)
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n", encoding="utf-8")
    base = ["--sources", str(sources), "--index-dir", str(tmp_path / "index"), "materialize"]
    ran = CliRunner().invoke(app, [*base, "--job", "build_index"])
    assert ran.exit_code == 0, ran.output
    assert re.search(r"embedding \d+ new chunks", ran.output)
    assert re.search(r"embedded (\d+)/\1 chunks in [\d.]+ s, [\d,]+/s", ran.output), ran.output
    assert " - INFO - " in ran.output and " - DEBUG - " not in ran.output
    assert "published_index: published" in ran.output

    instance = DagsterInstance.get()
    event = instance.get_latest_materialization_event(AssetKey("chunks"))
    embedding = event.asset_materialization.metadata["embedding"].value
    assert re.fullmatch(r"embedded (\d+)/\1 chunks in [\d.]+ s, [\d,]+/s", embedding["chunks"])
    instance.dispose()

    # nothing new to build: a second run is quick; --verbose shows DEBUG
    again = CliRunner().invoke(app, [*base, "--job", "build_index", "--verbose"])
    assert again.exit_code == 0, again.output
    assert " - DEBUG - " in again.output
