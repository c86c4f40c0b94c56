"""POST /gis/query (semantic search over GBIM entities with spatial constraints) and GET /entities/{entity_id}.

Both read the GIS part of the version the request's snapshot serves (``gis/`` and the ``gbim_*`` tables),
loaded once per version directory. Constraints (role, dataset, county, bbox, near) are a mask applied before
ranking, so ``n_results`` hits come back whenever that many entities match.

Both answer JSON or GeoJSON (RFC 7946, ``application/geo+json``): ``format`` (``?format=``, or the body's) chooses,
else the ``Accept`` header; an Accept that allows neither is a 406, as on the RDF and SPARQL routes (docs/gis.md).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from livemem.answer.results import entity_feature, gis_hit_feature
from serving.deps import CallerRole, CurrentSnapshot, State, negotiate
from serving.models import UUID_PATTERN, ErrorBody
from serving.models.examples import HUB
from serving.models.gis import (
    EntityFeature,
    EntityResponse,
    Format,
    GisFeatureCollection,
    GisQueryRequest,
    GisQueryResponse,
)

router = APIRouter(tags=["gis"])

GEOJSON_MEDIA_TYPE = "application/geo+json"  # RFC 7946: what GIS clients (QGIS, GDAL, Leaflet plugins) expect
# What each answer can be sent as (a media type a client may ask for -> the format sent; on a tie, such as */*, the
# first wins). GeoJSON is JSON: a client that accepts application/json is sent GeoJSON when it asked for it by format.
OFFERS: dict[Format | None, dict[str, Format]] = {
    None: {"application/json": "json", GEOJSON_MEDIA_TYPE: "geojson"},
    "json": {"application/json": "json"},
    "geojson": {GEOJSON_MEDIA_TYPE: "geojson", "application/json": "geojson"},
}
VARY = {"Vary": "Accept"}  # the same URL answers JSON or GeoJSON by Accept: caches must key on it


def _geojson_too(schema: str) -> dict[str, Any]:
    """An OpenAPI 200 response that is JSON or, negotiated, ``schema`` as GeoJSON."""
    return {
        "content": {GEOJSON_MEDIA_TYPE: {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
        "description": f"JSON; with `format=geojson` or `Accept: {GEOJSON_MEDIA_TYPE}`, {schema} as {GEOJSON_MEDIA_TYPE}",
        "headers": {"Vary": {"description": "Accept", "schema": {"type": "string"}}},
    }


def answer_format(request: Request, chosen: Format | None) -> Format:
    """The format to answer in: ``chosen`` (the caller's ``format``) when given, else the one the Accept header
    prefers; a 406 when Accept allows no media type that format is sent as."""
    offers, accept = OFFERS[chosen], request.headers.get("accept")
    picked = negotiate(accept, offers)
    if picked is None:
        asked = "" if chosen is None else f" for format={chosen}"
        raise HTTPException(
            406,
            f"the Accept header ({(accept or '')[:200]!r}) names no media type offered here{asked}: {', '.join(offers)}",
            headers=VARY,
        )
    return picked


@router.post(
    "/gis/query",
    response_model=GisQueryResponse | GisFeatureCollection,
    responses={
        200: _geojson_too("GisFeatureCollection"),
        401: {"model": ErrorBody},
        406: {"model": ErrorBody},
        422: {"model": ErrorBody},
        503: {"model": ErrorBody},
    },
)
def gis_query(
    body: GisQueryRequest,
    request: Request,
    response: Response,
    state: State,
    role: CallerRole,
    format: Annotated[
        Format | None,
        Query(
            description="overrides the body's `format`; neither given: the Accept header chooses", examples=["geojson"]
        ),
    ] = None,
) -> GisQueryResponse | JSONResponse:
    """Rank GBIM entities by the similarity of their descriptions to the query, among those that meet the
    spatial (bbox, near) and metadata (county, dataset) constraints and that the caller's role may read."""
    answer_as = answer_format(request, format or (body.format if "format" in body.model_fields_set else None))
    found = state.gis.query(body, role)
    hits = found.pop("results")
    if answer_as == "geojson":
        collection = GisFeatureCollection.model_validate({"features": [gis_hit_feature(h) for h in hits], **found})
        return JSONResponse(collection.model_dump(mode="json"), media_type=GEOJSON_MEDIA_TYPE, headers=VARY)
    response.headers.update(VARY)
    return GisQueryResponse.model_validate({"results": hits, **found})


@router.get(
    "/entities/{entity_id}",
    response_model=EntityResponse | EntityFeature,
    responses={
        200: _geojson_too("EntityFeature"),
        404: {"model": ErrorBody},
        406: {"model": ErrorBody},
        503: {"model": ErrorBody},
    },
)
def get_entity(
    entity_id: Annotated[str, Path(pattern=UUID_PATTERN, description="GBIM entity id (UUID)", examples=[HUB])],
    request: Request,
    response: Response,
    state: State,
    role: CallerRole,
    snap: CurrentSnapshot,
    format: Annotated[
        Format | None,
        Query(description="`geojson`: a Feature; not given: the Accept header chooses", examples=["geojson"]),
    ] = None,
) -> EntityResponse | JSONResponse:
    """The entity with its relations (located_in, serves_zip, part_of), each with its provenance."""
    answer_as = answer_format(request, format)
    entity, relations = state.gis.entity(snap, entity_id, role)  # one the caller may not read: as if none
    if answer_as == "geojson":
        feature = EntityFeature.model_validate(entity_feature(entity, relations, snap.version_id))
        return JSONResponse(feature.model_dump(mode="json"), media_type=GEOJSON_MEDIA_TYPE, headers=VARY)
    response.headers.update(VARY)
    return EntityResponse.model_validate({**entity, "relations": relations, "index_version": snap.version_id})
