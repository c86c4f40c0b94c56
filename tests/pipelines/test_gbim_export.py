"""The GBIM export as a step of the index: staged versions, carry-over by chunk builds, the Dagster assets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import geopandas as gpd
import numpy as np
import pytest
import shapely
from dagster import AssetKey, DagsterInstance, Definitions, define_asset_job, in_process_executor

from livemem.engine.snapshot import verify_files
from livemem.gbim import COUNTIES_FILE, export_gbim
from livemem.gbim import export as gbim  # COUNTIES_MAX_BYTES is read there
from livemem.ingest.build import build_version
from livemem.schemas import errors_for
from livemem.sources.config import load_sources
from livemem.version import connect
from livemem.version.store import IndexHome
from livemem.version.vectors import close_chroma, open_chroma
from orchestration.assets.gbim_export import build_gbim_assets
from orchestration.resources import (
    EmbedderResource,
    GitSourcesResource,
    IndexStoreResource,
    SpatialDatabasesResource,
)

PROJECT = Path(__file__).resolve().parents[2]
EXAMPLE = PROJECT / "examples" / "spatial" / "wv_benefits_facilities.geojson"
COUNTIES = PROJECT.parent / "shared" / "data" / "geo" / "wv_counties.geojson"


def write_sources(tmp_path: Path, repo: Path, *, crs: str = "EPSG:26917", counties: bool = True) -> Path:
    data = tmp_path / "facilities.geojson"
    if not data.exists():
        shutil.copy(EXAMPLE, data)
    boundaries = f"  counties: {{path: {COUNTIES}, name_field: NAME}}\n" if counties and COUNTIES.is_file() else ""
    path = tmp_path / "sources.yaml"
    path.write_text(
        "index: {vector_store: chroma}\n"
        f"sources:\n  - {{name: docs, repo: {repo}, collection: docs}}\n"
        "spatial:\n"
        "  worldview_id: wv-benefits\n"
        "  region: {name: West Virginia, bbox: [-82.65, 37.2, -77.7, 40.64], tolerance_km: 25}\n"
        f"{boundaries}"
        "  sources:\n"
        f"    - {{name: facilities, path: facilities.geojson, crs: '{crs}', dataset: wv_benefits,\n"
        "       gbim_entity: facility, id_field: facility_id, label_field: name, description_field: description,\n"
        "       collection: gis_wv_benefits}\n",
        encoding="utf-8",
    )
    return path


def collection_ids(version_dir: Path) -> dict[str, set[str]]:
    """Ids per Chroma collection, read from a copy (a persistent client may write into its directory)."""
    copy = version_dir.parent / f".{version_dir.name}-chroma-copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(version_dir / "chroma", copy)
    client = open_chroma(copy)
    try:
        return {c.name: set(client.get_collection(c.name).get(include=[])["ids"]) for c in client.list_collections()}
    finally:
        close_chroma(client)
        shutil.rmtree(copy, ignore_errors=True)


def test_export_stages_publishes_and_survives_chunk_builds(tmp_path: Path, make_repo, embedder) -> None:
    repo = make_repo(files={"guide.md": "# Guide\n\n## SNAP\n\nFood help in Fayette County.\n"})
    config = load_sources(write_sources(tmp_path, repo.path))
    home = IndexHome(tmp_path / "index")

    # an empty index: the export stages a complete version on its own (empty chunk parts)
    first = export_gbim(config, home, embedder)
    assert first.staged and first.base_version is None
    staged = home.locate(first.version_id)
    manifest = json.loads((staged / "manifest.json").read_text())
    assert errors_for("manifest", manifest) == []
    section = manifest["gbim"]
    assert section["entities"] == 10 and section["quarantined_count"] == 1
    assert section["quarantined"] == [
        {"source": "facilities", "source_pk": "wvb-011", "reason": "empty geometry (Polygon EMPTY)"}
    ]
    assert section["per_dataset_county"]["wv_benefits"] == {"Fayette": 5, "Kanawha": 1, "Raleigh": 4}
    assert section["flags"]["geometry_repaired"] == 1
    assert section["collections"] == ["gbim_spatial", "gis_wv_benefits"]
    assert len(section["sources"]["facilities"]["content_hash"]) == 64
    con = connect(staged)
    try:
        assert con.execute("SELECT count(*) FROM gbim_entities").fetchone() == (10,)
        predicates = dict(con.execute("SELECT predicate, count(*) FROM gbim_relations GROUP BY 1").fetchall())
        assert con.execute("SELECT count(*) FROM chunks").fetchone() == (0,)
    finally:
        con.close()
    assert predicates.pop("near") > 0  # livemem.gbim.linked_relations
    assert predicates == {"part_of": 10, "located_in": 10, "serves_zip": 10, "operated_by": 10, "serves_program": 25}
    ids = json.loads((staged / "gis" / "ids.json").read_text())
    dense = np.load(staged / "gis" / "dense.npy")
    assert ids == sorted(ids) and dense.shape == (10, 384)
    assert np.allclose(np.linalg.norm(dense, axis=1), 1.0, atol=1e-5)
    assert len((staged / "gbim" / "gbim.nt").read_text().splitlines()) > 60
    assert (staged / "gbim" / "gbim.ttl").is_file()
    assert collection_ids(staged) == {"gbim_spatial": set(ids), "gis_wv_benefits": set(ids)}
    home.publish(first.version_id, None, config.retention)

    # unchanged inputs: nothing is staged
    again = export_gbim(config, home, embedder)
    assert not again.staged and again.reason.startswith("spatial inputs unchanged")

    # a chunk build carries the GBIM tables, files, collections and manifest section over
    built = build_version(config, home, embedder)
    assert built.staged and built.base_version == first.version_id
    home.publish(built.version_id, built.base_version, config.retention)
    chunked = home.version_dir(built.version_id)
    assert json.loads((chunked / "gis" / "ids.json").read_text()) == ids
    assert (chunked / "gbim" / "gbim.nt").read_text() == (
        home.version_dir(first.version_id) / "gbim" / "gbim.nt"
    ).read_text()
    assert home.manifest(built.version_id)["gbim"] == section
    assert home.manifest(built.version_id)["total_chunks"] > 0
    carried = collection_ids(chunked)
    assert carried["gbim_spatial"] == set(ids) and "docs" in carried

    # a feature removed from the source leaves the tables, the snapshot and both collections; the chunks stay
    data = json.loads((tmp_path / "facilities.geojson").read_text())
    data["features"] = [f for f in data["features"] if f["properties"]["facility_id"] != "wvb-009"]
    (tmp_path / "facilities.geojson").write_text(json.dumps(data))
    third = export_gbim(config, home, embedder)
    assert third.staged and third.base_version == built.version_id
    assert third.section["entities"] == 9 and third.section["embeddings_computed"] == 0
    after = collection_ids(home.locate(third.version_id))
    assert len(after["gbim_spatial"]) == len(after["gis_wv_benefits"]) == 9 and after["docs"] == carried["docs"]
    assert home.manifest(third.version_id)["total_chunks"] == home.manifest(built.version_id)["total_chunks"]


def test_no_spatial_section_exports_nothing(tmp_path: Path, make_repo, embedder) -> None:
    repo = make_repo(files={"a.md": "# A\n"})
    path = tmp_path / "sources.yaml"
    path.write_text(f"sources:\n  - {{name: docs, repo: {repo.path}, collection: docs}}\n", encoding="utf-8")
    result = export_gbim(load_sources(path), IndexHome(tmp_path / "index"), embedder)
    assert not result.staged and "no spatial section" in result.reason


@pytest.mark.skipif(not COUNTIES.is_file(), reason="../shared/data/geo is not beside the project")
def test_export_writes_the_county_polygons_it_used_into_the_version(
    tmp_path: Path, make_repo, embedder, monkeypatch
) -> None:
    repo = make_repo(files={"a.md": "# A\n"})
    # the boundaries in UTM metres (EPSG:26917): the version's file must be in EPSG:4326 degrees all the same
    utm = tmp_path / "counties_utm.gpkg"
    gpd.read_file(COUNTIES).to_crs("EPSG:26917").to_file(utm)
    sources = write_sources(tmp_path, repo.path)
    text = sources.read_text().replace(f"path: {COUNTIES}, name_field: NAME", f"path: {utm}, name_field: NAME")
    sources.write_text(text)
    home = IndexHome(tmp_path / "index")
    first = export_gbim(load_sources(sources), home, embedder)
    staged = home.locate(first.version_id)
    manifest = json.loads((staged / "manifest.json").read_text())
    assert first.section["counties"]["file"] == COUNTIES_FILE == "gbim/counties.geojson"
    verify_files(staged, manifest)  # listed and hashed like every file of the version: serving verifies it
    assert manifest["files"][COUNTIES_FILE]["size"] == (staged / COUNTIES_FILE).stat().st_size
    counties = json.loads((staged / COUNTIES_FILE).read_text())
    assert len(counties["features"]) == 55 and all(set(f["properties"]) == {"name"} for f in counties["features"])
    shapes = {f["properties"]["name"]: shapely.geometry.shape(f["geometry"]) for f in counties["features"]}
    lon_lat = np.concatenate([shapely.get_coordinates(g) for g in shapes.values()])
    assert (lon_lat[:, 0] > -82.7).all() and (lon_lat[:, 0] < -77.7).all()  # West Virginia, in degrees
    assert (lon_lat[:, 1] > 37.1).all() and (lon_lat[:, 1] < 40.7).all()
    # the polygons the entities' county_spatial was computed with
    fayette = shapes["Fayette"]
    con = connect(staged)
    try:
        points = con.execute("SELECT lon, lat FROM gbim_entities WHERE county_spatial = 'Fayette'").fetchall()
    finally:
        con.close()
    assert points and all(fayette.contains(shapely.Point(lon, lat)) for lon, lat in points)
    home.publish(first.version_id, None, load_sources(sources).retention)

    # boundaries larger than the limit are simplified (topology kept): a smaller file, every county still there
    full_size = manifest["files"][COUNTIES_FILE]["size"]
    monkeypatch.setattr(gbim, "COUNTIES_MAX_BYTES", full_size // 2)
    simplified = home.locate(export_gbim(load_sources(sources), home, embedder, force=True).version_id)
    small = json.loads((simplified / COUNTIES_FILE).read_text())["features"]
    assert (simplified / COUNTIES_FILE).stat().st_size < full_size and len(small) == 55
    assert all(shapely.geometry.shape(f["geometry"]).is_valid for f in small)
    monkeypatch.undo()

    # the boundaries are no longer configured: the next export's version has none
    second = export_gbim(load_sources(write_sources(tmp_path, repo.path, counties=False)), home, embedder)
    assert second.staged and second.section["counties"] is None
    assert not (home.locate(second.version_id) / COUNTIES_FILE).exists()
    assert COUNTIES_FILE not in json.loads((home.locate(second.version_id) / "manifest.json").read_text())["files"]


# --- the Dagster assets ----------------------------------------------------------------------------------------------
def gbim_definitions(sources: Path, index_dir: Path) -> Definitions:
    assets, checks = build_gbim_assets(load_sources(sources))
    job = define_asset_job("export_gbim", selection=["gbim_export", "gbim_published"], executor_def=in_process_executor)
    return Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=[job],
        resources={
            "git_sources": GitSourcesResource(sources_file=str(sources)),
            "index_store": IndexStoreResource(index_dir=str(index_dir)),
            "embedder": EmbedderResource(),
            "spatial_databases": SpatialDatabasesResource(),
        },
    )


def run(defs: Definitions, instance: DagsterInstance):
    return defs.resolve_job_def("export_gbim").execute_in_process(instance=instance, raise_on_error=False)


def materialization(result, key: str):
    events = [e for e in result.get_asset_materialization_events() if e.asset_key == AssetKey(key)]
    return events[0].materialization if events else None


@pytest.mark.skipif(not COUNTIES.is_file(), reason="../shared/data/geo is not beside the project")
def test_assets_materialize_publish_and_report(tmp_path: Path, make_repo, embedder) -> None:
    repo = make_repo(files={"a.md": "# A\n"})
    defs = gbim_definitions(write_sources(tmp_path, repo.path), tmp_path / "index")
    instance = DagsterInstance.ephemeral()
    result = run(defs, instance)
    assert result.success
    meta = materialization(result, "gbim_export").metadata
    assert meta["status"].value == "staged" and meta["dagster/row_count"].value == 10
    assert "| wv_benefits | Fayette | 5 |" in meta["counts_by_dataset_and_county"].value
    assert "| facilities | wvb-011 | empty geometry (Polygon EMPTY) |" in meta["quarantined"].value
    preview = meta["preview_geojson"].value
    assert preview["type"] == "FeatureCollection" and len(preview["features"]) == 10
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert checks["gbim_entities_valid"].passed is True
    # Montgomery's attribute says Fayette, the county polygons say Kanawha: a warning, not a blocker
    assert checks["gbim_entity_flags"].passed is False
    assert "wvb-007" in checks["gbim_entity_flags"].metadata["failures"].value
    home = IndexHome(tmp_path / "index")
    assert materialization(result, "gbim_published").metadata["current_version"].value == home.current()
    assert home.current() == meta["version_id"].value

    again = run(defs, instance)
    assert materialization(again, "gbim_export").metadata["status"].value.startswith("spatial inputs unchanged")
    assert materialization(again, "gbim_published").metadata["status"].value == "unchanged"


def test_blocking_check_keeps_an_export_with_impossible_coordinates_unpublished(
    tmp_path: Path, make_repo, embedder
) -> None:
    repo = make_repo(files={"a.md": "# A\n"})
    # UTM metres declared as degrees: no position can be computed, the entities are not schema-valid
    defs = gbim_definitions(write_sources(tmp_path, repo.path, crs="EPSG:4326", counties=False), tmp_path / "index")
    result = run(defs, DagsterInstance.ephemeral())
    assert not result.success
    evaluation = next(e for e in result.get_asset_check_evaluations() if e.check_name == "gbim_entities_valid")
    assert evaluation.passed is False
    assert "lon: None is not of type 'number'" in evaluation.metadata["failures"].value
    assert materialization(result, "gbim_published") is None
    home = IndexHome(tmp_path / "index")
    assert home.current() is None
    assert (home.staging / materialization(result, "gbim_export").metadata["version_id"].value).is_dir()
