"""Reading spatial inputs: features of a file or PostGIS source, county polygons, the county holding a point."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from livemem.errors import ConfigError, SourceError
from livemem.gbim.config import SHAPEFILE_PARTS, WGS84, CountyBoundaries, SpatialSource

log = logging.getLogger(__name__)


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
            frame = _read_geojson_features(source) if source.path.suffix.lower() in GEOJSON_SUFFIXES else None
            if frame is None:
                raise SourceError(f"spatial source {source.name!r}: cannot read {source.path}: {exc}") from exc
            log.warning("spatial source %r: GDAL cannot read %s (%s): read feature by feature", source.name,
                        source.path, exc)  # fmt: skip
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


GEOJSON_SUFFIXES = (".geojson", ".json")
READ_PROBLEM = "__read_problem__"  # a column of the frame: why a feature could not be read (it is quarantined)


def _read_geojson_features(source: SpatialSource):
    """A GeoJSON file GDAL refuses as a whole (one number it cannot parse, such as ``1e999``), read by Python's JSON
    parser one feature at a time: each feature whose geometry cannot be built keeps its properties, no geometry and
    the reason in ``READ_PROBLEM`` (``features_to_entities`` quarantines it); None when the file is not a GeoJSON
    FeatureCollection at all."""
    import json

    import geopandas as gpd
    import shapely.geometry

    if source.path is None:  # only a file source is read here
        return None
    try:
        data = json.loads(source.path.read_text(encoding="utf-8"))  # Infinity, NaN and 1e999 become floats
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    features = data.get("features") if isinstance(data, dict) else None
    if not isinstance(features, list):
        return None
    rows, geometries = [], []
    for i, feature in enumerate(features):
        properties = feature.get("properties") if isinstance(feature, dict) else None
        row = dict(properties) if isinstance(properties, dict) else {}
        geometry, problem = None, None
        try:
            raw = feature.get("geometry") if isinstance(feature, dict) else None
            geometry = shapely.geometry.shape(raw) if raw else None
        except Exception as exc:  # shapely raises several types for malformed geometry objects
            problem = f"feature {i}: geometry cannot be read ({type(exc).__name__}: {str(exc)[:200]})"
        row[READ_PROBLEM] = problem
        rows.append(row)
        geometries.append(geometry)
    return gpd.GeoDataFrame(rows, geometry=geometries, crs=source.crs)


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
