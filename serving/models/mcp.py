"""What the MCP tools of serving/mcp.py answer with, besides the HTTP bodies they share."""

from __future__ import annotations

from pydantic import BaseModel, Field

from serving.models import QueryResult
from serving.models.gis import Relation


# --- outputs the HTTP API has no model for ----------------------------------------------------------------------
class QueryOutput(BaseModel):
    index_version: str
    trace_id: str = Field(description="send it to `feedback` to say whether the results were useful")
    collections: list[str] = Field(description="the collections searched")
    results: list[QueryResult]


class IndexStats(BaseModel):
    index_version: str
    model: str = Field(description="the embedding model of the version")
    collections: dict[str, int] = Field(description="chunks per collection this role may read")
    chunks: int
    gbim_entities: int = Field(description="GBIM entities this role may read")
    registry_rows: int = Field(description="rows of the local_resources registry (public data)")


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
