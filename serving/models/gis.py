"""Request and response bodies of serving/routers/gis.py: the JSON hits and entity, and their GeoJSON (RFC 7946)
forms (docs/gis.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.config import JsonDict

from livemem.answer.results import GEOJSON_DECIMALS
from serving.models import Text, Values

Format = Literal["json", "geojson"]

# The examples of /openapi.json (validated against their schemas by tests/api/test_geojson_media.py): the bundled
# example's Mount Hope pantry.
EXAMPLE_ID = "5bc2ce26-2066-5b47-a724-0b2359e64c8a"
EXAMPLE_METADATA: JsonDict = {"worldview_id": "wv-benefits", "county": "Fayette", "gbim_entity": "facility"}
EXAMPLE_HIT: JsonDict = {
    "description": "Church-run food pantry in Mount Hope: groceries every Tuesday and Thursday afternoon, no "
    "appointment needed, serves Mount Hope and Oak Hill.",
    "dataset": "wv_benefits",
    "label": "Mount Hope Food Pantry",
}
EXAMPLE_COMMON: JsonDict = {
    "index_version": "20261126T100051169076Z",
    "trace_id": "0cfa485d-a9ca-4a63-ab80-395ebb46aaee.20261126T100051169076Z.RHpmbT2qz5SaqbYLIvjBXGYoFANLV5r4td-2iw",
    "candidates": 10,
}

# The fields hits, features and entities share, described once.
EntityId = Annotated[
    str, Field(description="GBIM entity id: uuid5 of the source name and source_pk, stable across exports")
]
Label = Annotated[str, Field(description="the feature's name")]
Description = Annotated[str, Field(description="the searchable description the query is compared with")]
Dataset = Annotated[str, Field(description="the dataset the spatial source belongs to (the `dataset` constraint)")]
WorldviewId = Annotated[str, Field(description="the worldview (GBIM `part_of`) of the spatial source")]
County = Annotated[
    str | None,
    Field(description="county name without the word County: the feature's own, else by point-in-polygon; null: none"),
]
GbimEntity = Annotated[str, Field(description="entity type, e.g. `facility`")]
CentroidX = Annotated[float | None, Field(description="centroid easting in the working CRS (`srid`), metres")]
CentroidY = Annotated[float | None, Field(description="centroid northing in the working CRS (`srid`), metres")]
Srid = Annotated[int, Field(description="EPSG code of the working CRS of `centroid_x` / `centroid_y` (26917)")]
Lon = Annotated[float | None, Field(description="centroid longitude, EPSG:4326 degrees (null: no position)")]
Lat = Annotated[float | None, Field(description="centroid latitude, EPSG:4326 degrees (null: no position)")]
Score = Annotated[float, Field(description="cosine similarity of the query and the description")]
DistanceKm = Annotated[
    float | None, Field(description="with `near`: great-circle distance from its point, km; null without `near`")
]
IndexVersion = Annotated[str, Field(description="the index version that answered")]
TraceId = Annotated[str, Field(description="signed id of this answer's trace, for `POST /feedback`")]
Candidates = Annotated[int, Field(description="entities that met every constraint (and the caller's role)")]


class Near(BaseModel):
    """A radius search: entities whose centroid lies within `radius_km` of a point."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    lat: float = Field(..., ge=-90, le=90, description="latitude of the centre, EPSG:4326 degrees")
    lon: float = Field(..., ge=-180, le=180, description="longitude of the centre, EPSG:4326 degrees")
    radius_km: float = Field(..., gt=0, le=20_040, description="great-circle distance (haversine)")


class GisQueryRequest(BaseModel):
    """A semantic search over GBIM entities; every constraint is optional and applied before ranking."""

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {"query": "food pantry", "county": "Fayette", "n_results": 3, "format": "geojson"},
                {"query": "benefits office", "near": {"lat": 37.9723, "lon": -81.1487, "radius_km": 10}},
                {"query": "SNAP application help", "bbox": [-81.5, 37.7, -80.9, 38.3], "dataset": "wv_benefits"},
            ]
        },
    )

    query: Text = Field(description="what to look for: compared with each entity's description")
    n_results: int = Field(10, ge=1, le=200, description="how many hits, best first")
    bbox: list[float] | None = Field(
        None,
        max_length=4,
        description="[min_lon, min_lat, max_lon, max_lat] in EPSG:4326 (does not cross the antimeridian)",
    )
    near: Near | None = Field(None, description="entities within radius_km of (lat, lon)")
    county: Values | None = Field(
        None,
        description="county name(s), with or without the word County; a name that is no US county and no county of "
        "the entities is a 422 with the closest names",
    )
    dataset: Values | None = Field(None, description="dataset name(s) (`dataset` of the hits)")
    min_score: float | None = Field(
        None, ge=-1, le=1, description="hits whose score (cosine of query and description) is below this are dropped"
    )
    recency_bias: float = Field(
        0.0,
        ge=0,
        le=10,
        description="accepted as on /query and the seed routes; GBIM entities carry no date, so it changes no "
        "ranking (the response's `notes` says so when it is given)",
    )
    format: Format = Field(
        "json",
        description="`geojson`: a FeatureCollection of the hits' centroids, as application/geo+json; when neither "
        "this nor `?format` is given, the Accept header chooses (`application/geo+json` or `application/json`)",
    )

    @field_validator("bbox")
    @classmethod
    def _valid_bbox(cls, value: list[float] | None) -> list[float] | None:
        if value is None:
            return None
        if len(value) != 4:
            raise ValueError(f"bbox needs 4 numbers [min_lon, min_lat, max_lon, max_lat], got {len(value)}")
        min_lon, min_lat, max_lon, max_lat = value
        if not (-180 <= min_lon <= 180 and -180 <= max_lon <= 180 and -90 <= min_lat <= 90 and -90 <= max_lat <= 90):
            raise ValueError("bbox longitudes must lie in [-180, 180] and latitudes in [-90, 90]")
        if min_lon > max_lon or min_lat > max_lat:
            raise ValueError("bbox must be [min_lon, min_lat, max_lon, max_lat] with min <= max")
        return value


class GisMetadata(BaseModel):
    """The entity's worldview, county and type (also top-level properties of a GeoJSON feature)."""

    worldview_id: WorldviewId
    county: County
    gbim_entity: GbimEntity


class GisHit(BaseModel):
    """One entity found, as JSON."""

    entity_id: EntityId
    description: Description
    dataset: Dataset
    label: Label
    metadata: GisMetadata = Field(description="worldview, county and entity type")
    centroid_x: CentroidX
    centroid_y: CentroidY
    srid: Srid
    lon: Lon
    lat: Lat
    score: Score
    distance_km: DistanceKm = None


class GisQueryResponse(BaseModel):
    """The hits, best first (`format: json`)."""

    results: list[GisHit] = Field(description="the hits, best first")
    index_version: IndexVersion
    trace_id: TraceId
    candidates: Candidates
    notes: list[str] = Field(default_factory=list, description="what the request asked that changed nothing, and why")


class PointGeometry(BaseModel):
    """A GeoJSON Point (RFC 7946 §3.1.2)."""

    type: Literal["Point"] = Field("Point", description="always `Point`")
    coordinates: list[float] = Field(
        min_length=2,
        max_length=2,
        description=f"[lon, lat] in EPSG:4326, rounded to {GEOJSON_DECIMALS} decimals (RFC 7946 §11.2: about 0.1 m)",
    )


class GisFeatureProperties(BaseModel):
    """A hit's properties: everything of the JSON hit but its id and position (the Feature's `id` and geometry)."""

    description: Description
    dataset: Dataset
    label: Label
    worldview_id: WorldviewId
    county: County
    gbim_entity: GbimEntity
    metadata: GisMetadata = Field(description="the same worldview, county and type, as in the JSON hit")
    centroid_x: CentroidX
    centroid_y: CentroidY
    srid: Srid
    score: Score
    distance_km: DistanceKm = None


class GisFeature(BaseModel):
    """One hit as a GeoJSON Feature."""

    type: Literal["Feature"] = Field("Feature", description="always `Feature`")
    id: EntityId
    geometry: PointGeometry | None = Field(description="the centroid; null for an entity without a position")
    properties: GisFeatureProperties = Field(description="the rest of the hit")


class GisFeatureCollection(BaseModel):
    """The hits, best first, as a GeoJSON FeatureCollection (`format: geojson`, application/geo+json)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "type": "FeatureCollection",
                    "features": [
                        {
                            "type": "Feature",
                            "id": EXAMPLE_ID,
                            "geometry": {"type": "Point", "coordinates": [-81.164, 37.8954]},
                            "properties": {
                                **EXAMPLE_HIT,
                                **EXAMPLE_METADATA,
                                "metadata": EXAMPLE_METADATA,
                                "centroid_x": 485580.81,
                                "centroid_y": 4194222.21,
                                "srid": 26917,
                                "score": 0.5721,
                                "distance_km": None,
                            },
                        }
                    ],
                    **EXAMPLE_COMMON,
                }
            ]
        }
    )

    type: Literal["FeatureCollection"] = Field("FeatureCollection", description="always `FeatureCollection`")
    features: list[GisFeature] = Field(description="the hits, best first")
    index_version: IndexVersion
    trace_id: TraceId
    candidates: Candidates


class Relation(BaseModel):
    """A fact about the entity, as a triple with where it came from."""

    subject: str = Field(description="the entity id")
    predicate: str = Field(description="located_in, serves_zip, part_of, serves_program, operated_by or near")
    object: str = Field(description="a county, ZIP code, worldview, program, organization or entity id")
    object_kind: str = Field(description="what `object` is: county, zip, worldview, program, organization, entity")
    provenance: dict[str, Any] = Field(description="where the fact came from: source, table, key, field, method")


Source = Annotated[str, Field(description="name of the spatial source in the sources file")]
SourceTable = Annotated[str, Field(description="file (and layer) or PostGIS table / query the feature came from")]
SourcePk = Annotated[str, Field(description="the feature's key in its source")]
Attributes = Annotated[dict[str, Any], Field(description="the feature's own properties (JSON values)")]
Access = Annotated[str, Field(description="who may read it: `public` or `internal`")]
Collection = Annotated[str, Field(description="the source's own Chroma collection")]
GeometryType = Annotated[str, Field(description="the source geometry's type (the centroid stands for it)")]
CountySource = Annotated[
    str | None, Field(description="where `county` came from: `attribute` or `point_in_polygon` (null: no county)")
]
CountySpatial = Annotated[
    str | None,
    Field(description="county found by point-in-polygon (null: no polygons configured or none holds the centroid)"),
]
Flags = Annotated[
    dict[str, bool],
    Field(description="`geometry_repaired`, `outside_region`, `county_disagreement` (docs/gbim.md)"),
]
Relations = Annotated[list[Relation], Field(description="its facts (located_in, serves_zip, part_of, ...)")]


class EntityResponse(BaseModel):
    """A GBIM entity (``schemas/gbim_entity.schema.json``) with its relations."""

    entity_id: EntityId
    source: Source
    worldview_id: WorldviewId
    dataset: Dataset
    county: County
    gbim_entity: GbimEntity
    label: Label
    description: Description
    centroid_x: CentroidX
    centroid_y: CentroidY
    srid: Srid
    lon: Lon
    lat: Lat
    source_table: SourceTable
    source_pk: SourcePk
    attributes: Attributes
    access: Access
    collection: Collection
    geometry_type: GeometryType
    county_source: CountySource
    county_spatial: CountySpatial
    flags: Flags
    relations: Relations
    index_version: IndexVersion


class EntityProperties(BaseModel):
    """The entity's properties as a GeoJSON Feature: its record but its id and position, with its relations."""

    source: Source
    worldview_id: WorldviewId
    dataset: Dataset
    county: County
    gbim_entity: GbimEntity
    label: Label
    description: Description
    centroid_x: CentroidX
    centroid_y: CentroidY
    srid: Srid
    source_table: SourceTable
    source_pk: SourcePk
    attributes: Attributes
    access: Access
    collection: Collection
    geometry_type: GeometryType
    county_source: CountySource
    county_spatial: CountySpatial
    flags: Flags
    relations: Relations


class EntityFeature(BaseModel):
    """A GBIM entity with its relations as a GeoJSON Feature (`?format=geojson` or `Accept: application/geo+json`)."""

    type: Literal["Feature"] = Field("Feature", description="always `Feature`")
    id: EntityId
    geometry: PointGeometry | None = Field(description="the centroid; null for an entity without a position")
    properties: EntityProperties = Field(description="the rest of the entity record, with its relations")
    index_version: IndexVersion
