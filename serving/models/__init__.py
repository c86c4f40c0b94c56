"""Every request and response body of the HTTP app, in one package (so ``/openapi.json`` documents every field):
this module holds the shared pieces and the bodies of /query, /feedback, /chunks and /healthz; ``context`` those of
/context, /chat and /v1/chat/completions; ``gis``, ``facts``, ``memory``, ``resources`` and ``compat`` those of
their routers. The MCP server answers with the same models."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo

from livemem.query.retrieval import DEFAULT_ATTENTION_BOOST, Filters
from livemem.usage.traces import TRACE_ID_PATTERN

UUID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
# Every list and string a caller sends is bounded: they end up in cache keys and in every trace event.
MAX_VALUES = 50
MAX_NAME_CHARS = 512  # collection names are at most 512 characters
MAX_SCORE = 1e6
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
Values = Name | Annotated[list[Name], Field(max_length=MAX_VALUES)]
ChunkId = Annotated[str, Field(pattern=UUID_PATTERN)]


def _some_text(value: str, info: ValidationInfo) -> str:
    if not value.strip():
        raise ValueError(f"{info.field_name} must contain some text")
    return value


# A query or a message: 1 to 4,000 characters, not all whitespace (every body that takes one: /query, /gis/query,
# /context and /chat, the seed's routes).
Text = Annotated[str, Field(min_length=1, max_length=4000), AfterValidator(_some_text)]


def _as_tuple(value: Values | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _utc(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


class QueryFilters(BaseModel):
    """Metadata filters, applied before ranking. Fields taking a list match any of its values (at most 50)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    source: Values | None = Field(None, description="configured source name(s)")
    path_prefix: str | None = Field(
        None, min_length=1, max_length=1024, description="file path inside the repository starts with"
    )
    type: (
        Literal["markdown", "code", "text"]
        | Annotated[list[Literal["markdown", "code", "text"]], Field(max_length=MAX_VALUES)]
        | None
    ) = None
    county: Values | None = None
    dataset: Values | None = None
    worldview_id: Values | None = None
    local_resource_id: Values | None = None
    seal_state: Literal["OPEN", "SEALED"] | None = None
    min_attention: float | None = Field(None, ge=0, le=MAX_SCORE)
    last_seen_breath: str | None = Field(
        None, max_length=32, pattern=r"^(Δ|D|delta ?)?[0-9]+$", description="seen in breath Δn or later (e.g. `Δ3`)"
    )
    updated_after: datetime | None = Field(None, description="file last changed at or after (ISO 8601; UTC if naive)")
    updated_before: datetime | None = Field(None, description="file last changed at or before")
    dated_after: datetime | None = Field(
        None, description="the document's own date (front matter, heading, file name; else its commit time) at or after"
    )
    dated_before: datetime | None = Field(None, description="the document's own date (else its commit time) before")

    def to_filters(self) -> Filters:
        return Filters(
            source=_as_tuple(self.source),
            path_prefix=self.path_prefix,
            type=_as_tuple(self.type),
            county=_as_tuple(self.county),
            dataset=_as_tuple(self.dataset),
            worldview_id=_as_tuple(self.worldview_id),
            local_resource_id=_as_tuple(self.local_resource_id),
            seal_state=self.seal_state,
            min_attention=self.min_attention,
            last_seen_breath=self.last_seen_breath,
            updated_after=_utc(self.updated_after),
            updated_before=_utc(self.updated_before),
            dated_after=_utc(self.dated_after),
            dated_before=_utc(self.dated_before),
        )


class QueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)

    query: Text
    top_k: int = Field(10, ge=1, le=200)
    collections: list[Name] | None = Field(
        None, min_length=1, max_length=MAX_VALUES, description="restrict to these collections"
    )
    filters: QueryFilters = Field(default_factory=QueryFilters)
    mode: Literal["dense", "sparse", "hybrid"] = "hybrid"
    return_: Literal["chunks", "documents"] = Field(
        "chunks", alias="return", description="`documents`: each parent file once, whole text, ranked by its best chunk"
    )
    min_score: float | None = Field(
        None, ge=-MAX_SCORE, le=MAX_SCORE, description="drop results scoring below this (in the mode's score scale)"
    )
    min_score_normalized: float | None = Field(
        None, ge=0, le=1, description="drop results whose `score_normalized` (0..1, one scale for every mode) is below"
    )
    recency_bias: float = Field(0.0, ge=0, le=10, description="boost × 0.5^(age / half-life) by `updated_at`")
    recency_half_life_days: float | None = Field(
        None, gt=0, le=1_000_000, description="defaults to the server's setting"
    )
    attention_boost: float = Field(
        DEFAULT_ATTENTION_BOOST,
        ge=0,
        le=1,
        description="living memory: score × (1 + boost · e/(e + 1)), e the confirmed-usefulness attention; at most "
        "×(1 + boost); 0 ranks without attention (docs/attention.md)",
    )
    consider_also: int = Field(
        3, ge=0, le=10, description="how many related high-attention chunks to suggest beside the results (0: none)"
    )


class Provenance(BaseModel):
    path: str
    commit: str
    timestamp: str


class ChunkRecord(BaseModel):
    """A chunk per ``schemas/chunk.schema.json``."""

    chunk_id: str
    source: str
    content: str
    seal_state: Literal["OPEN", "SEALED"]
    last_breath_seen: str | None
    attention_score: float
    provenance: Provenance
    metadata: dict[str, Any]


class ScoreParts(BaseModel):
    dense: float | None = Field(None, description="cosine similarity of the query and chunk vectors")
    sparse: float | None = Field(None, description="BM25 score")
    sentence: float | None = Field(
        None,
        description="hybrid: cosine similarity of the query and the chunk's best sentence, for a chunk with sentence "
        "vectors (livemem.index.sentences), blended into its dense part",
    )


class QueryResult(ChunkRecord):
    score: float
    score_normalized: float | None = Field(
        None,
        description="the score on one scale whatever the mode, 0..1 (livemem.query.fusion.normalized_score): hybrid "
        "relative to the most the fusion can give, dense the cosine, sparse relative to the query's best BM25; the "
        "relevance part, before recency and attention (they reorder results, never move this scale)",
    )
    collection: str
    scores: ScoreParts
    parent_id: str | None = Field(None, description="with return=documents: the parent document")
    matched_chunk_ids: list[str] | None = Field(None, description="with return=documents: its matching chunks")


class Suggestion(ChunkRecord):
    """Not a result: a chunk often retrieved together with the results, that people found worth attention."""

    collection: str
    suggestion: Literal[True] = True
    strength: float = Field(description="Σ over related results of relation weight × attention")
    related_to: list[str] = Field(description="the results it was retrieved together with")


class QueryResponse(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    results: list[QueryResult]
    consider_also: list[Suggestion] = Field(
        default_factory=list, description="suggestions beside the results (from the nightly rollup), marked as such"
    )
    results_by_source: dict[str, list[QueryResult]] = Field(description="the results grouped by collection")
    index_version: str
    trace_id: str
    mode: str
    return_: str = Field(alias="return")
    candidates: int = Field(description="chunks that passed the collections and filters")
    cached: bool


class Verification(BaseModel):
    status: Literal["current", "changed", "missing"]
    detail: str
    indexed_commit: str
    checked_commit: str | None


class ChunkResponse(ChunkRecord):
    collection: str
    index_version: str
    verification: Verification | None = None


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trace_id: str = Field(..., pattern=TRACE_ID_PATTERN, max_length=4096)
    chunk_ids: list[ChunkId] = Field(default_factory=list, max_length=200)
    useful: bool
    comment: str | None = Field(None, max_length=2000)
    personal: bool = Field(False, description="also nudge these chunks for this caller only (docs/personal-memory.md)")
    user_id: str | None = Field(None, pattern=r"^[A-Za-z0-9._@:-]{1,128}$", description="a user within the key")


class FeedbackResponse(BaseModel):
    trace_id: str
    recorded: int


class Health(BaseModel):
    status: Literal["ok"]
    index_version: str
    index_created_at: str | None
    index_age_s: float | None
    model: str


class ErrorBody(BaseModel):
    detail: Any
