"""The published index is exactly its sources at their commits: incremental builds equal from-scratch builds.

- The reproduction of the defect a user hit: the bundled example (four sources in one repository), one line
  appended to one file, built incrementally, lost 61 of 133 chunks and two collections with every check green.
- The randomized differential test (``support.differential.IndexHistory``): random histories over several sources
  in one repository and a second repository, each incremental build compared with a from-scratch build.
  ``LIVEMEM_DIFF_EXAMPLES`` raises the number of histories (``bench/differential.py`` runs many).
- The blocking completeness check catches lost carried rows (the old defect, reintroduced here) before publish.
- ``livemem verify --rebuild`` reports no difference on a good index and names the file on a damaged one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test
from support.differential import IndexHistory
from support.examples import copy_bundled_example
from typer.testing import CliRunner

from livemem.ingest import carry as carry_module
from livemem.ingest import plan as plan_module
from livemem.ingest.build import build_version
from livemem.ingest.checks import check_index_complete
from livemem.ingest.verify import compare_versions, rebuild_and_compare
from livemem.sources.config import load_sources
from livemem.version import connect
from livemem.version.store import IndexHome


def publish(config, home: IndexHome, embedder):
    result = build_version(config, home, embedder)
    assert result.staged, result.reason
    base = home.version_dir(result.base_version) if result.base_version else None
    complete = check_index_complete(home.staged_dir(result.version_id), home.manifest(result.version_id), config, base)
    home.publish(result.version_id, result.base_version, config.retention)
    return result, complete


def per_collection(home: IndexHome) -> dict[str, int]:
    return {c: v["chunks"] for c, v in home.current_manifest()["collections"].items()}


@pytest.fixture(scope="module")
def bundled(tmp_path_factory, embedder):
    """The bundled example built once, and again after a one-line edit of one file."""
    tmp = tmp_path_factory.mktemp("bundled")
    repo, sources = copy_bundled_example(tmp)
    config = load_sources(sources)
    home = IndexHome(tmp / "index")
    _, first_check = publish(config, home, embedder)
    before = per_collection(home)
    raleigh = repo.path / "examples/corpus/benefits/raleigh-county.md"
    repo.commit({str(raleigh.relative_to(repo.path)): raleigh.read_text(encoding="utf-8") + "More text about LIEAP.\n"})
    result, second_check = publish(config, home, embedder)
    return {"config": config, "home": home, "before": before, "result": result, "checks": (first_check, second_check)}


def test_one_line_edit_of_the_bundled_example_keeps_every_source(bundled) -> None:
    after = per_collection(bundled["home"])
    before = bundled["before"]
    assert set(after) == set(before) == {"governance", "wv_benefits", "internal_playbooks", "code"}
    for collection in ("governance", "internal_playbooks", "code"):
        assert after[collection] == before[collection], collection
    assert after["wv_benefits"] >= before["wv_benefits"]
    stats = bundled["result"].sources
    assert stats["wv-benefits"].files_changed == 1 and stats["wv-benefits"].chunks_deleted <= 1
    assert all(stats[s].files_changed == 0 and stats[s].chunks_deleted == 0 for s in ("governance", "caseworker"))
    assert all(check.passed for check in bundled["checks"]), [c.failures for c in bundled["checks"]]


def test_the_edited_bundled_example_equals_a_from_scratch_build(bundled, embedder) -> None:
    report = rebuild_and_compare(bundled["config"], bundled["home"], embedder)
    assert report.equal, report.comparison.lines()
    assert report.comparison.chunks_compared == bundled["home"].current_manifest()["total_chunks"]


_CARRY_MEMBERS = carry_module.CarryOver.members


def _old_carry(self, con, base):
    """The defective carry-over this project shipped (in today's membership form): the temp table ``keep``
    shadowed the frame ``keep``, so every source after the first carried the first source's paths."""
    first = self.keep_only_sources[0] if self.keep_only_sources else None
    first_paths = [p for s, p in self.keep_only if s == first]
    self.keep_only = [(s, p) for s in self.keep_only_sources for p in first_paths]
    return _CARRY_MEMBERS(self, con, base)


def test_the_completeness_check_blocks_the_old_defect(tmp_path: Path, embedder, monkeypatch) -> None:
    repo, sources = copy_bundled_example(tmp_path)
    config = load_sources(sources)
    home = IndexHome(tmp_path / "index")
    publish(config, home, embedder)
    published = home.current()
    path = "examples/corpus/benefits/raleigh-county.md"
    repo.commit({path: (repo.path / path).read_text(encoding="utf-8") + "More text about LIEAP.\n"})
    monkeypatch.setattr(carry_module.CarryOver, "members", _old_carry)
    monkeypatch.setattr(plan_module, "quick_plan", lambda *a: None)  # the plan that lists every file
    result = build_version(config, home, embedder)
    outcome = check_index_complete(
        home.staged_dir(result.version_id), home.manifest(result.version_id), config, home.version_dir(published)
    )
    assert not outcome.passed
    text = "\n".join(outcome.failures)
    assert "caseworker" in text and "client-code" in text and "has no rows" in text
    assert home.current() == published  # nothing was published (publishing is the asset after the check)


def test_the_completeness_check_catches_rows_lost_from_a_carried_file(tmp_path: Path, make_repo, embedder) -> None:
    repo = make_repo(files={"a.md": "# A\n\nalpha text\n", "b.md": "# B\n\nbeta text\n\n## More\n\nmore beta\n"})
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - name: docs\n    repo: {repo.path}\n    collection: docs\n", encoding="utf-8")
    config = load_sources(sources)
    home = IndexHome(tmp_path / "index")
    publish(config, home, embedder)
    base = home.current()
    repo.commit({"a.md": "# A\n\nalpha text, edited\n"})
    result = build_version(config, home, embedder)
    staged = home.staged_dir(result.version_id)
    con = connect(staged, read_only=False)
    con.execute("INSERT INTO chunk_deletes SELECT _seg, _row FROM chunk_parts WHERE path = 'b.md' AND chunk_index = 1")
    con.close()
    outcome = check_index_complete(staged, home.manifest(result.version_id), config, home.version_dir(base))
    assert not outcome.passed
    assert any("b.md is unchanged since the base version but has 1 chunk rows where the base had 2" in f
               for f in outcome.failures), outcome.failures  # fmt: skip


def test_verify_rebuild_names_the_damaged_file(tmp_path: Path, make_repo, embedder, monkeypatch) -> None:
    from orchestration import cli

    repo = make_repo(files={"a.md": "# A\n\nalpha text\n", "docs/b.md": "# B\n\nbeta text\n"})
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - name: docs\n    repo: {repo.path}\n    collection: docs\n", encoding="utf-8")
    home = IndexHome(tmp_path / "index")
    publish(load_sources(sources), home, embedder)
    monkeypatch.setattr(cli, "load_embedder", lambda: embedder)
    runner = CliRunner()
    args = ["--sources", str(sources), "--index-dir", str(home.root), "verify", "--rebuild"]
    ok = runner.invoke(cli.app, args)
    assert ok.exit_code == 0, ok.output
    assert "identical" in ok.output
    con = connect(home.version_dir(home.current()), read_only=False)
    con.execute(  # the version no longer holds docs/b.md's chunk (its segment is immutable and hash-checked)
        "INSERT INTO chunk_deletes SELECT _seg, _row FROM chunk_parts WHERE path = 'docs/b.md'"
    )
    con.close()
    bad = runner.invoke(cli.app, args)
    assert bad.exit_code == 1
    assert "docs: docs/b.md" in bad.output and "missing" in bad.output


def test_compare_versions_of_one_version_with_itself_is_equal(bundled) -> None:
    home = bundled["home"]
    comparison = compare_versions(home.version_dir(home.current()), home.version_dir(home.current()))
    assert comparison.equal and comparison.files_compared > 10


def test_incremental_builds_equal_from_scratch_builds(embedder) -> None:
    """Random histories over four sources in two repositories (see support.differential)."""
    IndexHistory.embedder = embedder
    run_state_machine_as_test(
        IndexHistory,
        settings=settings(
            max_examples=int(os.environ.get("LIVEMEM_DIFF_EXAMPLES", "4")),
            stateful_step_count=int(os.environ.get("LIVEMEM_DIFF_STEPS", "12")),
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        ),
    )


def test_published_manifests_follow_their_schema(bundled) -> None:
    from livemem.schemas import errors_for

    home = bundled["home"]
    for version in home.published_versions():
        manifest = home.manifest(version)
        assert errors_for("manifest", manifest) == [], version
        assert manifest["vector_store"] == "none" and manifest["files"]
