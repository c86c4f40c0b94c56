"""The structured side of GBIM: relation triples by pattern (``GET /facts``) and read-only SPARQL (``POST /facts/sparql``).

Both see only the entities the caller's role may read (a triple is visible when its subject entity is), from the
version the request's snapshot serves. SPARQL runs in worker processes (``livemem.sparql_worker``) that are killed
when a query overruns its time limit: only SELECT and ASK, no SERVICE or remote loading, rows and memory capped.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from livemem.gis_index import GisIndex
from livemem.sparql_worker import (
    SparqlBusy,
    SparqlError,
    SparqlPool,
    SparqlRefused,
    SparqlTimeout,
    SparqlUnavailable,
)
from serving.deps import CallerRole, CurrentSnapshot
from serving.models import ErrorBody
from serving.routers.gis import gis_index

router = APIRouter(tags=["facts"])

SPARQL_MAX_ROWS = 1000


class Fact(BaseModel):
    subject: str = Field(description="GBIM entity id")
    subject_label: str
    predicate: Literal["located_in", "serves_zip", "part_of"] | str
    object: str
    object_kind: str = Field(description="county, zip, worldview, ...")
    provenance: dict[str, Any]


class FactsResponse(BaseModel):
    facts: list[Fact]
    total: int = Field(description="matching triples before `limit`")
    index_version: str


class SparqlRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(..., min_length=1, max_length=5000, description="a SPARQL SELECT or ASK query")
    limit: int = Field(100, ge=1, le=SPARQL_MAX_ROWS, description="rows returned at most")


class SparqlResponse(BaseModel):
    variables: list[str]
    rows: list[dict[str, str | None]]
    boolean: bool | None = Field(None, description="the answer of an ASK query")
    truncated: bool
    index_version: str


def _visible(index: GisIndex, access: frozenset[str]) -> list[dict[str, Any]]:
    return [e for e in index.entities if e["access"] in access]


@router.get("/facts", response_model=FactsResponse, responses={401: {"model": ErrorBody}, 503: {"model": ErrorBody}})
def facts(
    role: CallerRole,
    snap: CurrentSnapshot,
    subject: Annotated[str | None, Query(max_length=200, description="entity id")] = None,
    predicate: Annotated[str | None, Query(max_length=100, description="located_in, serves_zip, part_of")] = None,
    object: Annotated[str | None, Query(max_length=200, description="county, ZIP or worldview")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> FactsResponse:
    """Relation triples matching the given parts (each optional; counties match without case or "County")."""
    index = gis_index(snap)
    wanted_object = _norm(object) if object else None
    found = []
    for entity in _visible(index, role.access):
        if subject and entity["entity_id"] != subject:
            continue
        for rel in index.relations.get(entity["entity_id"], ()):
            if predicate and rel["predicate"] != predicate:
                continue
            if wanted_object and _norm(rel["object"]) != wanted_object:
                continue
            found.append({**rel, "subject_label": entity["label"]})
    return FactsResponse(facts=found[:limit], total=len(found), index_version=snap.version_id)


def _norm(value: str) -> str:
    value = value.strip().lower()
    return value[: -len(" county")] if value.endswith(" county") else value


def sparql_pool(request: Request) -> SparqlPool:
    return request.app.state.sparql


_STATUS = {SparqlRefused: 400, SparqlTimeout: 408, SparqlBusy: 429, SparqlUnavailable: 503}


@router.post(
    "/facts/sparql",
    response_model=SparqlResponse,
    responses={
        400: {"model": ErrorBody, "description": "not a valid, supported read-only query, or over its limits"},
        408: {"model": ErrorBody, "description": "ran past the time limit (and was stopped)"},
        429: {"model": ErrorBody, "description": "every SPARQL worker is busy"},
        503: {"model": ErrorBody},
    },
)
def sparql(
    body: SparqlRequest, role: CallerRole, snap: CurrentSnapshot, pool: Annotated[SparqlPool, Depends(sparql_pool)]
) -> SparqlResponse:
    """Run a read-only SPARQL SELECT (or ASK) over the entities and relations (prefixes gbim:, geo:, rdfs:).

    Not supported (400): updates, CONSTRUCT, DESCRIBE, SERVICE, FROM / FROM NAMED, GRAPH."""
    gis_index(snap)  # 503 when the version has no GBIM export
    try:
        result = pool.run(str(snap.path), role.access, body.query, body.limit)
    except SparqlError as exc:
        status = _STATUS[type(exc)]
        raise HTTPException(status, str(exc), headers={"Retry-After": "1"} if status == 429 else None) from exc
    return SparqlResponse(**result, index_version=snap.version_id)
