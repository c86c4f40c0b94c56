"""The registry in Dagster (materialized in-process, blocking check gates publish) and in the serving API."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance
from fastapi.testclient import TestClient
from support.registry import good_row, write_csv, write_registry_sources
from support.serving import build_and_publish, make_workspace

from livemem import registry
from livemem.registry import RegistryConfig
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome
from orchestration.definitions import build_definitions
from serving.app import create_app
from serving.settings import Settings

PROJECT = Path(__file__).resolve().parents[2]


def run_job(defs, instance: DagsterInstance):
    return defs.resolve_job_def("verify_registry").execute_in_process(instance=instance, raise_on_error=False)


def materialization(result, key: str):
    events = [e for e in result.get_asset_materialization_events() if e.asset_key == AssetKey(key)]
    return events[0].materialization if events else None


def test_definitions_list_the_registry_assets_checks_and_job() -> None:
    defs = build_definitions(PROJECT / "examples" / "sources.yaml")
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert {"registry/local_resources", "registry_verification", "registry_published"} <= keys
    checks = {k.name for k in graph.asset_check_keys}
    assert {"registry_invalid_share", "registry_references_resolve", "registry_rows_fresh"} <= checks
    assert defs.resolve_job_def("verify_registry") is not None


def test_verify_registry_publishes_reports_and_skips_unchanged_input(tmp_path: Path) -> None:
    rows = [good_row(i) for i in range(20)] + [good_row(20, contact_phone="nope")]
    csv_path = write_csv(tmp_path / "registry" / "rows.csv", rows)
    sources = write_registry_sources(tmp_path, "  kind: csv\n  path: registry/rows.csv")
    defs = build_definitions(sources, tmp_path / "index")
    instance = DagsterInstance.ephemeral()

    result = run_job(defs, instance)
    assert result.success
    meta = materialization(result, "registry_verification").metadata
    assert meta["status"].value == "staged"
    # a bad phone is flagged on its field and left out; the program is published (invalid_fields: flag)
    assert (meta["rows_read"].value, meta["dagster/row_count"].value, meta["rows_invalid"].value) == (21, 21, 0)
    assert "| phone | 0 | 1 | 0 |" in meta["issues_by_rule"].value
    assert "| 21 | res-00020 | phone | warning |" in meta["issues_preview"].value
    assert meta["fields_flagged"].value == {"contact_phone": 1} and meta["rows_with_flagged_fields"].value == 1
    assert (meta["rows_undated"].value, meta["undated_policy"].value) == (0, "hidden")
    assert meta["history_changes"].value["created"] == 21
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {
        "registry_invalid_share": True,
        "registry_references_resolve": True,
        "registry_rows_fresh": True,
        "answers_not_worse": True,  # no answer suite in this sources file
    }
    home = IndexHome(tmp_path / "index")
    assert materialization(result, "registry_published").metadata["current_version"].value == home.current()
    assert home.current() == meta["version_id"].value

    again = run_job(defs, instance)
    assert again.success
    assert materialization(again, "registry_verification").metadata["status"].value.startswith("registry unchanged")
    assert materialization(again, "registry_published").metadata["status"].value == "unchanged"
    assert len(home.published_versions()) == 1

    observed = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection={AssetKey(["registry", "local_resources"])}
    )
    outcome = observed.execute_in_process(instance=instance)
    observations = [e.event_specific_data.asset_observation for e in outcome.all_events if e.is_asset_observation]
    assert [o.data_version for o in observations] == [registry.file_hash(csv_path)]


def test_failed_blocking_check_keeps_the_previous_version(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "rows.csv", [good_row(i) for i in range(10)])
    sources = write_registry_sources(tmp_path, "  kind: csv\n  path: rows.csv\n  max_invalid_share: 0.1")
    defs = build_definitions(sources, tmp_path / "index")
    instance = DagsterInstance.ephemeral()
    assert run_job(defs, instance).success
    home = IndexHome(tmp_path / "index")
    good = home.current()

    write_csv(path, [good_row(i) for i in range(6)] + [good_row(i, zip="00000") for i in range(6, 10)])
    result = run_job(defs, instance)
    assert not result.success
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert evaluations["registry_invalid_share"].passed is False
    assert "4 of 10 rows invalid (40.0%; threshold 10.0%)" in evaluations["registry_invalid_share"].description
    assert materialization(result, "registry_published") is None
    assert home.current() == good
    staged = materialization(result, "registry_verification").metadata["version_id"].value
    assert (home.staging / staged).is_dir()


@pytest.fixture(scope="module")
def served(tmp_path_factory, embedder):
    """Registry first (on an empty index), chunks built on top of it, then a registry change on top of that."""
    root = tmp_path_factory.mktemp("registry-serving")
    sources = make_workspace(root)
    rows = [
        good_row(0, local_resource_id="oak-pantry", name="Oak Hill Pantry", zip="25901", county="Fayette"),
        good_row(
            1,
            local_resource_id="ral-lieap",
            name="Raleigh LIEAP",
            resource_type="utility_assistance",
            zip="25801",
            county="Raleigh",
            zip_coverage="25901 25918",
        ),
        good_row(
            2,
            local_resource_id="fay-snap",
            name="Fayetteville SNAP",
            resource_type="snap",
            zip="25840",
            county="Fayette",
        ),
        good_row(
            3,
            local_resource_id="fay-stale",
            name="Ansted Clinic",
            resource_type="healthcare",
            zip="25812",
            county="Fayette",
            last_verified_at="2024-01-02",
        ),
    ]
    csv_path = write_csv(root / "registry.csv", rows)
    with open(sources, "a", encoding="utf-8") as fh:
        fh.write("registry:\n  kind: csv\n  path: registry.csv\n")
    cfg = RegistryConfig.from_sources(load_sources(sources))
    home = IndexHome(root / "rag_index")
    first = registry.run_verification(cfg, home)
    home.publish(first.version_id, None, retention=5)
    chunks_version = build_and_publish(sources, home, embedder)
    write_csv(csv_path, [*rows, good_row(4, local_resource_id="beck-coats", name="Beckley Coats",
                                         resource_type="seasonal_assistance", zip="25801", county="Raleigh")])  # fmt: skip
    last = registry.run_verification(cfg, home)
    home.publish(last.version_id, last.base_version, retention=5)
    settings = Settings(index_dir=home.root, warm_up=False)
    with TestClient(create_app(settings, embedder)) as client:
        yield client, home, chunks_version, last.version_id


def test_chunk_builds_carry_the_registry_and_the_registry_carries_chunks(served, embedder) -> None:
    client, home, chunks_version, last = served
    assert home.current() == last
    chunk_manifest = home.manifest(chunks_version)
    assert chunk_manifest["registry"]["published"] == 4 and chunk_manifest["total_chunks"] > 0
    manifest = home.manifest(last)
    assert manifest["total_chunks"] == chunk_manifest["total_chunks"] and manifest["registry"]["published"] == 5
    assert manifest["registry"]["history"]["created"] == 1
    data = client.post("/query", json={"query": "SNAP office in Fayette County", "top_k": 1}).json()
    assert data["index_version"] == last and data["results"]


def test_resources_by_zip_lists_coverage_then_county(served) -> None:
    client, _, _, last = served
    response = client.get("/resources", params={"zip": "25901"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["index_version"] == last and body["county"] == "Fayette"
    assert [(r["local_resource_id"], r["match"]) for r in body["results"]] == [
        ("oak-pantry", "zip"),
        ("ral-lieap", "zip"),
        ("fay-snap", "county"),
    ]
    top = body["results"][0]
    assert top["verification_status"] == "verified" and isinstance(top["age_days"], int)
    assert top["contact_phone"] == "+13045550100"


def test_resources_filters_and_stale_rows(served) -> None:
    client, *_ = served
    stale = client.get("/resources", params={"county": "Fayette", "include_stale": "true"}).json()["results"]
    assert {r["local_resource_id"]: r["verification_status"] for r in stale}["fay-stale"] == "stale"
    one = client.get("/resources", params={"local_resource_id": "beck-coats"}).json()
    assert [r["name"] for r in one["results"]] == ["Beckley Coats"]
    typed = client.get("/resources", params={"zip": "25918", "resource_type": "utility_assistance"}).json()
    assert [r["local_resource_id"] for r in typed["results"]] == ["ral-lieap"]


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"zip": "123"}, "zip"),
        ({"zip": "90210"}, "ZIP 90210 is in CA"),
        ({"county": "Fayete"}, "did you mean Fayette"),
        ({"resource_type": "bowling"}, "resource_type"),
        ({"limit": "0"}, "limit"),
    ],
)
def test_resources_rejects_malformed_hints(served, params, fragment) -> None:
    client, *_ = served
    response = client.get("/resources", params=params)
    assert response.status_code == 422
    assert fragment in response.text


def test_a_registry_that_is_an_hsds_datapackage_verifies_and_publishes(tmp_path: Path) -> None:
    """``registry: {kind: hsds, path: <datapackage dir>}``: the 211-shaped HSDS 1.1 fixture is imported in memory,
    verified for Florida and published; the source asset's data version is the package's hash."""
    import shutil

    package = shutil.copytree(PROJECT / "tests" / "fixtures" / "hsds_v1_211", tmp_path / "hsds")
    sources = write_registry_sources(tmp_path, "  kind: hsds\n  path: hsds\n  state: FL")
    defs = build_definitions(sources, tmp_path / "index")
    instance = DagsterInstance.ephemeral()
    result = run_job(defs, instance)
    assert result.success
    meta = materialization(result, "registry_verification").metadata
    assert meta["status"].value == "staged" and meta["rows_read"].value == 30
    home = IndexHome(tmp_path / "index")
    assert home.current() == meta["version_id"].value
    assert registry.input_version(RegistryConfig.from_sources(load_sources(sources))) == registry.package_hash(package)
