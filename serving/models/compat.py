"""Request and response bodies of serving/routers/compat.py (the seed's routes), and the OpenAI dialect's error body."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from serving.models import AnsweredFromField, AsOf, Text, VersionId, examples
from serving.models.context import (
    ChatResponse,
    Citation,
    ContextRequest,
    MaxWords,
    MinScore,
    Profile,
    RecencyBias,
    RecencyHalfLife,
)


class SeedRequest(BaseModel):
    """The seed's request body."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"message": "Oak Hill WV county benefits", "county": "Fayette", "role": "community", "profile": "auto"},
                {"message": "SNAP office hours", "zip": "25901", "profile": {"county": "Fayette"}, "top_k": 4},
            ]
        },
    )

    message: Text = Field(description="the person's message, as written")
    county: str | None = Field(None, min_length=2, max_length=64, description="county, e.g. Fayette")
    zip: str | None = Field(None, pattern=r"^[0-9]{5}$", description="5-digit ZIP code")
    role: str | None = Field(
        None, max_length=64, description="the persona (docs/seed-compat.md); access comes from the API key"
    )
    profile: Literal["auto"] | Profile | None = Field(
        "auto", description='"auto": route from the message, county and ZIP; or a /chat profile object'
    )
    top_k: int | None = Field(None, ge=1, le=50, description="text passages (default LIVEMEM_CONTEXT_TOP_K, 6)")
    n_results: int | None = Field(
        None, ge=1, le=50, description="the seed's name for `top_k` (give one of them, or both equal)"
    )
    min_score: MinScore = None
    recency_bias: RecencyBias = 0.0
    recency_half_life_days: RecencyHalfLife = None
    max_words: MaxWords = None
    thread_id: str | None = Field(
        None, max_length=128, description="the conversation: place, persona and topic carry forward (as on /chat)"
    )
    history: list[Annotated[str, Field(max_length=4000)]] | None = Field(
        None, max_length=50, description="earlier user messages, oldest first (as on /chat)"
    )
    version: VersionId = None
    as_of: AsOf = None

    @model_validator(mode="after")
    def _valid_for_chat(self) -> Self:
        """Every rule of /chat's body holds for the seed's (the message is the same ``Text``; this catches any rule
        the two bodies do not share): a body /chat would refuse is a 422 naming the field here, never an error
        inside the route."""
        try:
            self.as_context_request()
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
            raise ValueError(problems) from None
        return self

    def as_context_request(self) -> ContextRequest:
        profile = None if self.profile == "auto" else self.profile
        fields = self.model_dump(exclude={"profile", "n_results"})
        if self.n_results is not None:
            if self.top_k is not None and self.top_k != self.n_results:
                raise ValueError(f"n_results ({self.n_results}) and top_k ({self.top_k}) differ: give one of them")
            fields["top_k"] = self.n_results
        return ContextRequest.model_validate({**fields, "profile": profile})


class LightResponse(BaseModel):
    """The answer without its evidence: what a chat widget shows."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "answer": "Here is what Living Memory has for you: SNAP applications in Fayette County are taken "
                    "at the Fayette County DHHR Office, 100 Main Street, Oak Hill [1].",
                    "citations": [
                        {
                            "n": 1,
                            "section": "registry",
                            "kind": "registry",
                            "id": "fay-dhhr-snap",
                            "name": "Fayette County DHHR Office – SNAP",
                            "verification_status": "verified",
                        }
                    ],
                    "backend": "extractive",
                    "model": "extractive",
                    "persona": "community",
                    "index_version": examples.VERSION,
                    "trace_id": examples.TRACE_ID,
                }
            ]
        }
    )

    answer: str = Field(description="the answer, citing evidence as [n]")
    citations: list[Citation] = Field(description="the evidence the answer cites, by its [n]")
    backend: str = Field(description="llm, extractive or fixed (as on /chat)")
    model: str = Field(description="the model that answered (`extractive` without an LLM)")
    persona: str | None = Field(description="the persona answered as (the request's `role`), or null")
    index_version: str = Field(description="the published index version that answered")
    trace_id: str = Field(description="this answer's signed trace id: send it to /feedback to judge the passages")
    answered_from: AnsweredFromField = None


class GisRagResponse(ChatResponse):
    model_config = ConfigDict(json_schema_extra={"examples": [examples.GIS_RAG]})

    geojson: dict[str, Any] = Field(
        description="the places of the evidence as a GeoJSON FeatureCollection (EPSG:4326), each with its [n]"
    )


# --- the OpenAI dialect's error body (serving/routers/chat.py, /v1/*) ---------------------------------------------------
class OpenAIError(BaseModel):
    message: str = Field(description="what was wrong, naming the field or route")
    type: str = Field(
        description="invalid_request_error (400, 404 route, 405), authentication_error (401), permission_error "
        "(403), not_found_error (404 model), api_error (5xx, and a backend failing mid-stream)"
    )
    param: str | None = Field(description="the request field at fault (dotted path), or null")
    code: str | None = Field(
        description="invalid_api_key, model_not_found, unknown_url, method_not_allowed, backend_error, or null"
    )


class OpenAIErrorBody(BaseModel):
    """Every error of the /v1 routes, as OpenAI answers it (the `openai` client raises the matching APIError)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "error": {
                        "message": "the model 'gpt-4o' does not exist; served: extractive (or 'living-memory')",
                        "type": "not_found_error",
                        "param": "model",
                        "code": "model_not_found",
                    }
                }
            ]
        }
    )

    error: OpenAIError = Field(description="the error, in OpenAI's fields")
