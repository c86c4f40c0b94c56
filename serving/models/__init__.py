"""Every request and response body of the HTTP app, in one package (so ``/openapi.json`` documents every field):
this module holds the shared pieces and the bodies of /query, /feedback, /chunks and /healthz; ``context`` those of
/context, /chat and /v1/chat/completions; ``gis``, ``facts``, ``memory``, ``resources`` and ``compat`` those of
their routers. The MCP server answers with the same models."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo

from livemem.query.types import DEFAULT_ATTENTION_BOOST, Filters
from livemem.usage.traces import TRACE_ID_PATTERN
from serving.models import examples

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


def _as_tuple(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _utc(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


# A request's choice of an older version (POST /query, /context, /chat, the MCP tools; docs/versions.md)
VersionId = Annotated[
    str | None,
    Field(
        max_length=64,
        description="answer from this kept index version (its id, or `current`) instead of CURRENT (docs/versions.md)",
    ),
]
AsOf = Annotated[
    str | None,
    Field(
        max_length=64,
        description="answer from the version that was CURRENT at this ISO 8601 date-time (a date alone: the end of "
        "that UTC day), or the newest kept version holding this commit of a source (docs/versions.md)",
    ),
]


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
    ) = Field(None, description="the chunk's file kind: markdown (and documents), code, or other text")
    county: Values | None = Field(
        None, description="county name(s) a source's metadata rules gave the chunk's file (e.g. `Fayette`)"
    )
    dataset: Values | None = Field(None, description="dataset name(s) from the sources' metadata rules")
    worldview_id: Values | None = Field(None, description="GBIM worldview id(s) from the sources' metadata rules")
    local_resource_id: Values | None = Field(
        None, description="registry program id(s) a file is about (metadata rules), e.g. `fay-dhhr-snap`"
    )
    seal_state: Literal["OPEN", "SEALED"] | None = Field(
        None, description="SEALED: authoritative files (the ∞Δ∞ marker or `sealed:` in the sources); OPEN: the rest"
    )
    min_attention: float | None = Field(
        None, ge=0, le=MAX_SCORE, description="attention at least this (confirmed usefulness; 0 for never confirmed)"
    )
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
    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {"query": "Where do I apply for SNAP in Fayette County?", "top_k": 5, "filters": {"county": "Fayette"}},
                {
                    "query": "LIHEAP heating bill help",
                    "collections": ["wv_benefits"],
                    "mode": "hybrid",
                    "return": "documents",
                    "min_score_normalized": 0.3,
                    "filters": {"type": "markdown", "updated_after": "2026-01-01T00:00:00Z"},
                },
            ]
        },
    )

    query: Text = Field(description="the search text, 1 to 4,000 characters, not only whitespace")
    top_k: int = Field(10, ge=1, le=200, description="how many results (chunks, or documents) to return, 1 to 200")
    collections: list[Name] | None = Field(
        None, min_length=1, max_length=MAX_VALUES, description="restrict to these collections"
    )
    filters: QueryFilters = Field(
        default_factory=QueryFilters, description="metadata filters applied before ranking (every one given must hold)"
    )
    mode: Literal["dense", "sparse", "hybrid"] = Field(
        "hybrid",
        description="dense: embedding cosine; sparse: BM25; hybrid: both fused (the server's RAG_FUSION, default "
        "linear 1 : 0.5)",
    )
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
    version: VersionId = None
    as_of: AsOf = None


class AnsweredFrom(BaseModel):
    """Which version answered a request that named one (``version`` / ``as_of``)."""

    version_id: str = Field(description="the published index version that answered")
    current: bool = Field(description="false: an older version answered, not the one CURRENT names now")
    how: str = Field(description="version, current, as_of_time or as_of_commit")
    asked: str | None = Field(None, description="the version or as_of the request gave")


# ``answered_from`` of every answer that may come from an older version (null unless the request named one)
AnsweredFromField = Annotated[
    AnsweredFrom | None,
    Field(description="only when the request named a version or as_of: which version answered, and whether current"),
]


class Provenance(BaseModel):
    """Where a chunk comes from in its repository."""

    path: str = Field(description="the file's path inside the repository")
    commit: str = Field(description="the last commit (40 hex digits) that changed the file, at the indexed ref")
    timestamp: str = Field(description="that commit's committer time (ISO 8601, UTC)")


class ChunkRecord(BaseModel):
    """A chunk per ``schemas/chunk.schema.json``."""

    chunk_id: str = Field(description="the chunk's id (UUID): stable while its source, file and text stay the same")
    source: str = Field(description="the configured source (sources.yaml `name`) the chunk came from")
    content: str = Field(description="the chunk's text (with return=documents: the whole parent document)")
    seal_state: Literal["OPEN", "SEALED"] = Field(
        description="SEALED: an authoritative file (never decays in attention); OPEN: every other"
    )
    last_breath_seen: str | None = Field(
        description="the latest breath phase (`Δn`) in which the chunk was retrieved, from the nightly rollup; null "
        "before its first"
    )
    attention_score: float = Field(
        description="confirmed usefulness from feedback (0 or more; decays daily unless sealed), as of the last "
        "nightly rollup (docs/attention.md)"
    )
    provenance: Provenance = Field(description="the file and commit the chunk was read from")
    metadata: dict[str, Any] = Field(
        description="type, size (UTF-8 bytes), created_at, updated_at, collection, access, heading_path, "
        "chunk_index, parent_id, content_hash, and what the sources' metadata rules set (county, dataset, ...); "
        "documents add format, extractor, page, page_end (schemas/chunk.schema.json)"
    )


class ScoreParts(BaseModel):
    dense: float | None = Field(
        None, description="cosine similarity of the query and chunk vectors, -1..1 (null: not on the dense list)"
    )
    sparse: float | None = Field(None, description="BM25 score, 0 or more (null: not on the BM25 list)")
    sentence: float | None = Field(
        None,
        description="hybrid: cosine similarity of the query and the chunk's best sentence, for a chunk with sentence "
        "vectors (livemem.index.sentences), blended into its dense part",
    )


class QueryResult(ChunkRecord):
    score: float = Field(
        description="the ranking score, in the mode's scale (hybrid linear fusion: 0..1.5; dense: cosine; sparse: "
        "BM25), after recency and attention boosts; results come in its order"
    )
    score_normalized: float | None = Field(
        None,
        description="the score on one scale whatever the mode, 0..1 (livemem.query.fusion.normalized_score): hybrid "
        "relative to the most the fusion can give, dense the cosine, sparse relative to the query's best BM25; the "
        "relevance part, before recency and attention (they reorder results, never move this scale)",
    )
    collection: str = Field(description="the collection the chunk belongs to (its source's `collection`)")
    scores: ScoreParts = Field(description="the parts the score was made of, per retriever")
    parent_id: str | None = Field(None, description="with return=documents: the parent document")
    matched_chunk_ids: list[str] | None = Field(None, description="with return=documents: its matching chunks")


class Suggestion(ChunkRecord):
    """Not a result: a chunk often retrieved together with the results, or confirmed useful by the people who
    confirmed them, that people found worth attention."""

    collection: str = Field(description="the collection the chunk belongs to")
    suggestion: Literal[True] = Field(True, description="always true: marks a suggestion, never a result")
    strength: float = Field(description="Σ over related results of relation weight × attention")
    related_to: list[str] = Field(description="the results it was retrieved or confirmed together with")


class QueryResponse(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {
                    "results": [examples.QUERY_RESULT],
                    "consider_also": [],
                    "results_by_source": {"wv_benefits": [examples.QUERY_RESULT]},
                    "index_version": examples.VERSION,
                    "trace_id": examples.TRACE_ID,
                    "mode": "hybrid",
                    "return": "chunks",
                    "candidates": 41,
                    "cached": False,
                }
            ]
        },
    )

    results: list[QueryResult] = Field(description="the ranked results, best first, at most top_k")
    consider_also: list[Suggestion] = Field(
        default_factory=list, description="suggestions beside the results (from the nightly rollup), marked as such"
    )
    results_by_source: dict[str, list[QueryResult]] = Field(description="the results grouped by collection")
    index_version: str = Field(description="the published index version that answered (one version per answer)")
    trace_id: str = Field(description="this answer's signed trace id: send it to /feedback to judge the results")
    mode: str = Field(description="the retrieval mode used: dense, sparse or hybrid")
    return_: str = Field(alias="return", description="what the results are: chunks or documents")
    candidates: int = Field(description="chunks that passed the collections and filters")
    cached: bool = Field(description="true: served from this process's result cache (same request, same version)")
    answered_from: AnsweredFromField = None


class Verification(BaseModel):
    """The chunk checked against its source repository now (GET /chunks/{id}?verify=true)."""

    status: Literal["current", "changed", "missing"] = Field(
        description="current: the file at the source's ref still holds the chunk's text; changed: it no longer "
        "does; missing: the file, the ref or the repository is gone"
    )
    detail: str = Field(description="what was found, in words (server paths left out)")
    indexed_commit: str = Field(description="the commit the chunk was indexed from")
    checked_commit: str | None = Field(description="the commit the source's ref names now (null: not resolvable)")


class ChunkResponse(ChunkRecord):
    collection: str = Field(description="the collection the chunk belongs to")
    index_version: str = Field(description="the published index version read")
    verification: Verification | None = Field(None, description="with verify=true: the check against the source")


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "trace_id": examples.TRACE_ID,
                    "chunk_ids": [examples.QUERY_RESULT["chunk_id"]],
                    "useful": True,
                    "comment": "the Oak Hill office was right",
                },
                {"trace_id": examples.TRACE_ID, "useful": False},
            ]
        },
    )

    trace_id: str = Field(
        ..., pattern=TRACE_ID_PATTERN, max_length=4096, description="the trace_id of an answer this service gave you"
    )
    chunk_ids: list[ChunkId] = Field(
        default_factory=list,
        max_length=200,
        description="the chunks judged, each one that trace returned (400 otherwise); empty: the whole answer",
    )
    useful: bool = Field(description="true: useful (raises attention); false: not useful (lowers it)")
    comment: str | None = Field(None, max_length=2000, description="free text kept with the feedback in the traces")
    personal: bool = Field(False, description="also nudge these chunks for this caller only (docs/personal-memory.md)")
    user_id: str | None = Field(None, pattern=r"^[A-Za-z0-9._@:-]{1,128}$", description="a user within the key")


class FeedbackResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"trace_id": examples.TRACE_ID, "recorded": 1}]})

    trace_id: str = Field(description="the trace the feedback was recorded for")
    recorded: int = Field(description="feedback events written: one per chunk judged (one for a whole answer)")


class Health(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "status": "ok",
                    "index_version": examples.VERSION,
                    "index_created_at": "2026-11-22T00:34:12+00:00",
                    "index_age_s": 3721.4,
                    "model": "sentence-transformers/all-MiniLM-L6-v2",
                }
            ]
        }
    )

    status: Literal["ok"] = Field(description="always ok: a damaged or missing version is a 503 instead")
    index_version: str = Field(description="the published version this process serves")
    index_created_at: str | None = Field(description="when that version was built (ISO 8601, UTC)")
    index_age_s: float | None = Field(description="seconds since it was built (null: no creation time recorded)")
    model: str = Field(description="the embedding model the version was built with (e.g. all-MiniLM-L6-v2)")


class ErrorBody(BaseModel):
    """Every error of the app outside /v1 (FastAPI's shape)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "detail": "unknown API key (X-API-Key or Authorization: Bearer); omit it, or send 'public', to "
                    "query as the public role"
                },
                {"detail": "no index published yet: run `make materialize`"},
            ]
        }
    )

    detail: Any = Field(
        description="what was wrong, as a sentence naming the field, route or version; a 422 carries the list of "
        "problems instead (InvalidRequest)"
    )


class ValidationProblem(BaseModel):
    """One reason a request was refused with 422."""

    type: str = Field(description="the kind of problem (pydantic's error type), e.g. `missing`, `greater_than_equal`")
    loc: list[str | int] = Field(
        description="where: `body`, `query`, `path` or `header`, then the field's path (list items by index)"
    )
    msg: str = Field(description="what is wrong, in words (at most 200 characters)")
    input: Any = Field(
        None,
        description="the value sent, summarised, never echoed whole: numbers and booleans as sent, text cut at 200 "
        "characters, a list or object as `<list of 3 items>`; absent where nothing was sent (`missing`)",
    )


class InvalidRequest(BaseModel):
    """The 422 answer to a request that does not match its route's parameters or body."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "detail": [
                        {
                            "type": "greater_than_equal",
                            "loc": ["body", "top_k"],
                            "msg": "Input should be greater than or equal to 1",
                            "input": 0,
                        }
                    ],
                    "message": "body.top_k: Input should be greater than or equal to 1",
                }
            ]
        }
    )

    detail: list[ValidationProblem] = Field(description="the problems, at most 20, each with where it is")
    message: str = Field(
        description="one line naming each problem and its field (`body.top_k: Input should be greater than or equal "
        "to 1`), ending `; and N more problems` past the first 20"
    )
