"""The spatial section of the sources file, typed: sources, county boundaries, region; and the export's
constants (its version, the working CRS, where a version keeps its GBIM files)."""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from livemem.errors import ConfigError
from livemem.extras import require
from livemem.sources.config import SourcesConfig

# Bump when the export's output changes (forces a new export); v2: gbim/counties.geojson; v3: linked_relations.
EXPORT_VERSION = "gbim-v3"
WGS84 = "EPSG:4326"
DEFAULT_WORKING_CRS = "EPSG:26917"
DEFAULT_COLLECTION = "gbim_spatial"
DEFAULT_TOLERANCE_KM = 25.0
GBIM_DIR = "gbim"
COUNTIES_FILE = f"{GBIM_DIR}/counties.geojson"  # the county polygons the export used, served by the glassbox page
GBIM_IRI = "https://living-memory.example.org/gbim/"
ENTITY_NAMESPACE = uuid.UUID("5b0c8f1e-6a57-4c1b-9c1e-3f2d7a9e4b21")
ZIP_FIELDS = ("zip", "zips", "zip_code", "zipcode")
SHAPEFILE_PARTS = (".shp", ".shx", ".dbf", ".prj", ".cpg")
PREVIEW_FEATURES = 500


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


def _check_crs(pyproj, value: str, where: str, problems: list[str]) -> None:
    """Add a problem when ``value`` is not a CRS pyproj knows."""
    try:
        pyproj.CRS.from_user_input(value)
    except pyproj.exceptions.CRSError as exc:
        problems.append(f"{where}: {value!r} is not a CRS pyproj knows ({exc})")


def _resolve(path: str, base: Path) -> Path:
    """A configured path, ``~`` expanded, relative ones to the sources file's folder."""
    resolved = Path(os.path.expanduser(path))
    return resolved if resolved.is_absolute() else (base / resolved).resolve()


def _spatial_source(
    item: dict[str, Any], where: str, raw: dict[str, Any], config: SourcesConfig, pyproj, problems: list[str]
) -> SpatialSource | None:
    """One item of ``spatial.sources`` typed, its problems added to ``problems`` (None when it lacks a CRS or a
    worldview)."""
    for pair, required in (
        (("path", "postgis"), True),
        (("label_field", "label_template"), True),
        (("description_field", "description_template"), False),
    ):
        given = [key for key in pair if key in item]
        if len(given) > 1 or (required and not given):
            problems.append(f"{where}: give {'exactly' if required else 'at most'} one of {' or '.join(pair)}")
    crs = item.get("crs") or raw.get("crs")
    if not crs:
        problems.append(
            f"{where}: no crs: declare the CRS of its coordinates (e.g. crs: EPSG:26917) or set a default spatial.crs"
        )
        return None
    _check_crs(pyproj, crs, f"{where}.crs", problems)
    worldview = item.get("worldview_id") or raw.get("worldview_id")
    if not worldview:
        problems.append(f"{where}: no worldview_id (set it on the source or as spatial.worldview_id)")
        return None
    collection = raw.get("collection", DEFAULT_COLLECTION)
    own_collection = item.get("collection", collection)
    chunk_collections = {s.collection for s in config.sources}
    if own_collection in chunk_collections or collection in chunk_collections:
        problems.append(f"{where}: collection {own_collection!r} is already a chunk collection of a git source")
    return SpatialSource(
        name=item["name"],
        dataset=item["dataset"],
        worldview_id=worldview,
        gbim_entity=item["gbim_entity"],
        id_field=item["id_field"],
        crs=crs,
        collection=own_collection,
        access=item.get("access", "public"),
        path=_resolve(item["path"], config.path.parent) if "path" in item else None,
        layer=item.get("layer"),
        postgis=item.get("postgis"),
        label_field=item.get("label_field"),
        label_template=item.get("label_template"),
        description_field=item.get("description_field"),
        description_template=item.get("description_template"),
        county_field=item.get("county_field"),
        zip_field=item.get("zip_field"),
    )


def _spatial_sources(raw: dict[str, Any], config: SourcesConfig, pyproj, problems: list[str]) -> list[SpatialSource]:
    """Every item of ``spatial.sources`` typed (names must be unique), their problems added to ``problems``."""
    sources: list[SpatialSource] = []
    seen: set[str] = set()
    for i, item in enumerate(raw["sources"]):
        name = item["name"]
        where = f"spatial.sources[{i}] ({name!r})"
        if name in seen:
            problems.append(f"{where}: another spatial source has the name {name!r}")
        seen.add(name)
        source = _spatial_source(item, where, raw, config, pyproj, problems)
        if source is not None:
            sources.append(source)
    return sources


def _counties(raw: dict[str, Any], base: Path, pyproj, problems: list[str]) -> CountyBoundaries | None:
    """``spatial.counties`` typed (None when not configured), a problem added when its CRS is unknown."""
    if "counties" not in raw:
        return None
    c = raw["counties"]
    if c.get("crs"):
        _check_crs(pyproj, c["crs"], "spatial.counties.crs", problems)
    return CountyBoundaries(_resolve(c["path"], base), c["name_field"], c.get("crs"), c.get("layer"))


def _region(raw: dict[str, Any], problems: list[str]) -> Region | None:
    """``spatial.region`` typed (None when not configured), a problem added when its bbox is not in degrees."""
    if "region" not in raw:
        return None
    r = raw["region"]
    min_lon, min_lat, max_lon, max_lat = r["bbox"]
    if not (-180 <= min_lon <= max_lon <= 180 and -90 <= min_lat <= max_lat <= 90):
        problems.append("spatial.region.bbox: expected [min_lon, min_lat, max_lon, max_lat] in degrees")
    return Region((min_lon, min_lat, max_lon, max_lat), r.get("tolerance_km", DEFAULT_TOLERANCE_KM), r.get("name", ""))


def load_spatial(config: SourcesConfig) -> SpatialConfig | None:
    """The ``spatial:`` section of the sources file, validated and resolved; None when the file has none."""
    raw = config.section("spatial", "spatial_config")
    if raw is None:
        return None
    pyproj = require("geo", "pyproj", f"{config.path}: the spatial section (the GBIM export)")
    require("geo", "shapely", f"{config.path}: the spatial section (the GBIM export)")
    require("geo", "geopandas", f"{config.path}: the spatial section (the GBIM export)")

    working_crs = raw.get("working_crs", DEFAULT_WORKING_CRS)
    collection = raw.get("collection", DEFAULT_COLLECTION)
    problems: list[str] = []
    _check_crs(pyproj, working_crs, "spatial.working_crs", problems)
    if not problems and pyproj.CRS.from_user_input(working_crs).is_geographic:
        problems.append(f"spatial.working_crs: {working_crs} is geographic; centroids need a projected CRS")
    sources = _spatial_sources(raw, config, pyproj, problems)
    counties = _counties(raw, config.path.parent, pyproj, problems)
    region = _region(raw, problems)
    if problems:
        raise ConfigError(f"invalid spatial section in {config.path}:\n  " + "\n  ".join(problems))
    return SpatialConfig(tuple(sources), working_crs, collection, region, counties, raw)
