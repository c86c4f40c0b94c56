"""The spatial side of an index version, read-only: GBIM entities, their relations and description vectors.

The GBIM export (``livemem.gbim``) writes, inside a version directory, the tables ``gbim_entities`` and
``gbim_relations`` in ``tables.duckdb`` and the snapshot ``gis/`` (``ids.json``: entity ids; ``dense.npy``: their
L2-normalised description vectors, same order). ``load_gis_index`` reads them once; spatial and metadata
constraints are boolean masks over all entities computed *before* ranking, like the chunk filters in
``livemem.query.retrieval``. This module imports numpy and DuckDB only, so the serving app stays light.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from livemem.errors import LivingMemoryError
from livemem.geo.names import tidy_county_key
from livemem.version import connect

GIS = "gis"
ENTITY_TABLE = "gbim_entities"
RELATION_TABLE = "gbim_relations"
EARTH_RADIUS_KM = 6371.0088  # mean Earth radius (IUGG)
FLAG_COLUMNS = ("geometry_repaired", "outside_region", "county_disagreement")
ENTITY_COLUMNS = (
    "entity_id", "source", "worldview_id", "dataset", "county", "gbim_entity", "label", "description", "centroid_x",
    "centroid_y", "srid", "lon", "lat", "source_table", "source_pk", "attributes", "access", "collection",
    "geometry_type", "county_source", "county_spatial", *FLAG_COLUMNS,
)  # fmt: skip
RELATION_COLUMNS = ("subject", "predicate", "object", "object_kind", "provenance")


def haversine_km(lat: np.ndarray, lon: np.ndarray, lat0: Any, lon0: Any) -> np.ndarray:
    """Great-circle distances (km) between (lat, lon) and (lat0, lon0) (scalars or arrays), on the mean-radius
    sphere (haversine)."""
    phi, phi0 = np.radians(lat), np.radians(lat0)
    dphi = phi - phi0
    dlmb = np.radians(lon) - np.radians(lon0)
    a = np.sin(dphi / 2) ** 2 + np.cos(phi) * np.cos(phi0) * np.sin(dlmb / 2) ** 2
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))


def row_to_entity(row: dict[str, Any]) -> dict[str, Any]:
    """The entity record (``schemas/gbim_entity.schema.json``) of a ``gbim_entities`` row."""
    record = {k: row[k] for k in ENTITY_COLUMNS if k not in FLAG_COLUMNS}
    record["attributes"] = json.loads(row["attributes"]) if row["attributes"] else {}
    record["flags"] = {k: bool(row[k]) for k in FLAG_COLUMNS}
    for key in ("centroid_x", "centroid_y", "lon", "lat"):
        value = record[key]
        record[key] = float(value) if value is not None and math.isfinite(value) else None
    record["srid"] = int(record["srid"])
    return record


def read_entities(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every entity record of a version's tables, ordered by entity id."""
    cursor = con.execute(f"SELECT {', '.join(ENTITY_COLUMNS)} FROM {ENTITY_TABLE} ORDER BY entity_id")
    return [row_to_entity(dict(zip(ENTITY_COLUMNS, r, strict=True))) for r in cursor.fetchall()]


def read_relations(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    rows = con.execute(
        f"SELECT {', '.join(RELATION_COLUMNS)} FROM {RELATION_TABLE} ORDER BY subject, predicate, object"
    ).fetchall()
    return [{**dict(zip(RELATION_COLUMNS, r, strict=True)), "provenance": json.loads(r[4])} for r in rows]


def has_gbim_tables(con: duckdb.DuckDBPyConnection) -> bool:
    names = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    return {ENTITY_TABLE, RELATION_TABLE} <= names


@dataclass
class GisIndex:
    """The entities of one version, in the order of ``gis/ids.json``, with columns for the masks."""

    path: Path
    ids: list[str]
    dense: np.ndarray
    entities: list[dict[str, Any]]
    relations: dict[str, list[dict[str, Any]]]
    row_of: dict[str, int]
    lon: np.ndarray
    lat: np.ndarray
    county: np.ndarray
    dataset: np.ndarray
    access: np.ndarray

    @property
    def size(self) -> int:
        return len(self.ids)

    def mask(
        self,
        access: frozenset[str],
        bbox: tuple[float, float, float, float] | None = None,
        near: tuple[float, float, float] | None = None,
        counties: tuple[str, ...] = (),
        datasets: tuple[str, ...] = (),
    ) -> np.ndarray:
        """Which entities the caller may read and that meet every constraint.

        ``bbox`` is (min_lon, min_lat, max_lon, max_lat); ``near`` is (lat, lon, radius_km), by great-circle
        distance; ``counties`` match case-insensitively and with or without the word County.
        """
        keep = self.access_mask(access).copy()
        if datasets:
            keep &= np.isin(self.dataset, np.array(datasets, dtype=object))
        if counties:
            keys = [tidy_county_key(c) for c in counties]
            keep &= np.isin(self.county, np.array([k for k in keys if k], dtype=object))
        if bbox is not None:
            min_lon, min_lat, max_lon, max_lat = bbox
            keep &= (self.lon >= min_lon) & (self.lon <= max_lon) & (self.lat >= min_lat) & (self.lat <= max_lat)
        if near is not None:
            lat0, lon0, radius_km = near
            candidates = np.flatnonzero(keep)
            within = haversine_km(self.lat[candidates], self.lon[candidates], lat0, lon0) <= radius_km
            keep[candidates[~within]] = False
        return keep

    def access_mask(self, access: frozenset[str]) -> np.ndarray:
        """Entities readable with these access levels, computed once per set (a role's mask on every query)."""
        cache = self.__dict__.setdefault("_access_masks", {})
        if access not in cache:
            cache[access] = np.isin(self.access, np.array(sorted(access), dtype=object))
        return cache[access]

    def distances_km(self, rows: np.ndarray, lat0: float, lon0: float) -> np.ndarray:
        return haversine_km(self.lat[rows], self.lon[rows], lat0, lon0)


def load_gis_index(version_dir: Path) -> GisIndex | None:
    """The GIS snapshot of a version directory; None when the version holds no GBIM export.

    Raises LivingMemoryError when the export is there but cannot be read (ids and tables disagree, ...).
    """
    gis = version_dir / GIS
    if not (gis / "ids.json").is_file():
        return None
    try:
        ids = json.loads((gis / "ids.json").read_text(encoding="utf-8"))
        dense = np.ascontiguousarray(np.load(gis / "dense.npy"), dtype=np.float32)
        if dense.ndim != 2 or dense.shape[0] != len(ids):
            raise ValueError(f"gis/dense.npy has shape {dense.shape} but gis/ids.json lists {len(ids)} entities")
        con = connect(version_dir)
        try:
            entities = {e["entity_id"]: e for e in read_entities(con)}
            relations: dict[str, list[dict[str, Any]]] = {}
            for rel in read_relations(con):
                relations.setdefault(rel["subject"], []).append(rel)
        finally:
            con.close()
        missing = [i for i in ids if i not in entities]
        if missing or len(entities) != len(ids):
            raise ValueError(f"gis/ids.json lists {len(ids)} entities, {ENTITY_TABLE} holds {len(entities)}")
    except (OSError, ValueError, duckdb.Error) as exc:
        raise LivingMemoryError(
            f"the GIS part of index version {version_dir.name} cannot be read ({type(exc).__name__}: {exc}); "
            "run the `export_gbim` job to publish a new version"
        ) from exc
    ordered = [entities[i] for i in ids]

    def column(name: str) -> np.ndarray:
        return np.array([e[name] for e in ordered], dtype=object)

    def coordinate(name: str) -> np.ndarray:
        return np.array([np.nan if e[name] is None else e[name] for e in ordered], dtype=np.float64)

    return GisIndex(
        path=version_dir,
        ids=ids,
        dense=dense,
        entities=ordered,
        relations=relations,
        row_of={eid: i for i, eid in enumerate(ids)},
        lon=coordinate("lon"),
        lat=coordinate("lat"),
        county=np.array([tidy_county_key(e["county"]) for e in ordered], dtype=object),
        dataset=column("dataset"),
        access=column("access"),
    )


@lru_cache(maxsize=4)
def cached_gis_index(version_dir: str) -> GisIndex | None:
    """``load_gis_index`` once per (immutable) version directory and process, shared by every caller."""
    return load_gis_index(Path(version_dir))
