"""Features → GBIM entities (id, centroid, EPSG:4326 position, county, flags) and each entity's own relations
(``part_of``, ``located_in``, ``serves_zip``)."""

from __future__ import annotations

import math
import string
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from livemem.errors import ConfigError
from livemem.gbim.config import ENTITY_NAMESPACE, WGS84, ZIP_FIELDS, CountyBoundaries, SpatialConfig, SpatialSource
from livemem.gbim.read import READ_PROBLEM, county_of_points
from livemem.geo.distance import haversine_km
from livemem.geo.names import tidy_county, tidy_county_key


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


def _check_fields(source: SpatialSource, fields: list[str]) -> None:
    """Raise ConfigError when a configured field (or a template's field) is not a column of the source."""
    wanted = {source.id_field, source.label_field, source.description_field, source.county_field, source.zip_field}
    for template in (source.label_template, source.description_template):
        wanted |= _template_fields(template or "")
    missing = sorted(f for f in wanted - set(fields) if f)
    if missing:
        raise ConfigError(
            f"spatial source {source.name!r}: field(s) {missing} not found in {source.source_table} "
            f"(fields: {', '.join(fields)})"
        )


@dataclass
class _Screened:
    """What screening the features left: the quarantined, the kept indices, the repairs and those out of range."""

    quarantined: list[Quarantined]
    keep: list[int]
    repaired: dict[int, str]
    out_of_range: dict[int, str]  # features whose coordinates lie outside their CRS (quarantined later)


def _screen_features(
    source: SpatialSource, attributes: list[dict[str, Any]], geoms: np.ndarray, read_problems: list, source_crs
) -> _Screened:
    """Quarantine features without id, duplicated, unreadable, null, empty or unrepairable; repair the rest in
    ``geoms`` and note those beyond ±180° / ±90° in a geographic CRS."""
    import shapely
    from shapely.validation import explain_validity

    screened = _Screened([], [], {}, {})
    quarantined = screened.quarantined
    seen_pks: set[str] = set()
    for i, attrs in enumerate(attributes):
        raw_pk = attrs.get(source.id_field)
        pk = None if raw_pk is None or str(raw_pk).strip() == "" else str(raw_pk).strip()
        geom = geoms[i]
        if pk is None:
            quarantined.append(Quarantined(source.name, None, f"feature {i}: no value in id field {source.id_field!r}"))
        elif pk in seen_pks:
            quarantined.append(Quarantined(source.name, pk, f"duplicate id {pk!r} (the first feature is kept)"))
        elif read_problems[i]:
            quarantined.append(Quarantined(source.name, pk, read_problems[i]))
        elif geom is None:
            quarantined.append(Quarantined(source.name, pk, "null geometry"))
        elif geom.is_empty:
            quarantined.append(Quarantined(source.name, pk, f"empty geometry ({geom.geom_type} EMPTY)"))
        elif (problem := coordinate_problem(geom)) is not None:
            quarantined.append(Quarantined(source.name, pk, problem))  # GEOS cannot repair or project these
        else:
            if source_crs.is_geographic and (problem := _outside_degrees(geom)) is not None:
                screened.out_of_range[i] = f"{problem} for {source.crs}"
            if not geom.is_valid:
                problem = explain_validity(geom)
                fixed = shapely.make_valid(geom)
                if fixed.is_empty or not fixed.is_valid:
                    quarantined.append(
                        Quarantined(source.name, pk, f"invalid geometry make_valid cannot repair: {problem}")
                    )
                    continue
                geoms[i] = fixed
                screened.repaired[i] = problem
            seen_pks.add(pk)
            screened.keep.append(i)
    return screened


def _drop_out_of_range(
    source: SpatialSource,
    attributes: list[dict[str, Any]],
    screened: _Screened,
    positions: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Note the kept features whose EPSG:4326 position is out of range; quarantine them unless all are (then the
    CRS does not fit the layer); return the positions of the features still kept (``screened.keep`` updated)."""
    cx, cy, lon, lat = positions
    keep, out_of_range = screened.keep, screened.out_of_range
    for j, i in enumerate(keep):
        if i not in out_of_range and not _in_degrees(lon[j], lat[j]):
            out_of_range[i] = (
                f"its position lies outside EPSG:4326 once projected from {source.crs} (lon {lon[j]}, lat {lat[j]})"
            )
    # One feature out of range is a bad feature; every feature out of range is a CRS that does not fit the layer:
    # those are kept, so the blocking check refuses the version naming them, rather than exporting an empty layer.
    if out_of_range and len(out_of_range) < len(keep):
        for i in keep:
            if i in out_of_range:
                pk = str(attributes[i][source.id_field]).strip()
                screened.quarantined.append(
                    Quarantined(source.name, pk, f"coordinates out of range: {out_of_range[i]}")
                )
        stay = [j for j, i in enumerate(keep) if i not in out_of_range]
        screened.keep = [keep[j] for j in stay]
        cx, cy, lon, lat = cx[stay], cy[stay], lon[stay], lat[stay]
    return cx, cy, lon, lat


def _entity(
    source: SpatialSource, attrs: dict[str, Any], fields: tuple[str | None, str | None], place: dict[str, Any]
) -> dict[str, Any]:
    """One entity record: ``fields`` are the county and zip fields, ``place`` its position, geometry type,
    point-in-polygon county, repair (whether and why) and whether it lies outside the region."""
    county_field, zip_field = fields
    pk = str(attrs[source.id_field]).strip()
    own = attrs.get(county_field) if county_field else None
    own = (tidy_county(str(own)) or None) if own is not None else None
    pip = place["county"]
    label = _field_text(attrs, source.label_field, source.label_template) or f"{source.gbim_entity} {pk}"
    description = _field_text(attrs, source.description_field, source.description_template) or label
    return {
        "entity_id": entity_id(source.name, pk),
        "source": source.name,
        "worldview_id": source.worldview_id,
        "dataset": source.dataset,
        "county": own or pip,
        "gbim_entity": source.gbim_entity,
        "label": label,
        "description": description,
        "centroid_x": _finite(place["cx"]),
        "centroid_y": _finite(place["cy"]),
        "srid": place["srid"],
        "lon": _finite(place["lon"]),
        "lat": _finite(place["lat"]),
        "source_table": source.source_table,
        "source_pk": pk,
        "attributes": attrs,
        "access": source.access,
        "collection": source.collection,
        "geometry_type": place["geometry_type"],
        "county_source": "attribute" if own else ("point_in_polygon" if pip else None),
        "county_spatial": pip,
        "flags": {
            "geometry_repaired": place["repaired"],
            "outside_region": place["outside"],
            "county_disagreement": bool(own and pip and tidy_county_key(own) != tidy_county_key(pip)),
        },
        "_zip_codes": zip_codes(attrs.get(zip_field)) if zip_field else [],
        "_zip_field": zip_field,
        "_county_field": county_field,
        "_repair": place["repair"],
    }


def features_to_entities(
    source: SpatialSource, frame, spatial: SpatialConfig, counties=None
) -> tuple[list[dict[str, Any]], list[Quarantined]]:
    """Entities (``schemas/gbim_entity.schema.json``) of one source's features, and the features quarantined."""
    import pyproj

    geometry_name = frame.geometry.name
    read_problems = frame[READ_PROBLEM].tolist() if READ_PROBLEM in frame.columns else [None] * len(frame)
    fields = [c for c in frame.columns if c not in (geometry_name, READ_PROBLEM)]
    source_crs = pyproj.CRS.from_user_input(frame.crs or source.crs)
    _check_fields(source, fields)
    county_field = source.county_field or ("county" if "county" in fields else None)
    zip_field = source.zip_field or next((f for f in ZIP_FIELDS if f in fields), None)
    attributes = [{k: _json_value(v) for k, v in row.items()} for row in frame[fields].to_dict("records")]
    geoms = frame.geometry.to_numpy().copy()  # repaired geometries replace their originals here, not in frame

    screened = _screen_features(source, attributes, geoms, read_problems, source_crs)
    if not screened.keep:
        return [], screened.quarantined

    working = pyproj.CRS.from_user_input(spatial.working_crs)
    positions = _positions(geoms[screened.keep], frame.crs, working)
    cx, cy, lon, lat = _drop_out_of_range(source, attributes, screened, positions)
    keep, repaired = screened.keep, screened.repaired
    srid = working.to_epsg() or 0

    spatial_county = county_of_points(lon, lat, counties) if counties is not None else [None] * len(keep)
    outside = np.zeros(len(keep), dtype=bool)
    if spatial.region is not None:
        with np.errstate(invalid="ignore"):
            outside = _distance_outside_km(lon, lat, spatial.region.bbox) > spatial.region.tolerance_km

    entities = []
    for j, i in enumerate(keep):
        place = {
            "cx": cx[j],
            "cy": cy[j],
            "lon": lon[j],
            "lat": lat[j],
            "srid": srid,
            "geometry_type": geoms[i].geom_type,
            "county": spatial_county[j],
            "repaired": i in repaired,
            "repair": repaired.get(i),
            "outside": bool(outside[j]),
        }
        entities.append(_entity(source, attributes[i], (county_field, zip_field), place))
    return entities, screened.quarantined


def coordinate_problem(geom) -> str | None:
    """Why ``geom``'s coordinates cannot be used (Infinity, NaN: GEOS fails on them), or None."""
    import shapely

    coords = shapely.get_coordinates(geom, include_z=bool(shapely.has_z(geom)))
    if coords.size and not np.isfinite(coords).all():
        bad = coords[~np.isfinite(coords).all(axis=1)][0]
        return f"non-finite coordinate ({', '.join(str(float(v)) for v in bad)}): Infinity or NaN"
    return None


def _outside_degrees(geom) -> str | None:
    import shapely

    coords = shapely.get_coordinates(geom)
    bad = coords[(np.abs(coords[:, 0]) > 180) | (np.abs(coords[:, 1]) > 90)]
    return f"coordinate ({bad[0, 0]}, {bad[0, 1]}) is beyond ±180° / ±90°" if len(bad) else None


def _in_degrees(lon: float, lat: float) -> bool:
    return bool(np.isfinite(lon) and np.isfinite(lat) and abs(lon) <= 180 and abs(lat) <= 90)


def _positions(geoms: np.ndarray, crs, working) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Centroids of ``geoms`` (in ``crs``) in the working CRS, and as EPSG:4326 lon / lat (NaN or infinite where
    the CRS does not fit)."""
    import geopandas as gpd
    import pyproj
    import shapely

    kept = gpd.GeoSeries(geoms, crs=crs)
    projected = kept if kept.crs.equals(working) else kept.to_crs(working)
    with np.errstate(invalid="ignore", over="ignore"):  # a CRS that does not fit the data yields infinite coordinates
        centroids = shapely.centroid(projected.to_numpy())
    located = ~shapely.is_empty(centroids)
    cx, cy = np.full(len(geoms), np.nan), np.full(len(geoms), np.nan)
    cx[located], cy[located] = shapely.get_x(centroids[located]), shapely.get_y(centroids[located])
    to_wgs84 = pyproj.Transformer.from_crs(working, WGS84, always_xy=True)
    lon, lat = (np.asarray(a, dtype=np.float64) for a in to_wgs84.transform(cx, cy))
    return cx, cy, lon, lat


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
