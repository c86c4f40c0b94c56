"""The `livemem` operators' command line on a real index built from a temp git repository."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from livemem.ingest.build import build_version
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome
from orchestration.cli import app

runner = CliRunner()


def test_status_versions_query_rollback_and_verify(tmp_path: Path, make_repo, embedder) -> None:
    repo = make_repo(files={"guide.md": "# Guide\n\n## LIEAP\n\nHeating bill help in Beckley opens in December.\n"})
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n", encoding="utf-8")
    home = IndexHome(tmp_path / "index")
    base = ["--sources", str(sources), "--index-dir", str(home.root)]

    empty = runner.invoke(app, [*base, "status", "--no-daemon"])  # the daemon: tests/integration/test_daemon_status.py
    assert empty.exit_code == 1 and "no index published" in empty.output

    config = load_sources(sources)
    first = build_version(config, home, embedder)
    home.publish(first.version_id, None, 5)
    repo.commit({"faq.md": "# FAQ\n\nWIC helps infants.\n"})

    status = runner.invoke(app, [*base, "status", "--json", "--no-daemon"])
    assert status.exit_code == 0, status.output
    data = json.loads(status.output)
    assert data["version"] == first.version_id
    assert data["sources"][0]["state"] == "behind" and data["sources"][0]["head"] == repo.head()

    second = build_version(config, home, embedder)
    home.publish(second.version_id, second.base_version, 5)
    listed = json.loads(runner.invoke(app, [*base, "versions", "--json"]).output)
    assert [(v["version"], v["current"]) for v in listed] == [(first.version_id, False), (second.version_id, True)]
    assert runner.invoke(app, [*base, "versions"]).exit_code == 0

    found = runner.invoke(app, [*base, "query", "heating bill help", "--top-k", "1", "--json"])
    assert found.exit_code == 0, found.output
    assert json.loads(found.output)["results"][0]["provenance"]["path"] == "guide.md"

    assert runner.invoke(app, [*base, "rollback", first.version_id]).exit_code == 0
    assert home.current() == first.version_id
    missing = runner.invoke(app, [*base, "rollback", "20990101T000000000000Z"])
    assert missing.exit_code == 1 and "no published version" in missing.output

    verified = runner.invoke(app, [*base, "verify-provenance", "--all"])
    assert verified.exit_code == 0 and "resolve to their commit and file" in verified.output


def test_materialize_a_selection_of_assets(tmp_path: Path, make_repo, embedder, monkeypatch) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))  # created on demand, runs recorded there
    repo = make_repo(files={"guide.md": "# Guide\n\nWIC helps infants.\n"})
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n", encoding="utf-8")
    base = ["--sources", str(sources), "--index-dir", str(tmp_path / "index")]
    bad = runner.invoke(app, [*base, "materialize", "--select", "chunks,nope"])
    assert bad.exit_code == 1 and "unknown asset(s) ['nope']" in bad.output
    ran = runner.invoke(app, [*base, "materialize", "--select", "chunks,published_index"])
    assert ran.exit_code == 0, ran.output
    assert "published_index: published" in ran.output
    assert IndexHome(tmp_path / "index").current() is not None
    assert (tmp_path / "dagster_home").is_dir()
