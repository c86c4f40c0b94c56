"""The structured side of GBIM: relation triples by pattern (``GET /facts``) and read-only SPARQL (``POST /facts/sparql``).

Both see only the entities the caller's role may read (a triple is visible when its subject entity is), from the
version the request's snapshot serves. SPARQL is parsed first: anything but a SELECT (or ASK) is refused; a query
runs with a time limit and its rows are capped.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as QueryTimeout
from functools import lru_cache
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, ConfigDict, Field

from livemem.gis_index import GisIndex, cached_gis_index
from serving.deps import CallerRole, CurrentSnapshot
from serving.models import ErrorBody
from serving.routers.gis import gis_index

router = APIRouter(tags=["facts"])

SPARQL_TIMEOUT_S = 2.0
SPARQL_MAX_ROWS = 1000
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sparql")
_GRAPH_LOCK = threading.Lock()


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


@lru_cache(maxsize=8)
def _graph(version_dir: str, access: frozenset[str]):
    from livemem.gbim import rdf_graph

    index = cached_gis_index(version_dir)
    entities = _visible(index, access)
    ids = {e["entity_id"] for e in entities}
    relations = [r for e in entities for r in index.relations.get(e["entity_id"], ()) if r["subject"] in ids]
    return rdf_graph(entities, relations)


@router.post(
    "/facts/sparql",
    response_model=SparqlResponse,
    responses={400: {"model": ErrorBody}, 408: {"model": ErrorBody}, 503: {"model": ErrorBody}},
)
def sparql(body: SparqlRequest, role: CallerRole, snap: CurrentSnapshot) -> SparqlResponse:
    """Run a read-only SPARQL SELECT (or ASK) over the entities and relations (prefixes gbim:, geo:, rdfs:)."""
    from pyparsing import ParseException
    from rdflib.plugins.sparql import prepareQuery

    gis_index(snap)  # 503 when the version has no GBIM export
    try:
        prepared = prepareQuery(
            body.query,
            initNs={
                "gbim": "https://living-memory.example.org/gbim/",
                "geo": "http://www.w3.org/2003/01/geo/wgs84_pos#",
                "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
                "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
            },
        )
    except (ParseException, Exception) as exc:  # rdflib raises several kinds for bad queries
        raise HTTPException(400, f"not a valid SPARQL query: {exc}") from exc
    kind = prepared.algebra.name
    if kind not in ("SelectQuery", "AskQuery"):
        raise HTTPException(400, f"only SELECT and ASK queries are allowed here, not {kind.removesuffix('Query')}")
    with _GRAPH_LOCK:
        graph = _graph(str(snap.path), role.access)
    future = _POOL.submit(lambda: _run(graph, prepared, body.limit))
    try:
        variables, rows, boolean, truncated = future.result(timeout=SPARQL_TIMEOUT_S)
    except QueryTimeout as exc:
        raise HTTPException(408, f"the query ran longer than {SPARQL_TIMEOUT_S} s; narrow it down") from exc
    return SparqlResponse(
        variables=variables, rows=rows, boolean=boolean, truncated=truncated, index_version=snap.version_id
    )


def _run(graph, prepared, limit: int):
    result = graph.query(prepared)
    if result.type == "ASK":
        return [], [], bool(result.askAnswer), False
    variables = [str(v) for v in result.vars]
    rows = []
    truncated = False
    for row in result:
        if len(rows) == limit:
            truncated = True
            break
        rows.append({v: (None if row[i] is None else str(row[i])) for i, v in enumerate(variables)})
    return variables, rows, None, truncated
