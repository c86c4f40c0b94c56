"""Request and response bodies of serving/routers/gis.py."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from serving.models import Text, Values

Format = Literal["json", "geojson"]


class Near(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    lat: float = Field(..., ge=-90, le=90)
    lon: float = Field(..., ge=-180, le=180)
    radius_km: float = Field(..., gt=0, le=20_040, description="great-circle distance (haversine)")


class GisQueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    query: Text
    n_results: int = Field(10, ge=1, le=200)
    bbox: list[float] | None = Field(
        None,
        max_length=4,
        description="[min_lon, min_lat, max_lon, max_lat] in EPSG:4326 (does not cross the antimeridian)",
    )
    near: Near | None = Field(None, description="entities within radius_km of (lat, lon)")
    county: Values | None = Field(None, description="county name(s), with or without the word County")
    dataset: Values | None = None
    format: Format = Field("json", description="`geojson`: a FeatureCollection of the hits' centroids")

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
    worldview_id: str
    county: str | None
    gbim_entity: str


class GisHit(BaseModel):
    entity_id: str
    description: str
    dataset: str
    label: str
    metadata: GisMetadata
    centroid_x: float | None = Field(description="centroid easting in the working CRS (srid)")
    centroid_y: float | None
    srid: int
    lon: float | None = Field(description="EPSG:4326")
    lat: float | None
    score: float = Field(description="cosine similarity of the query and the description")
    distance_km: float | None = Field(None, description="with `near`: great-circle distance from its point")


class GisQueryResponse(BaseModel):
    results: list[GisHit]
    index_version: str
    trace_id: str
    candidates: int = Field(description="entities that met every constraint")


class PointGeometry(BaseModel):
    type: Literal["Point"] = "Point"
    coordinates: list[float] = Field(description="[lon, lat] in EPSG:4326")


class GisFeature(BaseModel):
    type: Literal["Feature"] = "Feature"
    id: str
    geometry: PointGeometry | None
    properties: dict[str, Any]


class GisFeatureCollection(BaseModel):
    type: Literal["FeatureCollection"] = "FeatureCollection"
    features: list[GisFeature]
    index_version: str
    trace_id: str
    candidates: int


class Relation(BaseModel):
    subject: str
    predicate: str
    object: str
    object_kind: str
    provenance: dict[str, Any]


class EntityResponse(BaseModel):
    """A GBIM entity (``schemas/gbim_entity.schema.json``) with its relations."""

    entity_id: str
    source: str
    worldview_id: str
    dataset: str
    county: str | None
    gbim_entity: str
    label: str
    description: str
    centroid_x: float | None
    centroid_y: float | None
    srid: int
    lon: float | None
    lat: float | None
    source_table: str
    source_pk: str
    attributes: dict[str, Any]
    access: str
    collection: str
    geometry_type: str
    county_source: str | None
    county_spatial: str | None
    flags: dict[str, bool]
    relations: list[Relation]
    index_version: str
