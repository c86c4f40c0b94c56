"""GBIM export: spatial features → entities (centroid, EPSG:4326 position, county) + relations → an index version.

Each feature of a configured spatial source (GeoJSON, GeoPackage, Shapefile or a PostGIS table / query) becomes
one entity (``schemas/gbim_entity.schema.json``):

- geometry: null or empty geometries are quarantined with a reason; invalid ones are repaired with shapely's
  ``make_valid`` (flagged ``geometry_repaired``) or quarantined when nothing valid is left;
- centroid in the working projected CRS (default EPSG:26917, NAD83 / UTM 17N): the geometry is reprojected there
  first when its source CRS differs, so ``centroid_x`` / ``centroid_y`` are metres and ``srid`` the EPSG code;
- ``lon`` / ``lat``: the centroid reprojected to EPSG:4326 with pyproj (``always_xy``);
- county: the feature's own county attribute, else the county polygon (configured boundary source) holding the
  centroid; when both exist and disagree the entity is flagged ``county_disagreement``;
- ``outside_region``: the centroid lies farther than ``region.tolerance_km`` outside the configured bbox.

Relations (subject, predicate, object, provenance): ``part_of`` its worldview, ``located_in`` its county,
``serves_zip`` each ZIP code of its zip attribute, and where the data carries them (``linked_relations``):
``serves_program`` (a ``programs`` attribute), ``operated_by`` (an ``operator`` attribute) and ``near`` (another
entity of the same access level within ``NEAR_KM``, nearest first); exported as the ``gbim_relations`` table and
as N-Triples / Turtle (rdflib) in ``gbim/``. Descriptions are embedded through the shared embedding cache into the GIS Chroma
collections and the ``gis/`` snapshot serving reads.

``export_gbim`` stages a new version derived from the current one (``store.derive_version``) and writes only
these parts; publishing is a separate step, after the checks.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import string
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from livemem.checks import MAX_REPORTED, CheckOutcome
from livemem.config import SourcesConfig
from livemem.duck import registered
from livemem.embed_cache import EmbeddingCache
from livemem.embedding import Embedder
from livemem.errors import ConfigError, SourceError
from livemem.geo.names import tidy_county, tidy_county_key
from livemem.gis_index import (
    ENTITY_COLUMNS,
    ENTITY_TABLE,
    FLAG_COLUMNS,
    GIS,
    RELATION_COLUMNS,
    RELATION_TABLE,
    has_gbim_tables,
    haversine_km,
    read_entities,
)
from livemem.schemas import errors_for
from livemem.store import (
    CHROMA,
    IndexHome,
    derive_version,
    iso,
    utc_now,
    write_manifest,
)
from livemem.vectors import delete, open_vectors, upsert
from livemem.version import connect

log = logging.getLogger(__name__)

# Bump when the export's output changes (forces a new export); v2: gbim/counties.geojson; v3: linked_relations.
EXPORT_VERSION = "gbim-v3"
WGS84 = "EPSG:4326"
DEFAULT_WORKING_CRS = "EPSG:26917"
DEFAULT_COLLECTION = "gbim_spatial"
DEFAULT_TOLERANCE_KM = 25.0
GBIM_DIR = "gbim"
COUNTIES_FILE = f"{GBIM_DIR}/counties.geojson"  # the county polygons the export used, served by the glassbox page
COUNTIES_MAX_BYTES = 512 * 1024  # larger boundaries are simplified: a browser draws them on every page
COUNTIES_TOLERANCE_DEG = 0.002  # ~200 m, under a pixel on a state-wide map of a few hundred pixels
GBIM_IRI = "https://living-memory.example.org/gbim/"
ENTITY_NAMESPACE = uuid.UUID("5b0c8f1e-6a57-4c1b-9c1e-3f2d7a9e4b21")
ZIP_FIELDS = ("zip", "zips", "zip_code", "zipcode")
SHAPEFILE_PARTS = (".shp", ".shx", ".dbf", ".prj", ".cpg")
PREVIEW_FEATURES = 500

ENTITY_SQL = f"""
CREATE TABLE {ENTITY_TABLE} (
    entity_id VARCHAR PRIMARY KEY, source VARCHAR NOT NULL, worldview_id VARCHAR NOT NULL, dataset VARCHAR NOT NULL,
    county VARCHAR, gbim_entity VARCHAR NOT NULL, label VARCHAR NOT NULL, description VARCHAR NOT NULL,
    centroid_x DOUBLE, centroid_y DOUBLE, srid INTEGER NOT NULL, lon DOUBLE, lat DOUBLE,
    source_table VARCHAR NOT NULL, source_pk VARCHAR NOT NULL, attributes VARCHAR NOT NULL, access VARCHAR NOT NULL,
    collection VARCHAR NOT NULL, geometry_type VARCHAR NOT NULL, county_source VARCHAR, county_spatial VARCHAR,
    geometry_repaired BOOLEAN NOT NULL, outside_region BOOLEAN NOT NULL, county_disagreement BOOLEAN NOT NULL
);
CREATE TABLE {RELATION_TABLE} (
    subject VARCHAR NOT NULL, predicate VARCHAR NOT NULL, object VARCHAR NOT NULL, object_kind VARCHAR NOT NULL,
    provenance VARCHAR NOT NULL
);
"""


# --- configuration ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Region:
    bbox: tuple[float, float, float, float]
    tolerance_km: float = DEFAULT_TOLERANCE_KM
    name: str = ""


@dataclass(frozen=True)
class CountyBoundaries:
    path: Path
    name_field: str
    crs: str | None = None
    layer: str | None = None


@dataclass(frozen=True)
class SpatialSource:
    """One configured spatial source: where its features are, their CRS, and how they become entities."""

    name: str
    dataset: str
    worldview_id: str
    gbim_entity: str
    id_field: str
    crs: str
    collection: str
    access: str = "public"
    path: Path | None = None
    layer: str | None = None
    postgis: dict[str, Any] | None = None
    label_field: str | None = None
    label_template: str | None = None
    description_field: str | None = None
    description_template: str | None = None
    county_field: str | None = None
    zip_field: str | None = None

    @property
    def source_table(self) -> str:
        if self.path is not None:
            return f"{self.path.name}#{self.layer}" if self.layer else self.path.name
        if self.postgis is None:  # built in code rather than configured (tests, benchmarks)
            return self.name
        return self.postgis.get("table") or "query:" + hashlib.sha256(self.postgis["query"].encode()).hexdigest()[:12]


@dataclass(frozen=True)
class SpatialConfig:
    sources: tuple[SpatialSource, ...]
    working_crs: str = DEFAULT_WORKING_CRS
    collection: str = DEFAULT_COLLECTION
    region: Region | None = None
    counties: CountyBoundaries | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def collections(self) -> list[str]:
        """Every Chroma collection the export writes (the shared one and each source's own)."""
        return sorted({self.collection, *(s.collection for s in self.sources)})


def load_spatial(config: SourcesConfig) -> SpatialConfig | None:
    """The ``spatial:`` section of the sources file, validated and resolved; None when the file has none."""
    raw = config.section("spatial", "spatial_config")
    if raw is None:
        return None
    import pyproj

    base = config.path.parent
    default_crs = raw.get("crs")
    working_crs = raw.get("working_crs", DEFAULT_WORKING_CRS)
    collection = raw.get("collection", DEFAULT_COLLECTION)
    problems: list[str] = []

    def check_crs(value: str, where: str) -> None:
        try:
            pyproj.CRS.from_user_input(value)
        except pyproj.exceptions.CRSError as exc:
            problems.append(f"{where}: {value!r} is not a CRS pyproj knows ({exc})")

    check_crs(working_crs, "spatial.working_crs")
    if not problems and pyproj.CRS.from_user_input(working_crs).is_geographic:
        problems.append(f"spatial.working_crs: {working_crs} is geographic; centroids need a projected CRS")
    chunk_collections = {s.collection for s in config.sources}
    sources: list[SpatialSource] = []
    seen: set[str] = set()
    for i, item in enumerate(raw["sources"]):
        name = item["name"]
        where = f"spatial.sources[{i}] ({name!r})"
        if name in seen:
            problems.append(f"{where}: another spatial source has the name {name!r}")
        seen.add(name)
        for pair, required in (
            (("path", "postgis"), True),
            (("label_field", "label_template"), True),
            (("description_field", "description_template"), False),
        ):
            given = [key for key in pair if key in item]
            if len(given) > 1 or (required and not given):
                problems.append(f"{where}: give {'exactly' if required else 'at most'} one of {' or '.join(pair)}")
        crs = item.get("crs") or default_crs
        if not crs:
            problems.append(
                f"{where}: no crs: declare the CRS of its coordinates (e.g. crs: EPSG:26917) "
                "or set a default spatial.crs"
            )
            continue
        check_crs(crs, f"{where}.crs")
        worldview = item.get("worldview_id") or raw.get("worldview_id")
        if not worldview:
            problems.append(f"{where}: no worldview_id (set it on the source or as spatial.worldview_id)")
            continue
        own_collection = item.get("collection", collection)
        if own_collection in chunk_collections or collection in chunk_collections:
            problems.append(f"{where}: collection {own_collection!r} is already a chunk collection of a git source")
        path = None
        if "path" in item:
            path = Path(os.path.expanduser(item["path"]))
            path = path if path.is_absolute() else (base / path).resolve()
        sources.append(
            SpatialSource(
                name=name,
                dataset=item["dataset"],
                worldview_id=worldview,
                gbim_entity=item["gbim_entity"],
                id_field=item["id_field"],
                crs=crs,
                collection=own_collection,
                access=item.get("access", "public"),
                path=path,
                layer=item.get("layer"),
                postgis=item.get("postgis"),
                label_field=item.get("label_field"),
                label_template=item.get("label_template"),
                description_field=item.get("description_field"),
                description_template=item.get("description_template"),
                county_field=item.get("county_field"),
                zip_field=item.get("zip_field"),
            )
        )
    counties = None
    if "counties" in raw:
        c = raw["counties"]
        cpath = Path(os.path.expanduser(c["path"]))
        if c.get("crs"):
            check_crs(c["crs"], "spatial.counties.crs")
        counties = CountyBoundaries(
            cpath if cpath.is_absolute() else (base / cpath).resolve(), c["name_field"], c.get("crs"), c.get("layer")
        )
    region = None
    if "region" in raw:
        r = raw["region"]
        min_lon, min_lat, max_lon, max_lat = r["bbox"]
        if not (-180 <= min_lon <= max_lon <= 180 and -90 <= min_lat <= max_lat <= 90):
            problems.append("spatial.region.bbox: expected [min_lon, min_lat, max_lon, max_lat] in degrees")
        region = Region(
            (min_lon, min_lat, max_lon, max_lat), r.get("tolerance_km", DEFAULT_TOLERANCE_KM), r.get("name", "")
        )
    if problems:
        raise ConfigError(f"invalid spatial section in {config.path}:\n  " + "\n  ".join(problems))
    return SpatialConfig(tuple(sources), working_crs, collection, region, counties, raw)


# --- reading ---------------------------------------------------------------------------------------------------
def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    parts = [path.with_suffix(s) for s in SHAPEFILE_PARTS] if path.suffix.lower() == ".shp" else [path]
    for part in parts:
        if part.is_file():
            digest.update(part.name.encode() + b"\0")
            with open(part, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


def _frame_hash(frame) -> str:
    import shapely

    digest = hashlib.sha256(frame.drop(columns=frame.geometry.name).to_json(default_handler=str).encode())
    for wkb in shapely.to_wkb(frame.geometry.to_numpy()):
        digest.update(wkb or b"\0")
    return digest.hexdigest()


def read_features(source: SpatialSource, dsns: Mapping[str, str] | None = None):
    """The source's features as a GeoDataFrame in its declared CRS, and a hash of their content.

    The declared CRS wins over what the file says: a GeoJSON without a ``crs`` member reads as EPSG:4326 by
    RFC 7946, which would silently misplace projected coordinates.
    """
    import geopandas as gpd

    if source.path is not None:
        if not source.path.is_file():
            raise SourceError(f"spatial source {source.name!r}: file {source.path} does not exist")
        try:
            frame = gpd.read_file(source.path, layer=source.layer) if source.layer else gpd.read_file(source.path)
        except Exception as exc:  # pyogrio raises its own error types for unreadable files
            raise SourceError(f"spatial source {source.name!r}: cannot read {source.path}: {exc}") from exc
        content_hash = _file_hash(source.path)
    else:
        frame = _read_postgis(source, dsns)
        content_hash = _frame_hash(frame)
    file_crs = frame.crs
    frame = frame.set_crs(source.crs, allow_override=True)
    if file_crs is not None and not file_crs.equals(frame.crs):
        log.warning(
            "spatial source %r: declared crs %s overrides the file's %s", source.name, source.crs, file_crs.to_string()
        )
    return frame, content_hash


def _read_postgis(source: SpatialSource, dsns: Mapping[str, str] | None = None):
    """The rows of the configured table (ordered by the id field, so the content hash is stable) or query.

    The database URL is ``dsns[dsn_env]`` (the Dagster resource ``spatial_databases``), else the variable itself.
    A plain ``postgresql://`` (or ``postgres://``) URL is read through psycopg 3, the driver the project installs.
    """
    import geopandas as gpd
    import sqlalchemy

    spec = source.postgis or {}
    dsn = (dsns or {}).get(spec["dsn_env"]) or os.environ.get(spec["dsn_env"])
    if not dsn:
        raise SourceError(
            f"spatial source {source.name!r}: environment variable {spec['dsn_env']} (the database URL) is not set"
        )
    try:
        url = sqlalchemy.engine.make_url(dsn)
    except sqlalchemy.exc.ArgumentError as exc:
        raise SourceError(
            f"spatial source {source.name!r}: {spec['dsn_env']} is not a database URL "
            "(expected e.g. postgresql://user:password@host:5432/db)"
        ) from exc
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    if spec.get("query"):
        sql = spec["query"]
    else:
        sql = f'SELECT * FROM {spec["table"]} ORDER BY "{source.id_field.replace(chr(34), chr(34) * 2)}"'
    geom_col = spec.get("geometry_column", "geom")
    try:
        engine = sqlalchemy.create_engine(url)
    except (sqlalchemy.exc.SQLAlchemyError, ImportError) as exc:
        raise SourceError(
            f"spatial source {source.name!r}: cannot use the database URL in {spec['dsn_env']}: {exc}"
        ) from exc
    try:
        with engine.connect() as con:
            frame = gpd.read_postgis(sqlalchemy.text(sql), con, geom_col=geom_col)
    except sqlalchemy.exc.SQLAlchemyError as exc:
        raise SourceError(f"spatial source {source.name!r}: query failed: {exc}") from exc
    except ValueError as exc:  # geopandas: the geometry column is missing or not WKB
        raise SourceError(
            f"spatial source {source.name!r}: cannot read the rows as features (geometry_column {geom_col!r}): {exc}"
        ) from exc
    finally:
        engine.dispose()
    return frame


def read_counties(boundaries: CountyBoundaries):
    """County polygons in EPSG:4326 with a ``county`` column (the configured name field), and their hash."""
    import geopandas as gpd

    if not boundaries.path.is_file():
        raise SourceError(f"county boundaries {boundaries.path} do not exist")
    frame = (
        gpd.read_file(boundaries.path, layer=boundaries.layer) if boundaries.layer else gpd.read_file(boundaries.path)
    )
    if boundaries.name_field not in frame.columns:
        raise ConfigError(
            f"spatial.counties.name_field: {boundaries.name_field!r} is not a field of {boundaries.path} "
            f"(fields: {', '.join(c for c in frame.columns if c != frame.geometry.name)})"
        )
    if boundaries.crs:
        frame = frame.set_crs(boundaries.crs, allow_override=True)
    elif frame.crs is None:
        raise ConfigError(f"spatial.counties: {boundaries.path} declares no CRS; set spatial.counties.crs")
    frame = frame[frame.geometry.notna() & ~frame.geometry.is_empty].to_crs(WGS84)
    frame = frame.assign(county=frame[boundaries.name_field].astype(str), geometry=frame.geometry.make_valid())
    return frame[["county", "geometry"]].reset_index(drop=True), _file_hash(boundaries.path)


def county_of_points(lon: np.ndarray, lat: np.ndarray, counties) -> list[str | None]:
    """The name of the county polygon holding each EPSG:4326 point (None outside all, or for NaN points)."""
    import shapely

    out: list[str | None] = [None] * len(lon)
    if not len(counties):
        return out
    point_idx, poly_idx = counties.sindex.query(shapely.points(lon, lat), predicate="intersects")
    names = counties["county"].to_numpy()
    for p, c in zip(point_idx[::-1], poly_idx[::-1], strict=True):  # reversed: a point on a border takes the first
        out[p] = names[c]
    return out


# --- features → entities ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Quarantined:
    source: str
    source_pk: str | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "source_pk": self.source_pk, "reason": self.reason}


def entity_id(source: str, source_pk: str) -> str:
    """Stable across exports: the same feature of the same source keeps its id (and its traces)."""
    return str(uuid.uuid5(ENTITY_NAMESPACE, f"{source}\x00{source_pk}"))


def _json_value(value: Any) -> Any:
    """A property value as plain JSON (numpy scalars, NaN, timestamps, bytes)."""
    if value is None:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str | bool | int):
        return value
    if isinstance(value, list | tuple | np.ndarray):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _template_fields(template: str) -> set[str]:
    return {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(template) if name}


def zip_codes(value: Any) -> list[str]:
    """ZIP codes of a zip attribute: ``25901``, ``"25901-1234"``, ``"25901, 25840"`` or a list; 5 digits each."""
    if value is None:
        return []
    items = value if isinstance(value, list) else str(value).replace(";", ",").split(",")
    out = []
    for item in items:
        text = str(item).strip()
        if isinstance(item, int) or text.isdigit():
            text = text.zfill(5)
        digits = text.split("-")[0]
        if len(digits) == 5 and digits.isdigit() and digits not in out:
            out.append(digits)
    return out


def _field_text(attrs: dict[str, Any], field_name: str | None, template: str | None) -> str:
    if template:
        return " ".join(template.format_map({k: "" if v is None else v for k, v in attrs.items()}).split())
    value = attrs.get(field_name) if field_name else None
    return "" if value is None else str(value).strip()


def _distance_outside_km(lon: np.ndarray, lat: np.ndarray, bbox: tuple[float, float, float, float]) -> np.ndarray:
    """Great-circle distance from each point to the nearest point of the bbox (0 inside)."""
    min_lon, min_lat, max_lon, max_lat = bbox
    return haversine_km(lat, lon, np.clip(lat, min_lat, max_lat), np.clip(lon, min_lon, max_lon))


def features_to_entities(
    source: SpatialSource, frame, spatial: SpatialConfig, counties=None
) -> tuple[list[dict[str, Any]], list[Quarantined]]:
    """Entities (``schemas/gbim_entity.schema.json``) of one source's features, and the features quarantined."""
    import geopandas as gpd
    import pyproj
    import shapely
    from shapely.validation import explain_validity

    geometry_name = frame.geometry.name
    fields = [c for c in frame.columns if c != geometry_name]
    wanted = {source.id_field, source.label_field, source.description_field, source.county_field, source.zip_field}
    for template in (source.label_template, source.description_template):
        wanted |= _template_fields(template or "")
    missing = sorted(f for f in wanted - set(fields) if f)
    if missing:
        raise ConfigError(
            f"spatial source {source.name!r}: field(s) {missing} not found in {source.source_table} "
            f"(fields: {', '.join(fields)})"
        )
    county_field = source.county_field or ("county" if "county" in fields else None)
    zip_field = source.zip_field or next((f for f in ZIP_FIELDS if f in fields), None)
    attributes = [{k: _json_value(v) for k, v in row.items()} for row in frame[fields].to_dict("records")]
    geoms = frame.geometry.to_numpy().copy()  # repaired geometries replace their originals here, not in frame

    quarantined: list[Quarantined] = []
    keep: list[int] = []
    repaired: dict[int, str] = {}
    seen_pks: set[str] = set()
    for i, attrs in enumerate(attributes):
        raw_pk = attrs.get(source.id_field)
        pk = None if raw_pk is None or str(raw_pk).strip() == "" else str(raw_pk).strip()
        geom = geoms[i]
        if pk is None:
            quarantined.append(Quarantined(source.name, None, f"feature {i}: no value in id field {source.id_field!r}"))
        elif pk in seen_pks:
            quarantined.append(Quarantined(source.name, pk, f"duplicate id {pk!r} (the first feature is kept)"))
        elif geom is None:
            quarantined.append(Quarantined(source.name, pk, "null geometry"))
        elif geom.is_empty:
            quarantined.append(Quarantined(source.name, pk, f"empty geometry ({geom.geom_type} EMPTY)"))
        else:
            if not geom.is_valid:
                problem = explain_validity(geom)
                fixed = shapely.make_valid(geom)
                if fixed.is_empty or not fixed.is_valid:
                    quarantined.append(
                        Quarantined(source.name, pk, f"invalid geometry make_valid cannot repair: {problem}")
                    )
                    continue
                geoms[i] = fixed
                repaired[i] = problem
            seen_pks.add(pk)
            keep.append(i)
    if not keep:
        return [], quarantined

    kept = gpd.GeoSeries(geoms[keep], crs=frame.crs)
    working = pyproj.CRS.from_user_input(spatial.working_crs)
    projected = kept if kept.crs.equals(working) else kept.to_crs(working)
    with np.errstate(invalid="ignore"):  # a CRS that does not fit the data yields infinite coordinates
        centroids = shapely.centroid(projected.to_numpy())
    located = ~shapely.is_empty(centroids)
    cx, cy = np.full(len(keep), np.nan), np.full(len(keep), np.nan)
    cx[located], cy[located] = shapely.get_x(centroids[located]), shapely.get_y(centroids[located])
    to_wgs84 = pyproj.Transformer.from_crs(working, WGS84, always_xy=True)
    lon, lat = (np.asarray(a, dtype=np.float64) for a in to_wgs84.transform(cx, cy))
    srid = working.to_epsg() or 0

    spatial_county = county_of_points(lon, lat, counties) if counties is not None else [None] * len(keep)
    outside = np.zeros(len(keep), dtype=bool)
    if spatial.region is not None:
        with np.errstate(invalid="ignore"):
            outside = _distance_outside_km(lon, lat, spatial.region.bbox) > spatial.region.tolerance_km

    entities = []
    for j, i in enumerate(keep):
        attrs = attributes[i]
        pk = str(attrs[source.id_field]).strip()
        own = attrs.get(county_field) if county_field else None
        own = (tidy_county(str(own)) or None) if own is not None else None
        pip = spatial_county[j]
        label = _field_text(attrs, source.label_field, source.label_template) or f"{source.gbim_entity} {pk}"
        description = _field_text(attrs, source.description_field, source.description_template) or label
        entities.append(
            {
                "entity_id": entity_id(source.name, pk),
                "source": source.name,
                "worldview_id": source.worldview_id,
                "dataset": source.dataset,
                "county": own or pip,
                "gbim_entity": source.gbim_entity,
                "label": label,
                "description": description,
                "centroid_x": _finite(cx[j]),
                "centroid_y": _finite(cy[j]),
                "srid": srid,
                "lon": _finite(lon[j]),
                "lat": _finite(lat[j]),
                "source_table": source.source_table,
                "source_pk": pk,
                "attributes": attrs,
                "access": source.access,
                "collection": source.collection,
                "geometry_type": geoms[i].geom_type,
                "county_source": "attribute" if own else ("point_in_polygon" if pip else None),
                "county_spatial": pip,
                "flags": {
                    "geometry_repaired": i in repaired,
                    "outside_region": bool(outside[j]),
                    "county_disagreement": bool(own and pip and tidy_county_key(own) != tidy_county_key(pip)),
                },
                "_zip_codes": zip_codes(attrs.get(zip_field)) if zip_field else [],
                "_zip_field": zip_field,
                "_county_field": county_field,
                "_repair": repaired.get(i),
            }
        )
    return entities, quarantined


def _finite(value: float) -> float | None:
    """Non-finite coordinates (a CRS that does not fit the data) become None, which the schema check rejects."""
    value = float(value)
    return value if math.isfinite(value) else None


def entity_record(entity: dict[str, Any]) -> dict[str, Any]:
    """The schema record of an entity (without the export's working fields)."""
    return {k: v for k, v in entity.items() if not k.startswith("_")}


def relations_for(entity: dict[str, Any], counties: CountyBoundaries | None) -> list[dict[str, Any]]:
    """The relation triples of one entity, each with its provenance."""
    base = {"source": entity["source"], "source_table": entity["source_table"], "source_pk": entity["source_pk"]}
    out = [
        {
            "subject": entity["entity_id"],
            "predicate": "part_of",
            "object": entity["worldview_id"],
            "object_kind": "worldview",
            "provenance": {**base, "method": "configured worldview_id of the source"},
        }
    ]
    if entity["county"]:
        if entity["county_source"] == "attribute":
            how = {"method": "attribute", "field": entity["_county_field"]}
        else:
            how = {"method": "point_in_polygon", "boundaries": str(counties.path) if counties else None}
        out.append(
            {
                "subject": entity["entity_id"],
                "predicate": "located_in",
                "object": entity["county"],
                "object_kind": "county",
                "provenance": {**base, **how},
            }
        )
    for zip_code in entity["_zip_codes"]:
        out.append(
            {
                "subject": entity["entity_id"],
                "predicate": "serves_zip",
                "object": zip_code,
                "object_kind": "zip",
                "provenance": {**base, "method": "attribute", "field": entity["_zip_field"]},
            }
        )
    return out


NEAR_KM = 10.0  # two entities this close (great-circle distance between centroids) are ``near`` each other
NEAR_MAX = 5  # ``near`` relations per entity at most, nearest first (a dense town stays readable)
PROGRAM_FIELDS = ("programs", "program")
OPERATOR_FIELDS = ("operator", "operated_by")


def _listed(value: Any) -> list[str]:
    """A list attribute, or a ``;`` / ``,`` separated string, as clean distinct strings."""
    items = value if isinstance(value, list) else str(value or "").replace(";", ",").split(",")
    return list(dict.fromkeys(str(v).strip() for v in items if str(v).strip()))


def linked_relations(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Relations beyond an entity's own place fields, where the data carries them: ``serves_program`` (each item
    of a ``programs`` attribute; object_kind ``program``), ``operated_by`` (an ``operator`` attribute;
    ``organization``) and ``near`` (the ``NEAR_MAX`` nearest other entities of the same access level within
    ``NEAR_KM`` km of its centroid; object_kind ``entity``, the distance in the provenance)."""
    out: list[dict[str, Any]] = []
    for e in entities:
        base = {"source": e["source"], "source_table": e["source_table"], "source_pk": e["source_pk"]}
        attrs = e.get("attributes") or {}
        for predicate, fields, kind in (
            ("serves_program", PROGRAM_FIELDS, "program"),
            ("operated_by", OPERATOR_FIELDS, "organization"),
        ):
            name = next((f for f in fields if attrs.get(f)), None)
            for value in _listed(attrs.get(name)) if name else []:
                out.append(
                    {
                        "subject": e["entity_id"], "predicate": predicate, "object": value, "object_kind": kind,
                        "provenance": {**base, "method": "attribute", "field": name},
                    }
                )  # fmt: skip
    out.extend(_near_relations(entities))
    return out


def _near_relations(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from livemem.gis_index import haversine_km

    placed = [e for e in entities if e.get("lat") is not None and e.get("lon") is not None]
    if len(placed) < 2:
        return []
    lat = np.array([e["lat"] for e in placed], dtype=np.float64)
    lon = np.array([e["lon"] for e in placed], dtype=np.float64)
    # Candidates from a coarse box first (0.1° of latitude ≈ 11 km), so a large export is not all pairs.
    cell = np.floor(lat / (NEAR_KM / 111.0)).astype(np.int64)
    order = np.argsort(cell, kind="stable")
    sorted_cells = cell[order]
    out: list[dict[str, Any]] = []
    for i, e in enumerate(placed):
        lo = np.searchsorted(sorted_cells, cell[i] - 1, side="left")
        hi = np.searchsorted(sorted_cells, cell[i] + 1, side="right")
        others = order[lo:hi]
        others = others[others != i]
        if not others.size:
            continue
        distance = haversine_km(lat[others], lon[others], lat[i], lon[i])
        within = distance <= NEAR_KM
        others, distance = others[within], distance[within]
        base = {"source": e["source"], "source_table": e["source_table"], "source_pk": e["source_pk"]}
        kept = 0
        for j in np.lexsort((others, distance)):
            other = placed[int(others[j])]
            if other["access"] != e["access"]:
                continue  # a public entity's facts never name an internal one
            out.append(
                {
                    "subject": e["entity_id"], "predicate": "near", "object": other["entity_id"],
                    "object_kind": "entity",
                    "provenance": {**base, "method": "great-circle distance between centroids",
                                   "distance_km": round(float(distance[j]), 2), "within_km": NEAR_KM},
                }
            )  # fmt: skip
            kept += 1
            if kept == NEAR_MAX:
                break
    return out


def normalize_name(text: str) -> str:
    """A name as compared: case-folded, without a parenthetical remark, punctuation or repeated spaces."""
    text = re.sub(r"\([^)]*\)", " ", text.casefold())
    return " ".join(re.sub(r"[^\w\s]", " ", text).split())


def find_entities(entities: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Entities whose label matches ``name``: the exact label first, then labels starting with it, then labels
    holding every word of it; none when nothing matches."""
    wanted = normalize_name(name)
    if not wanted:
        return []
    words = set(wanted.split())
    ranked = []
    for e in entities:
        label = normalize_name(e["label"])
        if label == wanted:
            rank = 0
        elif label.startswith(wanted + " ") or wanted.startswith(label + " "):
            rank = 1
        elif words <= set(label.split()):
            rank = 2
        else:
            continue
        ranked.append((rank, e["label"], e))
    ranked.sort(key=lambda r: (r[0], r[1]))
    return [e for _, _, e in ranked]


# --- RDF -------------------------------------------------------------------------------------------------------
def node_iri(kind: str, value: str) -> str:
    from urllib.parse import quote

    return f"{GBIM_IRI}{kind}/{quote(value, safe='')}"


def rdf_graph(entities: list[dict[str, Any]], relations: list[dict[str, Any]], labels: dict[str, str] | None = None):
    """An rdflib graph of the entities (type, label, dataset, WGS 84 position) and their relations; ``labels``:
    the labels of other entities the relations name (an entity's own facts served alone)."""
    from rdflib import RDF, RDFS, XSD, Graph, Literal, Namespace, URIRef

    gbim = Namespace(GBIM_IRI)
    geo = Namespace("http://www.w3.org/2003/01/geo/wgs84_pos#")
    graph = Graph()
    graph.bind("gbim", gbim)
    graph.bind("geo", geo, replace=True)  # rdflib binds geo: to GeoSPARQL by default; here it is WGS 84
    for e in entities:
        subject = URIRef(node_iri("entity", e["entity_id"]))
        graph.add((subject, RDF.type, URIRef(node_iri("class", e["gbim_entity"]))))
        graph.add((subject, RDFS.label, Literal(e["label"])))
        graph.add((subject, gbim.description, Literal(e["description"])))
        graph.add((subject, gbim.dataset, Literal(e["dataset"])))
        if e["lat"] is not None and e["lon"] is not None:
            graph.add((subject, geo.lat, Literal(e["lat"], datatype=XSD.double)))
            graph.add((subject, geo.long, Literal(e["lon"], datatype=XSD.double)))
    for r in relations:
        target = URIRef(node_iri(r["object_kind"], r["object"]))
        graph.add((URIRef(node_iri("entity", r["subject"])), gbim[r["predicate"]], target))
        if r["object_kind"] != "entity":  # an entity has its own label
            graph.add((target, RDFS.label, Literal(r["object"])))
        elif labels and r["object"] in labels:
            graph.add((target, RDFS.label, Literal(labels[r["object"]])))
    return graph


# Media types the facts are written and served in, and rdflib's name for each.
RDF_MEDIA_TYPES = {
    "text/turtle": "turtle",
    "application/n-triples": "nt",
    "application/ld+json": "json-ld",
    "application/rdf+xml": "xml",
}


def serialize_rdf(graph, media_type: str) -> str:
    """``graph`` as text in one of ``RDF_MEDIA_TYPES``; N-Triples sorted (diffable), Turtle exact."""
    if media_type == "text/turtle":
        import io

        out = io.BytesIO()
        _exact_turtle(graph).serialize(out, encoding="utf-8")
        return out.getvalue().decode("utf-8")
    if media_type == "application/ld+json":
        context = {prefix: str(iri) for prefix, iri in graph.namespaces() if prefix in ("gbim", "geo", "rdfs", "xsd")}
        return graph.serialize(format="json-ld", context=context, auto_compact=True)
    text = graph.serialize(format=RDF_MEDIA_TYPES[media_type])
    if media_type == "application/n-triples":
        return "".join(line + "\n" for line in sorted(text.splitlines()) if line.strip())
    return text


def _exact_turtle(graph):
    """rdflib's Turtle serializer, except that ``xsd:double`` literals keep their lexical form.

    rdflib writes a double in Turtle's short form through ``%e`` (six significant digits: 38.0123456 becomes
    3.801235e+01, another value; RDFLib/rdflib#1852), so the Turtle would not be the graph of the N-Triples."""
    from rdflib import XSD, Literal
    from rdflib.plugins.serializers.turtle import TurtleSerializer

    class ExactTurtleSerializer(TurtleSerializer):
        def label(self, node, position):
            if isinstance(node, Literal) and node.datatype == XSD.double:
                return node._literal_n3(qname_callback=lambda dt: self.get_pname(dt, gen_prefix=False))
            return super().label(node, position)

    return ExactTurtleSerializer(graph)


# --- staging a version -----------------------------------------------------------------------------------------
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
) -> GbimResult:
    """Stage a new version with the GBIM entities of the configured spatial sources (nothing when unchanged).
    ``dsns``: database URLs of PostGIS sources by the variable each names (default: the environment)."""
    spatial = load_spatial(config)
    home.ensure()
    with home.write_lock():
        base = home.current()
        base_manifest = home.manifest(base) if base else None
        if spatial is None:
            return GbimResult(None, base, "no spatial section in the sources file: nothing to export")
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
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
        timings["read_s"] = round(time.perf_counter() - t0, 3)
        previous = (base_manifest or {}).get("gbim") or {}
        if not force and previous.get("input_hash") == input_hash:
            return GbimResult(
                None, base, f"spatial inputs unchanged: version {base} already holds this export", previous
            )
        home.clear_staging()

        t = time.perf_counter()
        entities: list[dict[str, Any]] = []
        quarantined: list[Quarantined] = []
        per_source: dict[str, dict[str, Any]] = {}
        for source in spatial.sources:
            found, dropped = features_to_entities(source, frames[source.name], spatial, counties)
            entities += found
            quarantined += dropped
            per_source[source.name] = {
                "dataset": source.dataset,
                "source_table": source.source_table,
                "location": str(source.path) if source.path else f"postgis ${source.postgis['dsn_env']}",
                "crs": source.crs,
                "collection": source.collection,
                "access": source.access,
                "content_hash": hashes[source.name],
                "features": len(frames[source.name]),
                "entities": len(found),
                "quarantined": len(dropped),
            }
        entities.sort(key=lambda e: e["entity_id"])
        relations = [r for e in entities for r in relations_for(e, spatial.counties)] + linked_relations(entities)
        timings["entities_s"] = round(time.perf_counter() - t, 3)

        t = time.perf_counter()
        texts = [embed_text(e) for e in entities]
        with EmbeddingCache(home.cache_dir, embedder.dim) as cache:
            vectors, computed, reused = cache.embed(texts, embedder)
        timings["embed_s"] = round(time.perf_counter() - t, 3)

        t = time.perf_counter()
        version_id, staged, base = derive_version(home)
        if base is None:
            _write_empty_chunk_parts(staged, embedder.dim)
        _write_tables(staged, entities, relations)
        _write_rdf(staged, entities, relations)
        if counties is not None:
            _write_counties(staged, counties)
        _write_gis_snapshot(staged, entities, vectors)
        if config.uses_chroma:
            _update_chroma(staged, spatial, entities, vectors, previous.get("collections", []))
        elif (staged / CHROMA).exists():
            shutil.rmtree(staged / CHROMA)  # the vector store was switched off since the base version
        timings["write_s"] = round(time.perf_counter() - t, 3)
        timings["total_s"] = round(time.perf_counter() - t0, 3)

        section = _section(spatial, entities, relations, quarantined, per_source, input_hash, counties_hash)
        section.update(embeddings_computed=computed, embeddings_reused=reused, timings_s=timings)
        now = iso(utc_now())
        manifest = {
            **(base_manifest or _empty_manifest(config, embedder)),
            "version_id": version_id,
            "base_version": base,
            "created_at": now,
            "last_updated": now,
            "gbim": section,
        }
        write_manifest(staged, manifest)
    return GbimResult(version_id, base, "staged", section, quarantined, preview(entities), timings)


def embed_text(entity: dict[str, Any]) -> str:
    """What is embedded for an entity: its description, led by its label when the description lacks it."""
    label, description = entity["label"], entity["description"]
    return description if label.casefold() in description.casefold() else f"{label}. {description}"


def _empty_manifest(config: SourcesConfig, embedder: Embedder) -> dict[str, Any]:
    """The chunk part of a manifest for a version staged on an empty index (no chunks yet)."""
    from livemem.build import LAYOUT_VERSION, governance_status

    return {
        "layout_version": LAYOUT_VERSION,
        "segments": [],
        "model": {"id": embedder.model_id, "dim": embedder.dim},
        "chunking": config.chunking,
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
    from livemem.build import init_chunk_tables

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


def _write_gis_snapshot(staged: Path, entities: list[dict[str, Any]], vectors: np.ndarray) -> None:
    target = staged / GIS
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    (target / "ids.json").write_text(json.dumps([e["entity_id"] for e in entities]), encoding="utf-8")
    np.save(target / "dense.npy", np.asarray(vectors, dtype=np.float32).reshape(len(entities), -1))


def chroma_metadata(entity: dict[str, Any]) -> dict[str, Any]:
    """Scalar metadata beside each vector (Chroma takes str, int, float and bool; None values are left out)."""
    keys = ("entity_id", "source", "dataset", "worldview_id", "county", "gbim_entity", "label", "centroid_x",
            "centroid_y", "srid", "lon", "lat", "source_table", "source_pk", "access")  # fmt: skip
    meta = {k: entity[k] for k in keys if entity[k] is not None}
    meta.update({k: v for k, v in entity["flags"].items()})
    return meta


def _update_chroma(
    staged: Path, spatial: SpatialConfig, entities: list[dict[str, Any]], vectors: np.ndarray, previous: list[str]
) -> None:
    """Upsert every entity into its collections, delete entities that are gone, drop collections no longer used."""
    members: dict[str, list[int]] = {name: [] for name in spatial.collections}
    for i, e in enumerate(entities):
        members[spatial.collection].append(i)
        if e["collection"] != spatial.collection:
            members[e["collection"]].append(i)
    client = open_vectors(staged, None)  # the staged copy already holds the base version's collections
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


# --- checks ----------------------------------------------------------------------------------------------------
def _entities_of(version_dir: Path) -> list[dict[str, Any]] | None:
    con = connect(version_dir)
    try:
        return read_entities(con) if has_gbim_tables(con) else None
    finally:
        con.close()


def check_entities_valid(version_dir: Path) -> CheckOutcome:
    """Every entity is valid per ``schemas/gbim_entity.schema.json`` (which bounds lon/lat) and the GIS snapshot
    lists exactly the entities of the tables."""
    entities = _entities_of(version_dir)
    if entities is None:
        return CheckOutcome(True, "the version holds no GBIM entities")
    failures = []
    for e in entities:
        problems = errors_for("gbim_entity", e)
        if problems:
            failures.append(f"{e['source']} {e['source_pk']} ({e['entity_id']}): {'; '.join(problems)}")
    ids_file = version_dir / GIS / "ids.json"
    listed = json.loads(ids_file.read_text(encoding="utf-8")) if ids_file.is_file() else None
    if listed is None or sorted(listed) != sorted(e["entity_id"] for e in entities):
        failures.append(f"{GIS}/ids.json does not list exactly the {len(entities)} entities of {ENTITY_TABLE}")
    summary = f"{len(entities) - len(failures)} of {len(entities)} GBIM entities are schema-valid with lon/lat in range"
    return CheckOutcome(not failures, summary, failures[:MAX_REPORTED], len(entities))


def check_entity_flags(version_dir: Path) -> CheckOutcome:
    """Advisory: entities far outside the configured region, or whose county attribute and polygon disagree."""
    entities = _entities_of(version_dir)
    if entities is None:
        return CheckOutcome(True, "the version holds no GBIM entities")
    failures = []
    for e in entities:
        where = f"{e['source']} {e['source_pk']} {e['label']!r}"
        if e["flags"]["outside_region"]:
            failures.append(f"{where}: far outside the region (lon {e['lon']}, lat {e['lat']})")
        if e["flags"]["county_disagreement"]:
            failures.append(f"{where}: county attribute {e['county']!r} but inside {e['county_spatial']!r}")
    summary = (
        f"{len(failures)} flag(s) on {len(entities)} entities (outside region / county disagreement)"
        if failures
        else f"no flags on {len(entities)} entities"
    )
    return CheckOutcome(not failures, summary, failures[:MAX_REPORTED], len(entities))
