"""POST /gis/query (semantic search over GBIM entities with spatial constraints) and GET /entities/{entity_id}.

Both read the GIS part of the version the request's snapshot serves (``gis/`` and the ``gbim_*`` tables),
loaded once per version directory. Constraints (role, dataset, county, bbox, near) are a mask applied before
ranking, so ``n_results`` hits come back whenever that many entities match.
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, HTTPException, Path, Query
from fastapi.responses import JSONResponse

from livemem.answer.results import gis_hit
from livemem.query.gis_index import GisIndex, cached_gis_index
from livemem.query.retrieval import top_order
from livemem.usage.traces import retrieval_events
from livemem.version.reader import Snapshot
from serving.deps import CallerRole, CurrentSnapshot, State
from serving.models import UUID_PATTERN, ErrorBody, Values
from serving.models.gis import (
    EntityResponse,
    Format,
    GisFeatureCollection,
    GisQueryRequest,
    GisQueryResponse,
)

router = APIRouter(tags=["gis"])

GEOJSON_MEDIA_TYPE = "application/geo+json"  # RFC 7946: what GIS clients (QGIS, GDAL, Leaflet plugins) expect
EXPORT_HINT = "run the Dagster job `export_gbim` (dagster job execute -m orchestration.definitions -j export_gbim)"


def gis_index(snap: Snapshot) -> GisIndex:
    index = cached_gis_index(str(snap.path))
    if index is None:
        raise HTTPException(503, f"index version {snap.version_id} holds no GBIM entities: {EXPORT_HINT}")
    return index


def _as_tuple(value: Values | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _feature(hit: dict[str, Any]) -> dict[str, Any]:
    located = hit["lon"] is not None and hit["lat"] is not None
    properties = {k: v for k, v in hit.items() if k not in ("entity_id", "lon", "lat")}
    return {
        "type": "Feature",
        "id": hit["entity_id"],
        "geometry": {"type": "Point", "coordinates": [hit["lon"], hit["lat"]]} if located else None,
        "properties": properties,
    }


@router.post(
    "/gis/query",
    response_model=GisQueryResponse | GisFeatureCollection,
    responses={
        200: {
            "content": {GEOJSON_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/GisFeatureCollection"}}},
            "description": f"`format=geojson`: a FeatureCollection, as {GEOJSON_MEDIA_TYPE}",
        },
        401: {"model": ErrorBody},
        422: {"model": ErrorBody},
        503: {"model": ErrorBody},
    },
)
def gis_query(
    body: GisQueryRequest,
    state: State,
    role: CallerRole,
    snap: CurrentSnapshot,
    format: Annotated[Format | None, Query(description="overrides the body's `format`")] = None,
) -> GisQueryResponse | JSONResponse:
    """Rank GBIM entities by the similarity of their descriptions to the query, among those that meet the
    spatial (bbox, near) and metadata (county, dataset) constraints and that the caller's role may read."""
    index = gis_index(snap)
    near = (body.near.lat, body.near.lon, body.near.radius_km) if body.near else None
    mask = index.mask(
        role.access,
        bbox=tuple(body.bbox) if body.bbox else None,
        near=near,
        counties=_as_tuple(body.county),
        datasets=_as_tuple(body.dataset),
    )
    rows = np.flatnonzero(mask)
    hits: list[dict[str, Any]] = []
    if rows.size:
        scores = index.dense[rows] @ state.retriever.encode(body.query)
        order = top_order(scores, body.n_results)
        best, best_scores = rows[order], scores[order]
        distances = index.distances_km(best, near[0], near[1]) if near else [None] * best.size
        hits = [
            gis_hit(index.entities[row], float(score), None if d is None else float(d))
            for row, score, d in zip(best, best_scores, distances, strict=True)
        ]
    trace_id = state.signer.issue(
        role=role.name, index_version=snap.version_id, chunk_ids=[h["entity_id"] for h in hits]
    )
    filters = body.model_dump(exclude_none=True, include={"bbox", "near", "county", "dataset"})
    events = retrieval_events(
        trace_id=trace_id,
        query=body.query,
        chunk_ids=[h["entity_id"] for h in hits],
        scores=[h["score"] for h in hits],
        role=role.name,
        breath_phase=snap.breath_phase,
        index_version=snap.version_id,
        mode="dense",
        return_="chunks",
        filters=filters,
        collections=sorted({index.entities[index.row_of[h["entity_id"]]]["collection"] for h in hits}),
        cache_hit=False,
    )
    for event in events:
        event["context"]["kind"] = "gis"  # ids are GBIM entity ids, not chunk ids
    state.traces.submit(events)  # queued: the answer does not wait for the trace file
    common = {"index_version": snap.version_id, "trace_id": trace_id, "candidates": int(rows.size)}
    if (format or body.format) == "geojson":
        collection = GisFeatureCollection.model_validate({"features": [_feature(h) for h in hits], **common})
        return JSONResponse(collection.model_dump(mode="json"), media_type=GEOJSON_MEDIA_TYPE)
    return GisQueryResponse.model_validate({"results": hits, **common})


@router.get(
    "/entities/{entity_id}",
    response_model=EntityResponse,
    responses={404: {"model": ErrorBody}, 503: {"model": ErrorBody}},
)
def get_entity(
    entity_id: Annotated[str, Path(pattern=UUID_PATTERN, description="GBIM entity id (UUID)")],
    role: CallerRole,
    snap: CurrentSnapshot,
) -> EntityResponse:
    """The entity with its relations (located_in, serves_zip, part_of), each with its provenance."""
    index = gis_index(snap)
    row = index.row_of.get(entity_id)
    # An entity the caller may not read is reported exactly like one that does not exist.
    if row is None or index.access[row] not in role.access:
        raise HTTPException(404, f"no GBIM entity {entity_id} in index version {snap.version_id}")
    return EntityResponse.model_validate(
        {**index.entities[row], "relations": index.relations.get(entity_id, []), "index_version": snap.version_id}
    )
