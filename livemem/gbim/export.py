"""Staging a GBIM export into a new index version: tables, RDF files, county polygons, the GIS snapshot and
Chroma collection, the manifest section."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from livemem.dates import iso, utc_now
from livemem.duck import registered
from livemem.gbim.config import COUNTIES_FILE, EXPORT_VERSION, GBIM_DIR, PREVIEW_FEATURES, SpatialConfig, load_spatial
from livemem.gbim.entities import Quarantined, features_to_entities, relations_for
from livemem.gbim.rdf import rdf_graph, serialize_rdf
from livemem.gbim.read import read_counties, read_features
from livemem.gbim.relations import linked_relations
from livemem.model.embed_cache import EmbeddingCache
from livemem.model.embedding import Embedder
from livemem.query.gis_index import GIS, GIS_GRAPH_META
from livemem.settings import BuildSettings
from livemem.sources.config import SourcesConfig
from livemem.version import connect
from livemem.version.schema import (
    ENTITY_COLUMNS,
    ENTITY_TABLE,
    FLAG_COLUMNS,
    LAYOUT_VERSION,
    RELATION_COLUMNS,
    RELATION_TABLE,
    create_sql,
)
from livemem.version.store import (
    CHROMA,
    IndexHome,
    derive_version,
    write_manifest,
)
from livemem.version.vectors import delete, open_vectors, require_chroma, upsert

COUNTIES_MAX_BYTES = 512 * 1024  # larger boundaries are simplified: a browser draws them on every page
COUNTIES_TOLERANCE_DEG = 0.002  # ~200 m, under a pixel on a state-wide map of a few hundred pixels

ENTITY_SQL = create_sql(ENTITY_TABLE, RELATION_TABLE)  # livemem.version.schema


@dataclass
class GbimResult:
    """What an export did: ``version_id`` is None when nothing was staged (inputs unchanged, no spatial section)."""

    version_id: str | None
    base_version: str | None
    reason: str
    section: dict[str, Any] | None = None
    quarantined: list[Quarantined] = field(default_factory=list)
    preview: dict[str, Any] | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def staged(self) -> bool:
        return self.version_id is not None


def export_gbim(
    config: SourcesConfig,
    home: IndexHome,
    embedder: Embedder,
    *,
    force: bool = False,
    dsns: Mapping[str, str] | None = None,
    graph_min_rows: int | None = None,
) -> GbimResult:
    """Stage a new version with the GBIM entities of the configured spatial sources (nothing when unchanged).
    ``dsns``: database URLs of PostGIS sources by the variable each names (default: the environment);
    ``graph_min_rows``: with at least this many entities their approximate-search graph is written (the entry point
    passes ``BuildSettings.ann_min_rows``, ``LIVEMEM_ANN_MIN_ROWS``; default: its default; 0: never)."""
    min_rows = BuildSettings.defaults().ann_min_rows if graph_min_rows is None else graph_min_rows
    spatial = load_spatial(config)
    if spatial is not None:
        require_chroma(config)  # Chroma asked for but not installed: refused before anything is written
    home.ensure()
    with home.write_lock():
        base = home.current()
        base_manifest = home.manifest(base) if base else None
        if spatial is None:
            return GbimResult(None, base, "no spatial section in the sources file: nothing to export")
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        inputs = _read_inputs(spatial, embedder, dsns)
        timings["read_s"] = round(time.perf_counter() - t0, 3)
        previous = (base_manifest or {}).get("gbim") or {}
        if not force and previous.get("input_hash") == inputs.input_hash:
            return GbimResult(
                None, base, f"spatial inputs unchanged: version {base} already holds this export", previous
            )
        home.clear_staging()

        t = time.perf_counter()
        entities, relations, quarantined, per_source = _build_entities(spatial, inputs)
        timings["entities_s"] = round(time.perf_counter() - t, 3)

        t = time.perf_counter()
        texts = [embed_text(e) for e in entities]
        with EmbeddingCache(home.cache_dir, embedder.dim) as cache:
            vectors, computed, reused = cache.embed(texts, embedder)
        timings["embed_s"] = round(time.perf_counter() - t, 3)

        t = time.perf_counter()
        version_id, staged, base = derive_version(home)
        collections = previous.get("collections", [])
        _write_version(
            staged, config, spatial, inputs, (entities, relations, vectors), base, embedder.dim, min_rows, collections
        )
        timings["write_s"] = round(time.perf_counter() - t, 3)
        timings["total_s"] = round(time.perf_counter() - t0, 3)

        section = _section(
            spatial, entities, relations, quarantined, per_source, inputs.input_hash, inputs.counties_hash
        )
        section.update(embeddings_computed=computed, embeddings_reused=reused, timings_s=timings)
        _write_export_manifest(staged, base_manifest or _empty_manifest(config, embedder), version_id, base, section)
    return GbimResult(version_id, base, "staged", section, quarantined, preview(entities), timings)


@dataclass
class _Inputs:
    """The features read from each source, their hashes, the county boundaries and the hash of all inputs."""

    frames: dict[str, Any]
    hashes: dict[str, str]
    counties: Any
    counties_hash: str | None
    input_hash: str


def _read_inputs(spatial: SpatialConfig, embedder: Embedder, dsns: Mapping[str, str] | None) -> _Inputs:
    """Read every source's features and the county boundaries, and hash them with the export's configuration."""
    frames = {}
    hashes = {}
    for source in spatial.sources:
        frames[source.name], hashes[source.name] = read_features(source, dsns)
    counties, counties_hash = read_counties(spatial.counties) if spatial.counties else (None, None)
    input_hash = hashlib.sha256(
        json.dumps(
            {
                "export": EXPORT_VERSION,
                "model": embedder.model_id,
                "config": spatial.raw,
                "sources": hashes,
                "counties": counties_hash,
            },
            sort_keys=True,
        ).encode()
    ).hexdigest()
    return _Inputs(frames, hashes, counties, counties_hash, input_hash)


def _build_entities(
    spatial: SpatialConfig, inputs: _Inputs
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Quarantined], dict[str, dict[str, Any]]]:
    """The entities of every source (by id), their relations, the features quarantined and a summary per source."""
    entities: list[dict[str, Any]] = []
    quarantined: list[Quarantined] = []
    per_source: dict[str, dict[str, Any]] = {}
    for source in spatial.sources:
        found, dropped = features_to_entities(source, inputs.frames[source.name], spatial, inputs.counties)
        entities += found
        quarantined += dropped
        per_source[source.name] = {
            "dataset": source.dataset,
            "source_table": source.source_table,
            # a source without a file is read from PostGIS (read_features)
            "location": str(source.path) if source.path else f"postgis ${cast(dict, source.postgis)['dsn_env']}",
            "crs": source.crs,
            "collection": source.collection,
            "access": source.access,
            "content_hash": inputs.hashes[source.name],
            "features": len(inputs.frames[source.name]),
            "entities": len(found),
            "quarantined": len(dropped),
        }
    entities.sort(key=lambda e: e["entity_id"])
    relations = [r for e in entities for r in relations_for(e, spatial.counties)] + linked_relations(entities)
    return entities, relations, quarantined, per_source


def _write_version(
    staged: Path,
    config: SourcesConfig,
    spatial: SpatialConfig,
    inputs: _Inputs,
    export: tuple[list[dict[str, Any]], list[dict[str, Any]], np.ndarray],
    base: str | None,
    dim: int,
    min_rows: int,
    collections: list,
) -> None:
    """Write the export's ``(entities, relations, vectors)`` into the staged version: tables, RDF, county
    polygons, the GIS snapshot and the Chroma collections (empty chunk parts on an empty index)."""
    entities, relations, vectors = export
    counties = inputs.counties
    if base is None:
        _write_empty_chunk_parts(staged, dim)
    _write_tables(staged, entities, relations)
    _write_rdf(staged, entities, relations)
    if counties is not None:
        _write_counties(staged, counties)
    _write_gis_snapshot(staged, entities, vectors, min_rows)
    if config.uses_chroma:
        _update_chroma(staged, spatial, entities, vectors, collections, config.chroma_server)
    elif (staged / CHROMA).exists():
        shutil.rmtree(staged / CHROMA)  # the vector store was switched off since the base version


def _write_export_manifest(
    staged: Path, prior: dict[str, Any], version_id: str, base: str | None, section: dict[str, Any]
) -> None:
    """Write the staged version's manifest: the ``prior`` one (the base's, or an empty index's) with the section."""
    now = iso(utc_now())
    manifest = {
        **prior,
        "version_id": version_id,
        "base_version": base,
        "created_at": now,
        "last_updated": now,
        "gbim": section,
    }
    write_manifest(staged, manifest)


def embed_text(entity: dict[str, Any]) -> str:
    """What is embedded for an entity: its description, led by its label when the description lacks it."""
    label, description = entity["label"], entity["description"]
    return description if label.casefold() in description.casefold() else f"{label}. {description}"


def _empty_manifest(config: SourcesConfig, embedder: Embedder) -> dict[str, Any]:
    """The chunk part of a manifest for a version staged on an empty index (no chunks yet)."""
    from livemem.sources.home import home_from_sources
    from livemem.version.staging import governance_status

    return {
        "layout_version": LAYOUT_VERSION,
        "segments": [],
        "model": {"id": embedder.model_id, "dim": embedder.dim},
        "chunking": config.chunking,
        "home": home_from_sources(config).to_manifest(),  # what serving answers for (docs/home.md)
        "total_chunks": 0,
        "total_parents": 0,
        "sealed_chunks": 0,
        "index_size_mb": 0.0,
        "collections": {},
        "sources": {},
        "breath_at_update": {"phase": None, "tone": "normal", "source": None, "path": None},
        "governance": governance_status(0, 0.0, config.governance),
        "attention_stats": {"avg_score": 0.0, "high_attention_chunks": 0, "never_used_chunks": 0},
        "changes": {},
    }


def _write_empty_chunk_parts(staged: Path, dim: int) -> None:
    """Empty chunk tables and retrieval snapshot, so the version is complete for serving and chunk builds."""
    from livemem.version.staging import init_chunk_tables

    con = connect(staged, read_only=False)
    try:
        init_chunk_tables(con)
    finally:
        con.close()


def _write_tables(staged: Path, entities: list[dict[str, Any]], relations: list[dict[str, Any]]) -> None:
    import pandas as pd

    rows = []
    for e in entities:
        row = {k: e[k] for k in ENTITY_COLUMNS if k not in FLAG_COLUMNS}
        row["attributes"] = json.dumps(e["attributes"], ensure_ascii=False, sort_keys=True)
        row.update(e["flags"])
        rows.append(row)
    entity_frame = pd.DataFrame(rows, columns=list(ENTITY_COLUMNS))
    relation_frame = pd.DataFrame(
        [{**r, "provenance": json.dumps(r["provenance"], ensure_ascii=False, sort_keys=True)} for r in relations],
        columns=list(RELATION_COLUMNS),
    )
    con = connect(staged, read_only=False)
    try:
        con.execute(f"DROP TABLE IF EXISTS {ENTITY_TABLE}; DROP TABLE IF EXISTS {RELATION_TABLE};")
        con.execute(ENTITY_SQL)
        if rows:
            with registered(con, entity_frame, "entities") as frame:
                con.execute(f"INSERT INTO {ENTITY_TABLE} SELECT * FROM {frame}")
        if relations:
            with registered(con, relation_frame, "relations") as frame:
                con.execute(f"INSERT INTO {RELATION_TABLE} SELECT * FROM {frame}")
    finally:
        con.close()


def _write_rdf(staged: Path, entities: list[dict[str, Any]], relations: list[dict[str, Any]]) -> None:
    target = staged / GBIM_DIR
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    graph = rdf_graph(entities, relations)
    (target / "gbim.nt").write_text(serialize_rdf(graph, "application/n-triples"), encoding="utf-8")
    (target / "gbim.ttl").write_text(serialize_rdf(graph, "text/turtle"), encoding="utf-8")  # the same graph


def counties_geojson(counties, tolerance: float = 0.0) -> dict[str, Any]:
    """County polygons (``read_counties``' frame, EPSG:4326) as a GeoJSON FeatureCollection of ``name`` and
    geometry only, coordinates rounded to 6 decimals (~0.1 m); simplified by ``tolerance`` degrees when given."""
    import shapely

    features = []
    for name, geom in zip(counties["county"], counties.geometry, strict=True):
        if geom.geom_type not in ("Polygon", "MultiPolygon"):  # make_valid may return a collection: its areas only
            geom = shapely.union_all([g for g in shapely.get_parts(geom) if g.geom_type in ("Polygon", "MultiPolygon")])
        if tolerance:
            geom = geom.simplify(tolerance, preserve_topology=True)
        geom = shapely.transform(geom, lambda xy: np.round(xy, 6))
        if geom.is_empty:
            continue
        features.append({"type": "Feature", "properties": {"name": name}, "geometry": shapely.geometry.mapping(geom)})
    return {"type": "FeatureCollection", "features": features}


def _write_counties(staged: Path, counties) -> None:
    """``gbim/counties.geojson``: the boundaries used for ``county_spatial``, for the glassbox map (listed in the
    manifest's ``files`` like every file, so serving verifies it); simplified when the full ones are large."""
    text = json.dumps(counties_geojson(counties), separators=(",", ":"))
    if len(text) > COUNTIES_MAX_BYTES:
        text = json.dumps(counties_geojson(counties, COUNTIES_TOLERANCE_DEG), separators=(",", ":"))
    (staged / COUNTIES_FILE).write_text(text, encoding="utf-8")


def _write_gis_snapshot(
    staged: Path, entities: list[dict[str, Any]], vectors: np.ndarray, graph_min_rows: int = 0
) -> None:
    """``gis/``: ``ids.json`` (entity ids, row order), ``dense.npy`` (their vectors), and with at least
    ``graph_min_rows`` entities (0: never) the approximate-search graph of the vectors, ``ann.usearch``
    (``livemem.index.ann``, keys = rows) with what it was built as in ``graph.json`` (issue 38)."""
    target = staged / GIS
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    (target / "ids.json").write_text(json.dumps([e["entity_id"] for e in entities]), encoding="utf-8")
    dense = np.asarray(vectors, dtype=np.float32).reshape(len(entities), -1)
    np.save(target / "dense.npy", dense)
    if 0 < graph_min_rows <= len(entities):
        from livemem.index.ann import GRAPH_FILE, build_graph

        meta = build_graph(dense, target / GRAPH_FILE)
        (target / GIS_GRAPH_META).write_text(json.dumps(meta), encoding="utf-8")


def chroma_metadata(entity: dict[str, Any]) -> dict[str, Any]:
    """Scalar metadata beside each vector (Chroma takes str, int, float and bool; None values are left out)."""
    keys = ("entity_id", "source", "dataset", "worldview_id", "county", "gbim_entity", "label", "centroid_x",
            "centroid_y", "srid", "lon", "lat", "source_table", "source_pk", "access")  # fmt: skip
    meta = {k: entity[k] for k in keys if entity[k] is not None}
    meta.update({k: v for k, v in entity["flags"].items()})
    return meta


def _update_chroma(
    staged: Path,
    spatial: SpatialConfig,
    entities: list[dict[str, Any]],
    vectors: np.ndarray,
    previous: list[str],
    server: tuple[str, int] | None = None,
) -> None:
    """Upsert every entity into its collections, delete entities that are gone, drop collections no longer used."""
    members: dict[str, list[int]] = {name: [] for name in spatial.collections}
    for i, e in enumerate(entities):
        members[spatial.collection].append(i)
        if e["collection"] != spatial.collection:
            members[e["collection"]].append(i)
    client = open_vectors(staged, None, server)  # the staged copy already holds the base version's collections
    try:
        existing = {c.name for c in client.list_collections()}
        for name in set(previous) & existing - set(members):
            client.delete_collection(name)
        for name, idx in members.items():
            col = client.get_or_create_collection(name, metadata={"hnsw:space": "cosine"}, embedding_function=None)
            keep = {entities[i]["entity_id"] for i in idx}
            delete(col, [cid for cid in col.get(include=[])["ids"] if cid not in keep])
            upsert(
                col,
                ids=[entities[i]["entity_id"] for i in idx],
                vectors=vectors[idx],
                documents=[entities[i]["description"] for i in idx],
                metadatas=[chroma_metadata(entities[i]) for i in idx],
            )
    finally:
        client.close()


def _section(
    spatial: SpatialConfig,
    entities: list[dict[str, Any]],
    relations: list[dict[str, Any]],
    quarantined: list[Quarantined],
    per_source: dict[str, dict[str, Any]],
    input_hash: str,
    counties_hash: str | None,
) -> dict[str, Any]:
    """The manifest's ``gbim`` section: counts per dataset and county, quarantine, flags, hashes, collections."""
    per_dataset: dict[str, dict[str, int]] = {}
    for e in entities:
        counts = per_dataset.setdefault(e["dataset"], {})
        counts[e["county"] or "(none)"] = counts.get(e["county"] or "(none)", 0) + 1
    return {
        "export_version": EXPORT_VERSION,
        "exported_at": iso(utc_now()),
        "input_hash": input_hash,
        "working_crs": spatial.working_crs,
        "entities": len(entities),
        "relations": len(relations),
        "per_dataset": {ds: sum(c.values()) for ds, c in sorted(per_dataset.items())},
        "per_dataset_county": {ds: dict(sorted(c.items())) for ds, c in sorted(per_dataset.items())},
        "flags": {name: sum(1 for e in entities if e["flags"][name]) for name in FLAG_COLUMNS},
        "quarantined_count": len(quarantined),
        "quarantined": [q.as_dict() for q in quarantined[:100]],
        "sources": per_source,
        "counties": (
            {
                "path": str(spatial.counties.path),
                "name_field": spatial.counties.name_field,
                "content_hash": counties_hash,
                "file": COUNTIES_FILE,
            }
            if spatial.counties
            else None
        ),
        "region": (
            {
                "name": spatial.region.name,
                "bbox": list(spatial.region.bbox),
                "tolerance_km": spatial.region.tolerance_km,
            }
            if spatial.region
            else None
        ),
        "collections": spatial.collections,
    }


def preview(entities: list[dict[str, Any]], limit: int = PREVIEW_FEATURES) -> dict[str, Any]:
    """A GeoJSON FeatureCollection of entity centroids (EPSG:4326), for a map preview."""
    features = [
        {
            "type": "Feature",
            "id": e["entity_id"],
            "geometry": {"type": "Point", "coordinates": [round(e["lon"], 7), round(e["lat"], 7)]},
            "properties": {"label": e["label"], "dataset": e["dataset"], "county": e["county"], **e["flags"]},
        }
        for e in entities[:limit]
        if e["lon"] is not None and e["lat"] is not None
    ]
    return {"type": "FeatureCollection", "features": features}
