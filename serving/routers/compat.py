"""The seed design's routes, as its clients send them (docs/seed-compat.md): POST /chat/sync, /chat/light and
/gis_rag, body ``{"message", "county", "role", "profile"}``.

``role`` is a persona (community, researcher, governance engineer, caseworker, or a role name) choosing collections
and framing; access still comes from the API key, and a persona needing more access than the key gives is refused
(403). ``profile`` is ``"auto"`` (route from the message and county, as /chat does) or a /chat profile object.
Each route is /chat underneath; they differ in what they return.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from serving.context_models import ChatResponse, Citation, ContextRequest, Profile
from serving.deps import CallerRole, CurrentSnapshot, State
from serving.routers.chat import ERRORS, chat
from serving.routers.context import ThreadScope

router = APIRouter(tags=["seed compatibility"])


class SeedRequest(BaseModel):
    """The seed's request body."""

    model_config = ConfigDict(extra="forbid")

    message: str = Field(..., min_length=1, max_length=4000)
    county: str | None = Field(None, min_length=2, max_length=64)
    zip: str | None = Field(None, pattern=r"^[0-9]{5}$")
    role: str | None = Field(
        None, max_length=64, description="the persona (docs/seed-compat.md); access comes from the API key"
    )
    profile: Literal["auto"] | Profile | None = Field(
        "auto", description='"auto": route from the message, county and ZIP; or a /chat profile object'
    )
    top_k: int | None = Field(None, ge=1, le=50)
    thread_id: str | None = Field(
        None, max_length=128, description="the conversation: place, persona and topic carry forward (as on /chat)"
    )
    history: list[Annotated[str, Field(max_length=4000)]] | None = Field(
        None, max_length=50, description="earlier user messages, oldest first (as on /chat)"
    )

    def as_context_request(self) -> ContextRequest:
        profile = None if self.profile == "auto" else self.profile
        fields = self.model_dump(exclude={"profile"})
        return ContextRequest.model_validate({**fields, "profile": profile})


class LightResponse(BaseModel):
    """The answer without its evidence: what a chat widget shows."""

    answer: str
    citations: list[Citation]
    backend: str
    model: str
    persona: str | None
    index_version: str
    trace_id: str


class GisRagResponse(ChatResponse):
    geojson: dict[str, Any] = Field(
        description="the places of the evidence as a GeoJSON FeatureCollection (EPSG:4326), each with its [n]"
    )


@router.post("/chat/sync", response_model=ChatResponse, responses=ERRORS)
def chat_sync(
    body: SeedRequest, state: State, role: CallerRole, snap: CurrentSnapshot, scope: ThreadScope
) -> ChatResponse:
    """The whole answer at once: the /chat response."""
    return chat(body.as_context_request(), state, role, snap, scope)


@router.post("/chat/light", response_model=LightResponse, responses=ERRORS)
def chat_light(
    body: SeedRequest, state: State, role: CallerRole, snap: CurrentSnapshot, scope: ThreadScope
) -> LightResponse:
    """The answer, its citations and who answered, without the evidence and route."""
    full = chat(body.as_context_request(), state, role, snap, scope)
    return LightResponse(
        answer=full.answer,
        citations=full.citations,
        backend=full.backend,
        model=full.model,
        persona=full.route.persona,
        index_version=full.index_version,
        trace_id=full.trace_id,
    )


@router.post("/gis_rag", response_model=GisRagResponse, responses=ERRORS)
def gis_rag(
    body: SeedRequest, state: State, role: CallerRole, snap: CurrentSnapshot, scope: ThreadScope
) -> GisRagResponse:
    """The /chat response with the places of its evidence as GeoJSON, for a map beside the answer."""
    full = chat(body.as_context_request(), state, role, snap, scope)
    features = [
        {
            "type": "Feature",
            "id": e.entity_id,
            "geometry": {"type": "Point", "coordinates": [e.lon, e.lat]},
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
