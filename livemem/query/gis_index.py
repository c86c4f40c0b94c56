"""The spatial side of an index version, read-only: GBIM entities, their relations and description vectors.

The GBIM export (``livemem.gbim``) writes, inside a version directory, the tables ``gbim_entities`` and
``gbim_relations`` in ``tables.duckdb`` and the snapshot ``gis/`` (``ids.json``: entity ids; ``dense.npy``: their
L2-normalised description vectors, same order). ``load_gis_index`` serves them from a **GIS serving copy**
(``livemem.version.mapped``, like the segments' copies): the first worker of a machine that loads a version's GIS
part reads those files once and writes, in one file, the entities by column (text dictionary-encoded), the
relations by column grouped by subject, the float32 vectors, their int8 codes for the exact two-stage top-k
(``livemem.index.dense``), the rows sorted by longitude with their longitudes and latitudes in that order (the
bbox / radius prefilter: a slice, then one pass over contiguous latitudes), and the int8 codes again in a spatial
order (``grid_order``: cells of ``GRID_CELL_DEG`` of longitude, by latitude within a cell), so that the rows a
bbox, a radius or a county keeps are read as a few runs of neighbouring rows rather than one row per page of the
whole copy (``livemem.answer.gis_rank``; the row-ordered codes stay on disk unless a full scan reads them); every
worker maps it, so N workers share one copy in the page cache and none holds a dict per entity: an entity's record is built when a
response needs it (``Entities``). Spatial and metadata constraints are boolean masks over all entities computed
*before* ranking, like the chunk filters in ``livemem.query.retrieval``; on the columns' codes, not per-row strings.
The copy is named by what it was read from (the version's recorded file hashes and its export), so versions that
share an export share a copy. This module imports numpy and DuckDB only, so the serving app stays light.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import duckdb
import numpy as np
from cachetools import LRUCache

from livemem.errors import LivingMemoryError
from livemem.geo.distance import EARTH_RADIUS_KM, haversine_km
from livemem.geo.names import tidy_county_key
from livemem.index.bounds import INT8_MAX_NORM, max_row_norm
from livemem.index.dense import DenseRows, Int8Codes, quantize_int8, share_int8
from livemem.settings import EngineConfig
from livemem.version import connect, mapped, parts_dir
from livemem.version.schema import ENTITY_COLUMNS, ENTITY_TABLE, FLAG_COLUMNS, RELATION_COLUMNS, RELATION_TABLE

log = logging.getLogger(__name__)

GIS = "gis"
GIS_GRAPH_META = "graph.json"  # gis/graph.json: how gis/ann.usearch was built (livemem.index.ann.graph_meta)
GIS_COPY_FORMAT = 3  # bump when what the GIS serving copy holds changes (a copy of another format is written again)
FLOAT_COLUMNS = ("centroid_x", "centroid_y", "lon", "lat")
# how each column is stored in the copy (``livemem.version.mapped.Table``)
ENTITY_KINDS = {c: "float" if c in FLOAT_COLUMNS else "int" if c == "srid" or c in FLAG_COLUMNS else "text"
                for c in ENTITY_COLUMNS}  # fmt: skip
GRID_CELL_DEG = 0.05  # the spatial order's cells: ≈ 4.4 km of longitude in WV; a 0.5° bbox reads ≈ 10 runs of rows
LISTED_MAX = 200_000  # Entities kept as a list once walked whole, up to this many (a few hundred MB at the most)
RELATION_KINDS = {c: "text" for c in RELATION_COLUMNS if c != "subject"}  # the subject is the group's entity


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


class Entities(Sequence):
    """The entity records (``row_to_entity``) of a ``GisIndex``'s rows, built from the mapped columns when asked for
    (a list of a million dicts was ~1M objects and seconds of load in every worker)."""

    def __init__(self, table: mapped.Table) -> None:
        self.table = table

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, row):  # type: ignore[override]
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(len(self)))]
        row = int(row)
        if row < 0:
            row += len(self)
        if not 0 <= row < len(self):
            raise IndexError(row)
        return row_to_entity(self.table.row(row))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Every record in row order: up to ``LISTED_MAX`` entities built once and kept (callers that walk every
        entity, ``livemem.answer.graph``, then cost what they did with a list); above it built as they go."""
        if len(self) > LISTED_MAX:
            return (self[i] for i in range(len(self)))
        return iter(self._listed)

    @cached_property
    def _listed(self) -> list[dict[str, Any]]:
        return [self[i] for i in range(len(self))]


class Ids(Sequence):
    """Entity ids by row (``gis/ids.json``'s order), read from the mapped ``entity_id`` column."""

    def __init__(self, table: mapped.Table) -> None:
        codes, offsets, blob = (
            table.codes("entity_id"),
            table.arrays["entity_id.offsets"],
            table.arrays["entity_id.bytes"],
        )
        self._codes, self._offsets, self._blob = codes, offsets, blob

    def __len__(self) -> int:
        return int(self._codes.size)

    def __getitem__(self, row):  # type: ignore[override]
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(len(self)))]
        code = int(self._codes[int(row)])
        return self._blob[int(self._offsets[code]) : int(self._offsets[code + 1])].tobytes().decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(len(self)))


class RowOf(Mapping):
    """entity id -> row: a binary search over the rows sorted by id (``id_order``), no dict of a million keys."""

    def __init__(self, ids: Ids, order: np.ndarray) -> None:
        self.ids, self.order = ids, order

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[str]:
        return (self.ids[int(r)] for r in self.order)

    def __getitem__(self, entity_id: str) -> int:
        if not isinstance(entity_id, str):
            raise KeyError(entity_id)
        lo, hi = 0, int(self.order.size)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.ids[int(self.order[mid])] < entity_id:
                lo = mid + 1
            else:
                hi = mid
        if lo < self.order.size and self.ids[int(self.order[lo])] == entity_id:
            return int(self.order[lo])
        raise KeyError(entity_id)


class Relations(Mapping):
    """subject entity id -> its relations (dicts as ``read_relations`` gives them, provenance parsed), read from the
    mapped columns: the relations of row r are ``starts[r]:starts[r + 1]``."""

    def __init__(self, row_of: RowOf, table: mapped.Table, starts: np.ndarray, orphans: dict[str, list]) -> None:
        self.row_of, self.table, self.starts, self.orphans = row_of, table, starts, orphans

    def _of_row(self, subject: str, row: int) -> list[dict[str, Any]]:
        out = []
        for i in range(int(self.starts[row]), int(self.starts[row + 1])):
            rel = self.table.row(i)
            out.append({"subject": subject, **rel, "provenance": json.loads(rel["provenance"])})
        return out

    def __getitem__(self, subject: str) -> list[dict[str, Any]]:
        if subject in self.orphans:
            return self.orphans[subject]
        row = self.row_of.get(subject)
        if row is None or self.starts[row] == self.starts[row + 1]:
            raise KeyError(subject)
        return self._of_row(subject, row)

    def __len__(self) -> int:
        return int(np.count_nonzero(np.diff(self.starts))) + len(self.orphans)

    def __iter__(self) -> Iterator[str]:
        rows = np.flatnonzero(np.diff(self.starts))
        yield from (self.row_of.ids[int(r)] for r in rows)
        yield from self.orphans


@dataclass
class GisIndex:
    """The entities of one version, in the order of ``gis/ids.json``, over the mapped columns of its GIS serving
    copy: ``entities[row]`` an entity record, ``relations.get(entity_id)`` its relations, ``row_of`` /
    ``ids`` between ids and rows, ``dense`` the float32 vectors, ``vectors`` the same for the exact top-k."""

    path: Path
    table: mapped.Table
    dense: np.ndarray
    vectors: DenseRows
    lon: np.ndarray
    lat: np.ndarray
    lon_order: np.ndarray  # rows with a longitude, by longitude (the bbox / radius prefilter) ...
    lon_sorted: np.ndarray  # ... and their longitudes
    lat_by_lon: np.ndarray  # ... and their latitudes (the prefilter reads contiguous columns, gathers no row)
    relations: Relations
    guard: mapped.Guard | None = None  # the mapping of the copy (None: held in this process's memory)
    int8: Int8Codes | None = None  # the vectors' int8 codes (``quantize_int8``), when the copy holds them ...
    int8_grid: Int8Codes | None = None  # ... the same in the spatial order: position p holds row grid_rows[p] ...
    grid_rows: np.ndarray | None = None  # ... (``grid_order``)
    grid_pos: np.ndarray | None = None  # ... and the position of each row
    _access_masks: dict = field(default_factory=dict, repr=False)
    # what is derived from the columns once per index and kept with it (``derived``: the answer layer's label index)
    _derived: dict = field(default_factory=dict, repr=False)
    _derived_lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @cached_property
    def ids(self) -> Ids:
        return self.relations.row_of.ids

    @property
    def row_of(self) -> RowOf:
        return self.relations.row_of

    @cached_property
    def entities(self) -> Entities:
        return Entities(self.table)

    @cached_property
    def access(self) -> np.ndarray:
        """Each row's access level (an object array over the few distinct values)."""
        return self.table.column("access")

    @cached_property
    def dataset(self) -> np.ndarray:
        return self.table.column("dataset")

    @cached_property
    def county(self) -> np.ndarray:
        """Each row's county key (``tidy_county_key``; None: none known)."""
        keys = np.array([tidy_county_key(v) if v is not None else None for v in self.table.dictionary("county")],
                        dtype=object)  # fmt: skip
        return keys[np.asarray(self.table.codes("county"))]

    @property
    def size(self) -> int:
        return len(self.table)

    def intact(self) -> bool:
        """Whether the mapped copy is still the file it was checked as (``mapped.Guard``)."""
        return self.guard is None or self.guard.intact()

    def _codes_matching(self, column: str, wanted) -> np.ndarray:
        """Rows whose ``column`` value passes ``wanted`` (a predicate over the column's distinct values)."""
        dictionary = self.table.dictionary(column)[:-1]  # without the trailing None of NULL
        codes = [i for i, value in enumerate(dictionary) if wanted(value)]
        if not codes:
            return np.zeros(self.size, dtype=bool)
        column_codes = np.asarray(self.table.codes(column))
        if len(codes) == 1:
            return column_codes == codes[0]
        return np.isin(column_codes, np.array(codes, dtype=np.int32))

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
        distance; ``counties`` match case-insensitively and with or without the word County. A bbox or radius looks
        only at the rows within its longitudes (``lon_order``), not at every row.
        """
        keep = None
        if bbox is not None or near is not None:
            keep = self._spatial(bbox, near)
        if datasets:
            chosen = set(datasets)
            found = self._codes_matching("dataset", lambda v: v in chosen)
            keep = found if keep is None else keep & found
        if counties:
            keys = {k for k in (tidy_county_key(c) for c in counties) if k}
            found = self._codes_matching("county", lambda v: tidy_county_key(v) in keys)
            keep = found if keep is None else keep & found
        allowed = self.access_mask(access)
        return allowed.copy() if keep is None else keep & allowed

    def _spatial(
        self, bbox: tuple[float, float, float, float] | None, near: tuple[float, float, float] | None
    ) -> np.ndarray:
        """The rows inside ``bbox`` and within ``near``'s radius: the rows between the longitudes that can qualify
        (a binary search in ``lon_order``), then each condition on those rows only."""
        lo_lon, hi_lon = -math.inf, math.inf
        if bbox is not None:
            lo_lon, hi_lon = max(lo_lon, bbox[0]), min(hi_lon, bbox[2])
        if near is not None:
            lat0, lon0, radius_km = near
            reach = _lon_reach(lat0, radius_km)
            if reach is not None and lon0 - reach >= -180 and lon0 + reach <= 180:  # not across the antimeridian
                lo_lon, hi_lon = max(lo_lon, lon0 - reach), min(hi_lon, lon0 + reach)
        keep = np.zeros(self.size, dtype=bool)
        if not lo_lon <= hi_lon or (bbox is not None and any(math.isnan(v) for v in bbox)):  # NaN bounds: nothing
            return keep
        first = int(np.searchsorted(self.lon_sorted, lo_lon, side="left"))
        last = int(np.searchsorted(self.lon_sorted, hi_lon, side="right"))
        # the slice holds exactly the rows with lo_lon <= lon <= hi_lon (NaN longitudes are not in lon_order): within
        # it, the conditions on latitude and distance, over contiguous columns (no gather of every row of the slice)
        lat = self.lat_by_lon[first:last]
        lo_lat, hi_lat = -math.inf, math.inf
        if bbox is not None:
            lo_lat, hi_lat = bbox[1], bbox[3]
        if near is not None:  # a point farther in latitude than the radius is farther on the sphere too
            reach = math.degrees(near[2] / EARTH_RADIUS_KM) * (1 + 1e-9) + 1e-9  # a hair wider, as _lon_reach
            lo_lat, hi_lat = max(lo_lat, near[0] - reach), min(hi_lat, near[0] + reach)
        where = np.flatnonzero((lat >= lo_lat) & (lat <= hi_lat))  # a NaN latitude is never inside
        if near is not None and where.size:
            lat0, lon0, radius_km = near
            lon = self.lon_sorted[first:last][where]
            where = where[haversine_km(lat[where], lon, lat0, lon0) <= radius_km]
        keep[self.lon_order[first:last][where]] = True
        return keep

    def access_mask(self, access: frozenset[str]) -> np.ndarray:
        """Entities readable with these access levels, computed once per set (a role's mask on every query)."""
        cache = self._access_masks
        if access not in cache:
            cache[access] = self._codes_matching("access", lambda v: v in access)
        return cache[access]

    def datasets(self, access: frozenset[str]) -> list[str]:
        """The datasets (sorted; a NULL one as "None") of the entities readable with these access levels: the
        dataset codes of the access mask counted, once per set of levels (not every row's dataset per request)."""
        return self.derived(("datasets", access), lambda: self._datasets(access))

    def _datasets(self, access: frozenset[str]) -> list[str]:
        codes = np.asarray(self.table.codes("dataset"))[self.access_mask(access)]
        present = np.flatnonzero(np.bincount(codes.astype(np.int64) + 1, minlength=1)) - 1  # -1: NULL
        dictionary = self.table.dictionary("dataset")  # its last value, None, is the NULL code's
        return sorted({str(dictionary[int(c)]) for c in present})

    def town_mask(self, towns: Iterable[str]) -> np.ndarray:
        """Which entities name one of ``towns`` as their ``attributes.city`` (compared lower-cased): a code per row
        for its city, built once per index from the distinct attribute values, then a mask on those codes."""
        codes, cities = self.derived("cities", self._cities)
        wanted = [cities[t] for t in {str(t).lower() for t in towns} if t in cities]
        if not wanted:
            return np.zeros(self.size, dtype=bool)
        return np.isin(codes, np.array(wanted, dtype=np.int32))

    def _cities(self) -> tuple[np.ndarray, dict[str, int]]:
        """Each row's city code (-1: none) and the code of each city (lower-cased ``str`` of ``attributes.city``)."""
        offsets = np.asarray(self.table.arrays["attributes.offsets"])
        raw = np.ascontiguousarray(self.table.arrays["attributes.bytes"], dtype=np.uint8)
        blob = memoryview(raw)  # type: ignore[arg-type]  # numpy's stubs: ndarray __buffer__ only on Python >= 3.12
        cities: dict[str, int] = {}
        per_value = np.full(offsets.size, -1, dtype=np.int32)  # per distinct attributes value, then NULL's (-1)
        # only the values that spell "city" are parsed (one search of the whole column, not one per value)
        at = np.fromiter((m.start() for m in re.finditer(rb'"city"', blob)), dtype=np.int64)
        values = np.searchsorted(offsets, at, side="right") - 1  # nondecreasing
        for i in values[np.concatenate([[True], values[1:] != values[:-1]])].tolist() if values.size else ():
            value = json.loads(blob[int(offsets[i]) : int(offsets[i + 1])].tobytes())
            if isinstance(value, dict) and "city" in value:
                per_value[i] = cities.setdefault(str(value["city"]).lower(), len(cities))
        return per_value[np.asarray(self.table.codes("attributes"))], cities

    def derived(self, key: Any, build: Callable[[], Any]) -> Any:
        """``build()`` once per index and key, kept with the index (dropped with it): structures derived from the
        columns that requests read (a label index, the cities, the datasets per access set)."""
        found = self._derived.get(key, _MISSING)
        if found is _MISSING:
            with self._derived_lock:
                found = self._derived.get(key, _MISSING)
                if found is _MISSING:
                    found = self._derived[key] = build()
        return found

    def distances_km(self, rows: np.ndarray, lat0: float, lon0: float) -> np.ndarray:
        return haversine_km(self.lat[rows], self.lon[rows], lat0, lon0)


_MISSING = object()


def _lon_reach(lat0: float, radius_km: float) -> float | None:
    """Degrees of longitude within which every point at most ``radius_km`` from (lat0, ·) lies; None: any longitude
    (the circle reaches a pole, or wraps around)."""
    ratio = radius_km / EARTH_RADIUS_KM
    if not math.isfinite(ratio) or ratio >= math.pi / 2 or abs(lat0) + math.degrees(ratio) >= 90:
        return None
    sin_reach = math.sin(ratio) / math.cos(math.radians(lat0))
    if sin_reach >= 1:
        return None
    return math.degrees(math.asin(sin_reach)) * (1 + 1e-9) + 1e-9  # a hair wider: never drops a point on the edge


def grid_order(lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """Every row in the spatial order of the copy's second int8 codes: by cell of ``GRID_CELL_DEG`` of longitude,
    then latitude, then row; rows without a position last."""
    known = np.isfinite(lon) & np.isfinite(lat)
    cell = np.where(known, np.floor(np.where(known, lon, 0.0) / GRID_CELL_DEG), np.inf)
    return np.lexsort((np.arange(lon.size), np.where(known, lat, np.inf), cell)).astype(np.int64)


def copy_name(version_dir: Path) -> str:
    """The GIS serving copy's name: a hash of what it is read from (the recorded hashes of ``gis/ids.json``,
    ``gis/dense.npy`` and ``tables.duckdb``'s export, i.e. the manifest's ``gbim`` section); versions without
    recorded files are named by their files' sizes and times."""
    try:
        manifest = json.loads((version_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = {}
    files = manifest.get("files") if isinstance(manifest, dict) else None
    gbim = manifest.get("gbim") if isinstance(manifest, dict) else None
    if isinstance(files, dict) and f"{GIS}/ids.json" in files and f"{GIS}/dense.npy" in files:
        basis: Any = [files[f"{GIS}/ids.json"], files[f"{GIS}/dense.npy"], gbim if isinstance(gbim, dict) else None]
        if not isinstance(gbim, dict):
            basis.append(files.get("tables.duckdb"))
    else:
        basis = [str(version_dir.resolve())] + [
            [(s := (version_dir / name).stat()).st_size, s.st_mtime_ns]
            for name in (f"{GIS}/ids.json", f"{GIS}/dense.npy", "tables.duckdb")
        ]
    digest = hashlib.sha256(json.dumps([GIS_COPY_FORMAT, basis], sort_keys=True, default=str).encode()).hexdigest()
    return f"gis-{digest[:32]}"


def _read_arrays(version_dir: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays and metadata of a GIS serving copy, read from the version's files (raises OSError, ValueError or
    duckdb.Error when they cannot be read or disagree)."""
    import pandas as pd

    gis = version_dir / GIS
    ids = json.loads((gis / "ids.json").read_text(encoding="utf-8"))
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ValueError("gis/ids.json is not a list of entity ids")
    dense = np.ascontiguousarray(np.load(gis / "dense.npy"), dtype=np.float32)
    if dense.ndim != 2 or dense.shape[0] != len(ids):
        raise ValueError(f"gis/dense.npy has shape {dense.shape} but gis/ids.json lists {len(ids)} entities")
    con = connect(version_dir)
    try:
        entities = con.execute(f"SELECT {', '.join(ENTITY_COLUMNS)} FROM {ENTITY_TABLE}").df()
        relations = con.execute(
            f"SELECT {', '.join(RELATION_COLUMNS)} FROM {RELATION_TABLE} ORDER BY subject, predicate, object"
        ).df()
    finally:
        con.close()
    index = pd.Index(ids)
    if not index.is_unique:
        raise ValueError("gis/ids.json lists an entity id twice")
    where = pd.Index(entities["entity_id"]).get_indexer(index)
    if len(entities) != len(ids) or (where < 0).any():
        raise ValueError(f"gis/ids.json lists {len(ids)} entities, {ENTITY_TABLE} holds {len(entities)}")
    entities = entities.iloc[where].reset_index(drop=True)
    for name in FLAG_COLUMNS:
        entities[name] = entities[name].astype(bool).astype(np.int64)
    arrays = {f"e.{k}": v for k, v in mapped.encode_frame(entities, ENTITY_KINDS).items()}
    lon = entities["lon"].to_numpy(dtype=np.float64, na_value=np.nan)
    lat = entities["lat"].to_numpy(dtype=np.float64, na_value=np.nan)
    arrays["lon"], arrays["lat"] = lon, lat
    arrays["lon_order"] = np.argsort(lon, kind="stable")[: int(np.count_nonzero(~np.isnan(lon)))].astype(np.int64)
    arrays["lon_sorted"] = lon[arrays["lon_order"]]
    arrays["lat_by_lon"] = lat[arrays["lon_order"]]
    arrays["id_order"] = np.argsort(np.array(ids, dtype=object), kind="stable").astype(np.int64)
    subject_row = index.get_indexer(relations["subject"])
    orphan = subject_row < 0
    orphans: dict[str, list] = {}
    for rec in relations[orphan].to_dict("records"):
        orphans.setdefault(rec["subject"], []).append({**rec, "provenance": json.loads(rec["provenance"])})
    grouped = relations[~orphan]
    rows = subject_row[~orphan]
    order = np.argsort(rows, kind="stable")
    grouped = grouped.iloc[order].reset_index(drop=True)
    arrays["rel.starts"] = np.searchsorted(rows[order], np.arange(len(ids) + 1), side="left").astype(np.int64)
    arrays.update({f"r.{k}": v for k, v in mapped.encode_frame(grouped, RELATION_KINDS).items()})
    arrays["dense"] = dense
    meta: dict[str, Any] = {"gis_format": GIS_COPY_FORMAT, "entities": len(ids), "relations": len(grouped),
                            "orphan_relations": orphans, "dense_max_norm": max_row_norm(dense)}  # fmt: skip
    if meta["dense_max_norm"] < INT8_MAX_NORM:  # the int8 codes of the exact two-stage top-k (livemem.index.scan)
        row_error = cast(np.ndarray, (codes := quantize_int8(dense)).row_error)  # quantize_int8 always gives it
        arrays.update({"dense.i8": codes.codes, "dense.i8scale": codes.scales, "dense.i8error": row_error})
        rows = grid_order(lon, lat)
        arrays.update({"grid.rows": rows, "grid.pos": np.argsort(rows, kind="stable").astype(np.int64),
                       "grid.i8": codes.codes[rows], "grid.i8scale": codes.scales[rows],
                       "grid.i8error": row_error[rows]})  # fmt: skip
        meta.update(dense_i8_error=codes.error, dense_i8_max_hat=codes.max_hat)
    return arrays, meta


def _index(
    version_dir: Path, arrays: Mapping[str, np.ndarray], meta: dict[str, Any], engine: EngineConfig | None = None
) -> GisIndex:
    size = int(meta["entities"])
    table = mapped.Table({k[2:]: v for k, v in arrays.items() if k.startswith("e.")}, ENTITY_KINDS, size)
    dense = arrays["dense"]
    if dense.shape[0] != size or table.codes("entity_id").size != size or arrays["rel.starts"].size != size + 1:
        raise ValueError(f"the GIS copy holds {size} entities, {dense.shape[0]} vectors")
    codes = grid = None
    if "dense.i8" in arrays:
        codes = Int8Codes(arrays["dense.i8"], arrays["dense.i8scale"], float(meta["dense_i8_error"]),
                          float(meta["dense_i8_max_hat"]), arrays["dense.i8error"])  # fmt: skip
        grid = Int8Codes(arrays["grid.i8"], arrays["grid.i8scale"], codes.error, codes.max_hat, arrays["grid.i8error"])
        share_int8(dense, codes, float(meta["dense_max_norm"]))
    rel_size = int(arrays["rel.starts"][-1]) if size else 0
    relations_table = mapped.Table({k[2:]: v for k, v in arrays.items() if k.startswith("r.")}, RELATION_KINDS,
                                   rel_size)  # fmt: skip
    ids = Ids(table)
    row_of = RowOf(ids, arrays["id_order"])
    graph = _graph(version_dir, size)
    return GisIndex(
        path=version_dir,
        table=table,
        dense=dense,
        vectors=DenseRows(
            [(dense, np.arange(size, dtype=np.int64))], int(dense.shape[1]), graphs=[graph], config=engine
        ),
        lon=arrays["lon"],
        lat=arrays["lat"],
        lon_order=arrays["lon_order"],
        lon_sorted=arrays["lon_sorted"],
        lat_by_lon=arrays["lat_by_lon"],
        relations=Relations(row_of, relations_table, arrays["rel.starts"], meta.get("orphan_relations") or {}),
        guard=meta.get("guard"),
        int8=codes,
        int8_grid=grid,
        grid_rows=arrays.get("grid.rows"),
        grid_pos=arrays.get("grid.pos"),
    )


def _graph(version_dir: Path, size: int) -> Any:
    """The entities' approximate-search graph (``gis/ann.usearch``, written by exports of at least
    ``LIVEMEM_ANN_MIN_ROWS`` entities), mapped; None when there is none, or it does not match what ``graph.json``
    records (then logged, and every query is answered by the exact scan)."""
    recorded = version_dir / GIS / GIS_GRAPH_META
    if not recorded.is_file():
        return None
    from livemem.index.ann import GRAPH_FILE, open_recorded

    what = f"the GIS part of {version_dir.name}"
    try:
        meta = json.loads(recorded.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("graph of %s not used (%s): searched exactly", what, exc)
        return None
    if not isinstance(meta, dict) or meta.get("rows") != size:
        rows = meta.get("rows") if isinstance(meta, dict) else meta
        log.warning("graph of %s not used (%s records %s rows, the version has %d entities): searched exactly",
                    what, GIS_GRAPH_META, rows, size)  # fmt: skip
        return None
    return open_recorded(version_dir / GIS / GRAPH_FILE, meta, what)


def load_gis_index(version_dir: Path, engine: EngineConfig | None = None) -> GisIndex | None:
    """The GIS part of a version directory, mapped from its GIS serving copy (written first, from the version's
    files, when this machine has none yet; held in this process's memory when no copy can be written); None when
    the version holds no GBIM export. ``engine``: the caller's ``EngineConfig`` (where the copy is, how its vectors
    are scanned; None: ``EngineConfig.defaults()``).

    Raises LivingMemoryError when the export is there but cannot be read (ids and tables disagree, ...).
    """
    version_dir = Path(version_dir)
    gis = version_dir / GIS
    if not (gis / "ids.json").is_file():
        return None
    try:
        engine = engine if engine is not None else EngineConfig.defaults()
        root = mapped.cache_root(parts_dir(version_dir), engine.serving_cache)
        name = copy_name(version_dir)
        found = mapped.open_copy(root, name)
        if found is None:
            arrays, meta = _read_arrays(version_dir)
            if mapped.writable(root):
                mapped.write_copy(root, name, arrays, meta)
                found = mapped.open_copy(root, name)
                prune_copies(version_dir, engine.serving_cache)
            if found is None:
                return _index(version_dir, arrays, meta, engine)
            del arrays
        meta, arrays = found
        return _index(version_dir, arrays, meta, engine)
    except (OSError, ValueError, KeyError, duckdb.Error) as exc:
        raise LivingMemoryError(
            f"the GIS part of index version {version_dir.name} cannot be read ({type(exc).__name__}: {exc}); "
            "run the `export_gbim` job to publish a new version"
        ) from exc


def prune_copies(version_dir: Path, serving_cache: Path | None = None) -> list[str]:
    """Remove the GIS serving copies (under ``serving_cache``: ``EngineConfig.serving_cache``) of the home of
    ``version_dir`` that no version of it (published or staged) reads any more (``livemem.version.mapped.prune``
    removes the segments' copies, by segment); run when a copy is written. A worker still mapping a removed copy
    keeps its pages."""
    home = Path(version_dir).resolve().parent.parent
    root = mapped.cache_root(parts_dir(version_dir), serving_cache)
    wanted = set()
    for folder in ("versions", "staging"):
        for directory in (home / folder).glob("*") if (home / folder).is_dir() else ():
            if (directory / GIS / "ids.json").is_file():
                try:
                    wanted.add(copy_name(directory))
                except OSError:  # removed meanwhile
                    continue
    removed = [p.name for p in root.glob("gis-*") if p.name not in wanted]
    mapped.remove(root, removed)
    return removed


CACHED_VERSIONS = 4
# (version directory, engine config) -> its GIS index (None: the version has none)
_CACHE: LRUCache[tuple[str, EngineConfig], GisIndex | None] = LRUCache(maxsize=CACHED_VERSIONS)
_CACHE_LOCK = threading.Lock()  # also serialises loading: two requests for a version load it once


def cached_gis_index(version_dir: str, engine: EngineConfig | None = None) -> GisIndex | None:
    """``load_gis_index`` once per (immutable) version directory, engine config (the snapshot's, ``Snapshot.engine``;
    None: ``EngineConfig.defaults()``) and process, shared by every caller (the last ``CACHED_VERSIONS`` versions
    used). A copy found changed under its mapping (``GisIndex.intact``) is dropped, removed and written again before
    this caller reads from it (a truncated mapped file would end the process)."""
    engine = engine if engine is not None else EngineConfig.defaults()
    key = (str(version_dir), engine)
    with _CACHE_LOCK:
        if key in _CACHE:
            found = _CACHE[key]  # a hit makes it the most recently used
            if found is None or found.intact():
                return found
            del _CACHE[key]
            if found.guard is not None:
                root = mapped.cache_root(parts_dir(Path(key[0])), engine.serving_cache)
                mapped.discard(root, copy_name(Path(key[0])), found.guard)
        loaded = _CACHE[key] = load_gis_index(Path(key[0]), engine)
        return loaded


def _cache_clear() -> None:
    with _CACHE_LOCK:
        _CACHE.clear()


cached_gis_index.cache_clear = _cache_clear  # type: ignore[attr-defined]  # as functools.lru_cache offered
