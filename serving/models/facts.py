"""Request and response bodies of serving/routers/facts.py."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SPARQL_MAX_ROWS = 1000


SPARQL_MAX_QUERY_CHARS = 5000


class Fact(BaseModel):
    subject: str = Field(description="GBIM entity id")
    subject_label: str
    predicate: Literal["located_in", "serves_zip", "part_of", "serves_program", "operated_by", "near"] | str
    object: str
    object_kind: str = Field(description="county, zip, worldview, program, organization or entity")
    object_label: str | None = Field(None, description="the label of an entity object (`near`)")
    provenance: dict[str, Any]


class MatchedEntity(BaseModel):
    entity_id: str
    label: str


class FactsResponse(BaseModel):
    facts: list[Fact]
    total: int = Field(description="matching triples before `limit`")
    matched: list[MatchedEntity] | None = Field(
        None, description="with `name`: the entities it found, best match first"
    )
    index_version: str


class SparqlRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        ..., min_length=1, max_length=SPARQL_MAX_QUERY_CHARS, description="a SPARQL SELECT, ASK, CONSTRUCT or DESCRIBE"
    )
    limit: int = Field(100, ge=1, le=SPARQL_MAX_ROWS, description="rows (or triples) returned at most")


class SparqlResponse(BaseModel):
    variables: list[str]
    rows: list[dict[str, str | None]]
    boolean: bool | None = Field(None, description="the answer of an ASK query")
    truncated: bool
    index_version: str
