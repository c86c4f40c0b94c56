"""The Dagster code location: definitions load, assets materialize in-process, blocking checks gate publish."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance

from livemem.errors import ConfigError
from livemem.version import connect
from livemem.version.store import IndexHome
from orchestration.definitions import build_definitions

PROJECT = Path(__file__).resolve().parents[2]


def write_sources(tmp_path: Path, repo: Path, max_chunks: int = 1000) -> Path:
    path = tmp_path / "sources.yaml"
    path.write_text(
        f"index:\n  governance: {{max_chunks: {max_chunks}}}\n"
        "breath: {source: docs}\n"
        f"sources:\n  - {{name: docs, repo: {repo}, collection: docs}}\n",
        encoding="utf-8",
    )
    return path


def run_build(defs, instance: DagsterInstance):
    return defs.resolve_job_def("build_index").execute_in_process(instance=instance, raise_on_error=False)


def materialization(result, key: str):
    events = [e for e in result.get_asset_materialization_events() if e.asset_key == AssetKey(key)]
    return events[0].materialization if events else None


@pytest.fixture
def defs_for(tmp_path: Path, embedder):
    """Definitions on a temp sources file and index dir (the model loaded by ``embedder`` is reused)."""

    def factory(sources: Path):
        return build_definitions(sources, tmp_path / "index")

    return factory


def test_definitions_list_every_asset_and_check() -> None:
    defs = build_definitions(PROJECT / "examples" / "sources.yaml")
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {
        "chunks",
        "published_index",
        "git/governance",
        "git/wv-benefits",
        "git/caseworker",
        "git/client-code",
        "attention_rollup",
        "attention_published",
        "gbim_export",
        "gbim_published",
        "registry/local_resources",
        "registry_verification",
        "registry_published",
        "personal_memory",
    }
    check_names = {k.name for k in graph.asset_check_keys}
    assert check_names == {
        "chunks_schema_valid",
        "sealed_provenance_resolves",
        "governance_caps",
        "sources_readable",
        "index_complete",
        "answers_not_worse",
        "published_index_matches_rebuild",
        "attention_valid",
        "gbim_entities_valid",
        "gbim_entity_flags",
        "registry_invalid_share",
        "registry_references_resolve",
        "registry_rows_fresh",
        "personal_memory_readable",
    }
    for job in ("build_index", "verify_index", "observe_sources", "attention_rollup_job", "export_gbim"):
        assert defs.resolve_job_def(job) is not None
    assert [s.name for s in defs.schedules] == [
        "nightly_attention_rollup",
        "weekly_verify_index",
        "daily_personal_memory",
    ]


def test_code_location_loads_from_the_environment(tmp_path: Path, make_repo) -> None:
    """What `dagster dev -m orchestration.definitions` does: import the module with RAG_SOURCES set."""
    repo = make_repo(files={"a.md": "# A\n"})
    env = {"RAG_SOURCES": str(write_sources(tmp_path, repo.path)), "PATH": "/usr/bin:/bin"}
    code = "from orchestration.definitions import defs; print(sorted(k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=PROJECT)
    assert out.returncode == 0, out.stderr
    assert "'git/docs'" in out.stdout


def test_bad_sources_file_fails_to_load_with_its_location(tmp_path: Path) -> None:
    bad = tmp_path / "sources.yaml"
    bad.write_text("sources:\n  - name: docs\n    repo: .\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"sources\.yaml:2:5: sources\[0\]: 'collection' is a required property"):
        build_definitions(bad)


def test_materialize_publishes_and_reports_to_the_ui(tmp_path: Path, make_repo, defs_for) -> None:
    repo = make_repo(
        files={"BREATH.md": "# BREATH\nphase: Δ4\ntone: slow\n", "guide.md": "# Guide\n\n## SNAP\n\nFood help.\n"}
    )
    defs = defs_for(write_sources(tmp_path, repo.path))
    instance = DagsterInstance.ephemeral()
    result = run_build(defs, instance)
    assert result.success
    meta = materialization(result, "chunks").metadata
    assert meta["status"].value == "staged"
    assert meta["commits"].value == {"docs": repo.head()}
    assert meta["files_new"].value == 2 and meta["chunks_new"].value == meta["dagster/row_count"].value
    assert meta["embeddings_computed"].value == meta["dagster/row_count"].value
    assert meta["breath"].value == "Δ4 (slow)"
    assert "| docs |" in meta["sources"].value
    published = materialization(result, "published_index").metadata
    home = IndexHome(tmp_path / "index")
    assert published["current_version"].value == home.current() == meta["version_id"].value
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {
        "chunks_schema_valid": True,
        "sealed_provenance_resolves": True,
        "governance_caps": True,
        "index_complete": True,
        "sources_readable": True,
        "answers_not_worse": True,  # no answer suite in this sources file: nothing to compare
    }  # the rebuild comparison is not part of build_index: it runs in verify_index

    again = run_build(defs, instance)
    assert again.success
    assert materialization(again, "chunks").metadata["status"].value.startswith("no new commits")
    assert materialization(again, "published_index").metadata["status"].value == "unchanged"
    assert home.published_versions() == [meta["version_id"].value]

    # the source's HEAD is observable: its data version is the commit id
    observed = defs.resolve_job_def("observe_sources").execute_in_process(instance=instance)
    observations = [e.event_specific_data.asset_observation for e in observed.all_events if e.is_asset_observation]
    assert [(o.asset_key, o.data_version) for o in observations] == [(AssetKey(["git", "docs"]), repo.head())]


def test_failed_blocking_check_keeps_the_previous_version(tmp_path: Path, make_repo, defs_for) -> None:
    repo = make_repo(files={"a.md": "# A\n\nOne small page.\n"})
    defs = defs_for(write_sources(tmp_path, repo.path, max_chunks=3))
    instance = DagsterInstance.ephemeral()
    assert run_build(defs, instance).success
    home = IndexHome(tmp_path / "index")
    good = home.current()

    repo.commit({f"page{i}.md": f"# Page {i}\n\nText number {i}.\n" for i in range(5)})
    result = run_build(defs, instance)
    assert not result.success
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert evaluations["governance_caps"].passed is False
    assert "exceed the cap of 3" in evaluations["governance_caps"].metadata["failures"].value
    assert materialization(result, "published_index") is None
    assert home.current() == good  # the failed version never became current
    staged = materialization(result, "chunks").metadata["version_id"].value
    assert (home.staging / staged).is_dir()  # kept for inspection


def test_verify_index_job_proves_the_published_index_and_names_a_damaged_file(
    tmp_path: Path, make_repo, defs_for
) -> None:

    repo = make_repo(files={"a.md": "# A\n\nOne small page.\n", "b.md": "# B\n\nAnother page.\n"})
    defs = defs_for(write_sources(tmp_path, repo.path))
    instance = DagsterInstance.ephemeral()
    assert run_build(defs, instance).success
    repo.commit({"a.md": "# A\n\nOne small page, edited.\n"})
    assert run_build(defs, instance).success

    verify = defs.resolve_job_def("verify_index")
    result = verify.execute_in_process(instance=instance, raise_on_error=False)
    (evaluation,) = result.get_asset_check_evaluations()
    assert evaluation.check_name == "published_index_matches_rebuild" and evaluation.passed
    assert "identical" in evaluation.metadata["summary"].value

    home = IndexHome(tmp_path / "index")
    con = connect(home.version_dir(home.current()), read_only=False)
    con.execute("INSERT INTO chunk_deletes SELECT _seg, _row FROM chunk_parts WHERE path = 'b.md'")
    con.close()
    (evaluation,) = verify.execute_in_process(instance=instance, raise_on_error=False).get_asset_check_evaluations()
    assert not evaluation.passed
    assert "docs: b.md: chunk" in evaluation.metadata["failures"].value
