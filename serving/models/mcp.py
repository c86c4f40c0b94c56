"""What the MCP tools of serving/mcp.py answer with, besides the HTTP bodies they share."""

from __future__ import annotations

from pydantic import BaseModel, Field

from serving.models import QueryResponse
from serving.models.gis import Relation


# --- outputs the HTTP API has no model for ----------------------------------------------------------------------
class QueryOutput(QueryResponse):
    """``POST /query``'s answer (the same service answers both), with the collections searched."""

    collections: list[str] = Field(description="the collections searched")


class IndexStats(BaseModel):
    index_version: str
    model: str = Field(description="the embedding model of the version")
    collections: dict[str, int] = Field(description="chunks per collection this role may read")
    chunks: int
    gbim_entities: int = Field(description="GBIM entities this role may read")
    registry_rows: int = Field(description="rows of the local_resources registry (public data)")


class SourceAtVersion(BaseModel):
    commit: str | None = Field(description="the commit of the source repository the version holds")
    collection: str | None
    access: str
    files: int | None = Field(description="files indexed")
    chunks: int | None


class ManifestCounts(BaseModel):
    chunks: int = Field(description="chunks this role may read")
    files: int | None = Field(description="files indexed (None: not shown to a role that may not read every one)")
    sealed_chunks: int | None = Field(description="authoritative chunks (None: as for files)")
    gbim_entities: int | None = Field(description="GBIM entities (None: no export, or some hidden from this role)")
    gbim_relations: int | None
    registry_rows: int | None = Field(description="rows of the local_resources registry published")


class IndexManifest(BaseModel):
    """The resource livemem://index/manifest: the served version in brief, as this role may see it."""

    version_id: str
    published_at: str | None = Field(description="when the version was first published (ISO 8601, UTC)")
    created_at: str | None = Field(description="when it was staged")
    base_version: str | None = Field(description="the version it was built from incrementally")
    model: str = Field(description="the embedding model")
    breath_phase: str | None = Field(description="the Δ-phase of the breath file when it was built")
    collections: dict[str, int] = Field(description="chunks per collection this role may read")
    sources: dict[str, SourceAtVersion] = Field(description="the git sources this role may read, by name")
    counts: ManifestCounts


class EntityFacts(BaseModel):
    entity_id: str
    label: str
    county: str | None
    relations: list[Relation] = Field(description="the triples whose subject is the entity")
    index_version: str


class SparqlOutput(BaseModel):
    variables: list[str]
    rows: list[dict[str, str | None]]
    boolean: bool | None = Field(None, description="the answer of an ASK query")
    truncated: bool = Field(description="more rows matched than `limit`")
    index_version: str


class AnswerCacheStats(BaseModel):
    entries: int = Field(description="answers held in this process's memory")
    max_entries: int = Field(description="0: the answer cache is off")
    ttl_s: float = Field(description="how long an answer is kept")
    persistent: bool = Field(description="whether a SQLite tier shared by this machine's processes is configured")
    hits: dict[str, int] = Field(description="answers served from the cache, per kind (context, chat)")
    misses: dict[str, int] = Field(description="answers computed, per kind")
    persistent_hits: int
    warmed_questions: int = Field(description="warm-up questions answered by this process")


class WarmUpResult(BaseModel):
    index_version: str
    answered: list[str] = Field(description="the questions now in the cache, as chat and as context")
    entries: int


class InvalidateResult(BaseModel):
    dropped: int = Field(description="entries removed (memory of this process and the persistent tier)")


class ReindexStarted(BaseModel):
    run_id: str = Field(description="the Dagster run id (see `reindex_status` or the Dagster UI)")
    job: str
    pid: int = Field(description="the process running `livemem materialize`")
    dagster_home: str


class ReindexStatus(BaseModel):
    run_id: str
    job: str
    status: str = Field(description="Dagster's run status: QUEUED, STARTING, STARTED, SUCCESS, FAILURE, CANCELED...")
    finished: bool = Field(
        description="Dagster's verdict: the run ended (a run stopped before it began stays unfinished)"
    )
    launcher_running: bool | None = Field(
        description="whether the `livemem materialize` process this server started is still running (None: another "
        "server started it)"
    )
