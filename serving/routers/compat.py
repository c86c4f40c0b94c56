"""The seed design's routes, as its clients send them (docs/seed-compat.md): POST /chat/sync, /chat/light and
/gis_rag, body ``{"message", "county", "role", "profile"}``.

``role`` is a persona (community, researcher, governance engineer, caseworker, or a role name) choosing collections
and framing; access still comes from the API key, and a persona needing more access than the key gives is refused
(403). ``profile`` is ``"auto"`` (route from the message and county, as /chat does) or a /chat profile object.
Each route is /chat underneath (``serving.services.answers.answer_chat``); they differ in what they return.
"""

from __future__ import annotations

from fastapi import APIRouter

from livemem.answer.results import geojson_point
from livemem.engine.snapshot import Snapshot
from serving.deps import CallerRole, CurrentSnapshot, State, ThreadScope
from serving.models.compat import GisRagResponse, LightResponse, SeedRequest
from serving.models.context import ChatResponse
from serving.services.answers import ERRORS, answer_chat
from serving.state import Role, ServingState

router = APIRouter(tags=["seed compatibility"])


def chat(body: SeedRequest, state: ServingState, role: Role, snap: Snapshot, scope: str) -> ChatResponse:
    """The /chat answer to a seed request."""
    return ChatResponse.model_validate(answer_chat(body.as_context_request(), state, role, snap, scope))


@router.post("/chat/sync", response_model=ChatResponse, responses=ERRORS)
def chat_sync(
    body: SeedRequest, state: State, role: CallerRole, snap: CurrentSnapshot, scope: ThreadScope
) -> ChatResponse:
    """The whole answer at once: the /chat response."""
    return chat(body, state, role, snap, scope)


@router.post("/chat/light", response_model=LightResponse, responses=ERRORS)
def chat_light(
    body: SeedRequest, state: State, role: CallerRole, snap: CurrentSnapshot, scope: ThreadScope
) -> LightResponse:
    """The answer, its citations and who answered, without the evidence and route."""
    full = chat(body, state, role, snap, scope)
    return LightResponse(
        answer=full.answer,
        citations=full.citations,
        backend=full.backend,
        model=full.model,
        persona=full.route.persona,
        index_version=full.index_version,
        trace_id=full.trace_id,
        answered_from=full.answered_from,
    )


@router.post("/gis_rag", response_model=GisRagResponse, responses=ERRORS)
def gis_rag(
    body: SeedRequest, state: State, role: CallerRole, snap: CurrentSnapshot, scope: ThreadScope
) -> GisRagResponse:
    """The /chat response with the places of its evidence as GeoJSON, for a map beside the answer."""
    full = chat(body, state, role, snap, scope)
    features = [
        {
            "type": "Feature",
            "id": e.entity_id,
            "geometry": geojson_point(e.lon, e.lat),  # rounded as every GeoJSON answer (docs/gis.md)
            "properties": {
                "label": e.label,
                "dataset": e.dataset,
                "county": e.county,
                "town": e.town,
                "address": e.address,
                "ref": e.ref,
            },
        }
        for e in full.evidence.spatial
        if e.lon is not None and e.lat is not None
    ]
    geojson = {"type": "FeatureCollection", "features": features}
    return GisRagResponse.model_validate({**full.model_dump(by_alias=True), "geojson": geojson})
