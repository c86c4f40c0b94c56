"""Spatial features → GBIM entities (centroids, EPSG:26917 → EPSG:4326, counties) + relations → a published version.

Assets:
- ``gbim_export``   reads the spatial sources of the sources file (``spatial:`` section), stages a new index
  version derived from the current one with the ``gbim_entities`` / ``gbim_relations`` tables, the N-Triples /
  Turtle export, the county polygons used (``gbim/counties.geojson``, EPSG:4326, for the glassbox map; only
  with ``spatial.counties``), the GIS Chroma collections and the ``gis/`` snapshot serving reads. Nothing is staged when the
  spatial inputs (content hashes in the current manifest) are unchanged.
- ``gbim_published`` switches ``CURRENT`` to the staged version, only when the blocking check passed.

Checks: ``gbim_entities_valid`` (blocking: schema-valid entities, lon/lat in range) and ``gbim_entity_flags``
(WARN: features far outside the region, county attribute and polygon disagreeing).
"""

from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    MetadataValue,
    Output,
    asset_check,
)

from livemem.gbim import EXPORT_VERSION, GbimResult, check_entities_valid, check_entity_flags, export_gbim
from livemem.settings import BuildSettings
from livemem.sources.config import SourcesConfig
from livemem.version.staging import CheckOutcome
from orchestration.assets.answer_gate import answer_gate_check
from orchestration.assets.publishing import check_result, publish_asset, staged_output, staging_asset
from orchestration.resources import EmbedderResource, GitSourcesResource, IndexStoreResource, SpatialDatabasesResource

GROUP = "living_memory"


def _counts_table(section: dict[str, Any]) -> str:
    rows = ["| dataset | county | entities |", "|---|---|---|"]
    for dataset, counties in section.get("per_dataset_county", {}).items():
        rows += [f"| {dataset} | {county} | {n} |" for county, n in counties.items()]
    return "\n".join(rows)


def _quarantine_table(section: dict[str, Any]) -> str:
    quarantined = section.get("quarantined", [])
    if not quarantined:
        return "No feature was quarantined."
    rows = ["| source | id | reason |", "|---|---|---|"]
    rows += [f"| {q['source']} | {q['source_pk'] or '-'} | {q['reason']} |" for q in quarantined]
    more = section.get("quarantined_count", 0) - len(quarantined)
    return "\n".join(rows) + (f"\n\n… and {more} more" if more > 0 else "")


def _export_metadata(result: GbimResult) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "status": result.reason,
        "version_id": result.version_id or "",
        "base_version": result.base_version or "",
    }
    section = result.section
    if not section:
        return meta
    meta.update(
        {
            "dagster/row_count": section["entities"],
            "relations": section["relations"],
            "per_dataset": section["per_dataset"],
            "counts_by_dataset_and_county": MetadataValue.md(_counts_table(section)),
            "quarantined_count": section["quarantined_count"],
            "quarantined": MetadataValue.md(_quarantine_table(section)),
            "flags": section["flags"],
            "collections": section["collections"],
            "source_hashes": {name: s["content_hash"] for name, s in section["sources"].items()},
            "working_crs": section["working_crs"],
            "counties_file": (section.get("counties") or {}).get("file") or "none (no spatial.counties)",
        }
    )
    if result.staged:
        meta["embeddings_computed"] = section["embeddings_computed"]
        meta["embeddings_reused"] = section["embeddings_reused"]
        meta["timings_s"] = result.timings
    if result.preview is not None:
        meta["preview_geojson"] = MetadataValue.json(result.preview)
    return meta


def stage_gbim(
    context: AssetExecutionContext,
    git_sources: GitSourcesResource,
    index_store: IndexStoreResource,
    embedder: EmbedderResource,
    spatial_databases: SpatialDatabasesResource,
) -> Output[dict[str, Any]]:
    """The body of ``gbim_export``: export the spatial sources and stage them as a new index version."""
    home = index_store.home()
    result = export_gbim(
        git_sources.load(), home, embedder.embedder(), dsns=spatial_databases.dsns,
        graph_min_rows=BuildSettings.from_env().ann_min_rows,  # read once here, passed down
    )  # fmt: skip
    context.log.info(result.reason if not result.staged else f"staged version {result.version_id}")
    for q in result.quarantined:
        context.log.warning(f"quarantined {q.source} {q.source_pk}: {q.reason}")
    return staged_output(context, home, result.version_id, result.base_version, result.reason, _export_metadata(result))


def _version_dir(index_store: IndexStoreResource, staged: dict[str, Any]):
    """The staged version's directory, else the current one's; None when the index is empty."""
    home = index_store.home()
    version = staged["version_id"] or home.current()
    return home.locate(version) if version else None


def entities_valid(staged: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
    """The body of ``gbim_entities_valid``."""
    version_dir = _version_dir(index_store, staged)
    if version_dir is None:
        return check_result(CheckOutcome(True, "index is empty"), AssetCheckSeverity.ERROR)
    return check_result(check_entities_valid(version_dir), AssetCheckSeverity.ERROR)


def entity_flags(staged: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
    """The body of ``gbim_entity_flags`` (WARN)."""
    version_dir = _version_dir(index_store, staged)
    if version_dir is None:
        return check_result(CheckOutcome(True, "index is empty"), AssetCheckSeverity.WARN)
    return check_result(check_entity_flags(version_dir), AssetCheckSeverity.WARN)


def _export_asset(names: str) -> Any:
    """The ``gbim_export`` staging asset (``names``: the configured spatial sources, for its description)."""

    @staging_asset(
        name="gbim_export",
        pool="index_writer",
        group_name=GROUP,
        kinds={"geopandas", "duckdb", "chroma"},
        code_version=EXPORT_VERSION,
        description=(
            "GBIM entities of the configured spatial sources: centroids in EPSG:26917, lon/lat in EPSG:4326, "
            "county by attribute or point-in-polygon, relations (located_in, serves_zip, part_of) as a table and "
            "N-Triples, descriptions embedded into the GIS collections, the county polygons used (spatial.counties) as "
            "gbim/counties.geojson in EPSG:4326 for the glassbox map; staged as a new index version. "
            f"Spatial sources: {names}."
        ),
    )
    def gbim_export(
        context: AssetExecutionContext,
        git_sources: GitSourcesResource,
        index_store: IndexStoreResource,
        embedder: EmbedderResource,
        spatial_databases: SpatialDatabasesResource,
    ) -> Output[dict[str, Any]]:
        return stage_gbim(context, git_sources, index_store, embedder, spatial_databases)

    return gbim_export


def _gbim_checks(gbim_export: Any) -> list[Any]:
    """``gbim_entities_valid`` (blocking) and ``gbim_entity_flags`` (WARN)."""

    @asset_check(
        asset=gbim_export,
        blocking=True,
        description="Every GBIM entity is valid per schemas/gbim_entity.schema.json, with lon/lat in range.",
    )
    def gbim_entities_valid(gbim_export: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
        return entities_valid(gbim_export, index_store)

    @asset_check(
        asset=gbim_export,
        description="No feature far outside the configured region, no county attribute contradicting its polygon.",
    )
    def gbim_entity_flags(gbim_export: dict[str, Any], index_store: IndexStoreResource) -> AssetCheckResult:
        return entity_flags(gbim_export, index_store)

    return [gbim_entities_valid, gbim_entity_flags]


def build_gbim_assets(config: SourcesConfig) -> tuple[list[Any], list[Any]]:
    """The GBIM export asset, its publish asset and their checks.

    The ``spatial:`` section is validated now, so a mistake in it fails the code location's load with its file,
    line and column; the spatial sources themselves are read when the asset runs.
    """
    spatial = config.section("spatial", "spatial_config") or {}
    names = ", ".join(s["name"] for s in spatial.get("sources", [])) or "none configured"
    gbim_export = _export_asset(names)
    checks = _gbim_checks(gbim_export)
    checks.append(answer_gate_check(gbim_export, "gbim_export"))  # the answer suite (eval.suite): no worse
    gbim_published = publish_asset(
        name="gbim_published",
        staging="gbim_export",
        description="The version with the GBIM export, named by CURRENT once the blocking check passed.",
        group_name=GROUP,
        checks=checks,
        row_count=lambda m: (m.get("gbim") or {}).get("entities", 0),
    )
    return [gbim_export, gbim_published], checks
