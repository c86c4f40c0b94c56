"""The structured side of GBIM: relation triples (``GET /facts``), an entity's RDF (``GET /facts/{entity_id}``) and
a read-only SPARQL 1.1 Protocol endpoint (``GET`` / ``POST /facts/sparql``; a ``GET`` without a query: its
SPARQL 1.1 Service Description), and the entity IRIs themselves (``GET /gbim/entity/{entity_id}``: 303 to the
entity's RDF), so that the IRIs in every answer dereference when ``RAG_RDF_BASE_IRI`` is this server's URL.

All of them see only the entities the caller's role may read (a triple is visible when its subject entity is),
from the version the request's snapshot serves, and answer in the media type the ``Accept`` header prefers:
facts as JSON, Turtle, N-Triples, JSON-LD or RDF/XML; SPARQL results as the SPARQL JSON, XML, CSV or TSV results
formats (or this API's own JSON for a JSON body), CONSTRUCT and DESCRIBE as RDF. SPARQL runs in worker
processes (``livemem.gbim.sparql_worker``) that are killed when a query overruns its time limit: no update, SERVICE
or remote loading, rows and memory capped (``docs/security.md``, ``docs/sparql.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from pydantic import ValidationError

from livemem.gbim import RDF_MEDIA_TYPES, rdf_graph, serialize_rdf
from livemem.gbim.sparql_worker import (
    LEGACY_JSON,
    TSV,
    ResultFormats,
    SparqlBusy,
    SparqlError,
    SparqlNotAcceptable,
    SparqlPool,
    SparqlRefused,
    SparqlTimeout,
    SparqlUnavailable,
    SparqlWarming,
    service_description,
)
from livemem.query.gis_index import GisIndex
from serving.deps import CallerRole, CurrentSnapshot, State, negotiate
from serving.models import UUID_PATTERN, ErrorBody
from serving.models.examples import HUB, VERSION
from serving.models.facts import (
    SPARQL_MAX_QUERY_CHARS,
    SPARQL_MAX_ROWS,
    FactsResponse,
    SparqlRequest,
    SparqlResponse,
)
from serving.services.facts import Facts
from serving.services.gis import gis_index
from serving.services.paging import Cursor, cursor_query, encode, http_page, link_next

router = APIRouter(tags=["facts"])

# Response headers beside the standard formats, which have no place for them.
VERSION_HEADER = "X-Index-Version"
TRUNCATED_HEADER = "X-Results-Truncated"

SPARQL_JSON = "application/sparql-results+json"
SPARQL_XML = "application/sparql-results+xml"
TURTLE, N_TRIPLES, JSON_LD, RDF_XML = (
    "text/turtle",
    "application/n-triples",
    "application/ld+json",
    "application/rdf+xml",
)
# What each kind of answer can be sent as: the media type a client may ask for -> the one sent, best first (on a
# tie, such as */*, the first wins). Plain JSON and XML, and older Turtle names, are what common clients send.
SELECT_OFFERS = {SPARQL_JSON: SPARQL_JSON, SPARQL_XML: SPARQL_XML, "text/csv": "text/csv", TSV: TSV,
                 "application/json": SPARQL_JSON, "application/xml": SPARQL_XML}  # fmt: skip
ASK_OFFERS = {k: v for k, v in SELECT_OFFERS.items() if v not in ("text/csv", TSV)}  # ASK has no CSV or TSV form
RDF_OFFERS = {TURTLE: TURTLE, N_TRIPLES: N_TRIPLES, JSON_LD: JSON_LD, RDF_XML: RDF_XML, "application/json": JSON_LD,
              "application/turtle": TURTLE, "application/x-turtle": TURTLE, "application/xml": RDF_XML}  # fmt: skip
RDF_RESPONSES = {"content": {media_type: {"schema": {"type": "string"}} for media_type in RDF_MEDIA_TYPES}}


# examples for /openapi.json (the prefixes gbim:, geo:, rdfs:, rdf: are predefined)
SELECT_EXAMPLE = (
    'SELECT ?label ?lat ?long WHERE { ?e gbim:located_in ?c . ?c rdfs:label "Fayette" . '
    "?e rdfs:label ?label ; geo:lat ?lat ; geo:long ?long } ORDER BY ?label LIMIT 10"
)
ASK_EXAMPLE = 'ASK { ?e gbim:located_in ?c . ?c rdfs:label "Fayette" }'
FACTS_EXAMPLE_FILTERS = {"subject": None, "name": None, "predicate": "located_in", "object": None}
VARY = {"Vary": "Accept"}  # every answer of a negotiated route: a shared cache must key it on Accept


def _not_acceptable(offers: dict[str, str]) -> HTTPException:
    return HTTPException(406, f"the Accept header names no media type offered here: {', '.join(offers)}", headers=VARY)


def gbim_iri(request: Request) -> str:
    """The namespace of the served nodes and predicates: ``RAG_RDF_BASE_IRI`` + ``gbim/``."""
    return f"{request.app.state.serving.settings.rdf_base_iri}gbim/"


def _rdf_response(graph: Any, media_type: str, version_id: str, truncated: bool = False) -> Response:
    headers = {"Vary": "Accept", VERSION_HEADER: version_id}
    if truncated:
        headers[TRUNCATED_HEADER] = "true"
    return Response(serialize_rdf(graph, media_type), media_type=media_type, headers=headers)


# The query parameters of GET /facts, as the OpenAPI document describes them.
Subject = Annotated[
    str | None, Query(max_length=200, description="entity id", examples=["457cdafc-1f65-57ee-950b-b5ac4575a6d0"])
]
Name = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=200,
        description="entity name: the exact label first, then labels with it",
        examples=["Oak Hill Benefits Hub"],
    ),
]
Predicate = Annotated[
    str | None,
    Query(
        max_length=100,
        description="located_in, serves_zip, part_of, serves_program, operated_by, near",
        examples=["located_in"],
    ),
]
Object = Annotated[
    str | None,
    Query(
        max_length=200,
        description="county, ZIP, worldview, program, organization or entity id",
        examples=["Fayette"],
    ),
]
Limit = Annotated[int, Query(ge=1, le=1000, description="at most this many triples", examples=[100])]
FactsCursor = Annotated[
    Cursor,
    cursor_query(
        encode("/facts", VERSION, 100, FACTS_EXAMPLE_FILTERS),
        "triples",
        also=' (or its `Link: rel="next"` header, also for RDF)',
    ),
]


# HEAD: the GET's status and headers without the body (uvicorn drops it); not in the OpenAPI document, being the GET
@router.head("/facts", response_model=FactsResponse, include_in_schema=False)
@router.get(
    "/facts",
    response_model=FactsResponse,
    responses={
        200: RDF_RESPONSES,
        401: {"model": ErrorBody},
        406: {"model": ErrorBody},
        409: {"model": ErrorBody, "description": "`cursor` was issued for another index version: start again"},
        503: {"model": ErrorBody},
    },
)
def facts(
    request: Request,
    response: Response,
    state: State,
    role: CallerRole,
    snap: CurrentSnapshot,
    subject: Subject = None,
    name: Name = None,
    predicate: Predicate = None,
    object: Object = None,
    limit: Limit = 100,
    cursor: FactsCursor = None,
) -> FactsResponse | Response:
    """Relation triples matching the given parts (each optional; counties, programs and organizations match
    without case, counties also without "County"). ``name`` finds the subjects by their label
    (``livemem.gbim.find_entities``: the exact label, else labels starting with it, else labels holding all its
    words; ``matched`` lists them).

    With ``Accept: text/turtle``, ``application/n-triples``, ``application/ld+json`` or ``application/rdf+xml``:
    those triples as RDF, with their subjects' descriptions (type, label, dataset, WGS 84 position).

    At most `limit` triples; when more match, `next_cursor` (and, in every format, a `Link: rel="next"` header)
    continues after them: pages in turn give every triple once, in the order of one large page."""
    offers = {"application/json": "application/json", **{t: t for t in RDF_MEDIA_TYPES}}
    media_type = negotiate(request.headers.get("accept"), offers)
    if media_type is None:
        raise _not_acceptable(offers)
    # the cursor is checked before the triples are read: a bad one costs nothing
    filters = {"subject": subject, "name": name, "predicate": predicate, "object": object}
    page = http_page("/facts", snap.version_id, filters, cursor)
    result = state.facts.triples(snap, role, subject, name, predicate, object)
    shown = result.found[page.offset : page.offset + limit]
    next_cursor = page.next_cursor(len(shown), len(result.found))
    if media_type == "application/json":
        response.headers.update({**VARY, **link_next(request.url, next_cursor)})  # RDF to an RDF client, same URL
        return _facts_json(result, shown, snap.version_id, next_cursor)
    return _facts_rdf(request, result.index, shown, media_type, snap.version_id, next_cursor)


def _facts_json(result: Facts, shown: list[dict], version_id: str, next_cursor: str | None) -> FactsResponse:
    """A page of triples as this API's JSON: the page, how many matched, the subjects ``name`` matched."""
    found, matched = result.found, result.matched
    return FactsResponse(
        facts=shown,
        total=len(found),
        matched=None if matched is None else [{"entity_id": e["entity_id"], "label": e["label"]} for e in matched],
        index_version=version_id,
        next_cursor=next_cursor,
    )


def _facts_rdf(
    request: Request, index: GisIndex, shown: list[dict], media_type: str, version_id: str, next_cursor: str | None
) -> Response:
    """A page of triples as RDF with their subjects' descriptions, the next page in a ``Link`` header."""
    subjects = dict.fromkeys(f["subject"] for f in shown)
    entities = [index.entities[index.row_of[s]] for s in subjects]
    graph = rdf_graph(entities, shown, gbim_iri=gbim_iri(request))
    answer = _rdf_response(graph, media_type, version_id, next_cursor is not None)
    answer.headers.update(link_next(request.url, next_cursor))
    return answer


def sparql_pool(request: Request) -> SparqlPool:
    return request.app.state.sparql


_STATUS = {SparqlRefused: 400, SparqlNotAcceptable: 406, SparqlTimeout: 408, SparqlBusy: 429, SparqlUnavailable: 503}
_STATUS[SparqlWarming] = 408  # the limit passed while a replacement worker loaded the graph: retry in a moment
RETRY = (SparqlBusy, SparqlWarming)
SPARQL_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "not a valid, supported read-only query, or over its limits"},
    406: {"model": ErrorBody, "description": "the Accept header allows no format this kind of query is answered in"},
    408: {
        "model": ErrorBody,
        "description": "ran past the time limit (and was stopped), or could not start within it while a worker "
        "was replaced (then with Retry-After: 1)",
    },
    415: {"model": ErrorBody, "description": "a body that is not JSON, a form or application/sparql-query"},
    429: {"model": ErrorBody, "description": "every SPARQL worker is busy"},
    503: {"model": ErrorBody},
}
SPARQL_RESULTS = {
    "content": {
        SPARQL_JSON: {"schema": {"type": "object"}},
        SPARQL_XML: {"schema": {"type": "string"}},
        "text/csv": {"schema": {"type": "string"}},
        TSV: {"schema": {"type": "string"}},
        **RDF_RESPONSES["content"],
    },
    "description": "SELECT / ASK results (the JSON body's own JSON, or a SPARQL results format); CONSTRUCT / "
    "DESCRIBE: RDF; a GET without `query`: the SPARQL 1.1 Service Description (RDF, Turtle by default). Header {VERSION_HEADER}: the version answered from; {TRUNCATED_HEADER}: true when cut at "
    "the row limit",
}


@dataclass(frozen=True)
class SparqlCall:
    query: str
    limit: int
    own_json: bool  # a JSON body: SELECT and ASK answer this API's JSON unless Accept names a standard format


def _refuse_datasets(params: list[tuple[str, str]]) -> None:
    named = sorted({name for name, _ in params if name in ("default-graph-uri", "named-graph-uri")})
    if named:
        raise HTTPException(400, f"{' and '.join(named)} are not supported: the facts are one default graph")


def _validated(query: str, limit: int = SPARQL_MAX_ROWS, **extra: Any) -> SparqlRequest:
    try:
        return SparqlRequest.model_validate({"query": query, "limit": limit, **extra})
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from exc


async def posted_query(request: Request) -> SparqlCall:
    """The query of a POST: a JSON body (this API's), a form or an ``application/sparql-query`` body (the protocol)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await request.body()
    if not content_type or content_type == "application/json" or content_type.endswith("+json"):
        try:
            parsed = SparqlRequest.model_validate_json(body or b"null")
        except ValidationError as exc:
            raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from exc
        return SparqlCall(parsed.query, parsed.limit, own_json=True)
    if content_type == "application/sparql-update":
        raise HTTPException(400, "SPARQL Update is not allowed: this endpoint is read-only")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPException(400, "the body is not UTF-8 text") from exc
    params = parse_qsl(request.url.query, keep_blank_values=True)
    if content_type == "application/x-www-form-urlencoded":
        fields = parse_qsl(text, keep_blank_values=True)
        if any(name == "update" for name, _ in fields):
            raise HTTPException(400, "SPARQL Update is not allowed: this endpoint is read-only")
        _refuse_datasets(params + fields)
        queries = [value for name, value in fields if name == "query"]
        if len(queries) != 1:
            raise HTTPException(400, f"the form needs exactly one `query` field, not {len(queries)}")
        return SparqlCall(_validated(queries[0]).query, SPARQL_MAX_ROWS, own_json=False)
    if content_type == "application/sparql-query":
        _refuse_datasets(params)
        return SparqlCall(_validated(text).query, SPARQL_MAX_ROWS, own_json=False)
    raise HTTPException(
        415,
        f"unsupported body type {content_type!r}: send application/json, application/x-www-form-urlencoded "
        "(query=...) or application/sparql-query",
    )


def _run_sparql(call: SparqlCall, request: Request, role: Any, snap: Any, pool: SparqlPool) -> Any:
    accept = request.headers.get("accept")
    # A JSON body's plain JSON (and */*) is this API's own JSON; a SPARQL results type named in Accept still wins.
    own = {"application/json": LEGACY_JSON} if call.own_json else {}
    formats = ResultFormats(
        select=negotiate(accept, own | {k: v for k, v in SELECT_OFFERS.items() if k not in own}),
        ask=negotiate(accept, own | {k: v for k, v in ASK_OFFERS.items() if k not in own}),
        graph=negotiate(accept, RDF_OFFERS),
    )
    if formats.select is None and formats.graph is None:
        raise _not_acceptable({**SELECT_OFFERS, **RDF_OFFERS})
    gis_index(snap)  # 503 when the version has no GBIM export
    try:
        result = pool.run(str(snap.path), role.access, call.query, call.limit, formats)
    except SparqlError as exc:
        status = _STATUS[type(exc)]
        raise HTTPException(status, str(exc), headers={"Retry-After": "1"} if isinstance(exc, RETRY) else None) from exc
    headers = {"Vary": "Accept", VERSION_HEADER: snap.version_id}
    if result["truncated"]:
        headers[TRUNCATED_HEADER] = "true"
    if "body" not in result:
        own_json = SparqlResponse(**result, index_version=snap.version_id)
        return JSONResponse(own_json.model_dump(mode="json"), headers=headers)
    return Response(result["body"], media_type=result["media_type"], headers=headers)


@router.head("/facts/sparql", response_model=SparqlResponse, include_in_schema=False)
@router.get("/facts/sparql", response_class=Response, responses={200: SPARQL_RESULTS, **SPARQL_ERRORS})
def sparql_get(
    request: Request,
    role: CallerRole,
    snap: CurrentSnapshot,
    pool: Annotated[SparqlPool, Depends(sparql_pool)],
    query: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=SPARQL_MAX_QUERY_CHARS,
            description="the SPARQL query; without it, the endpoint's SPARQL 1.1 Service Description",
            examples=[SELECT_EXAMPLE],
        ),
    ] = None,
) -> Response:
    """SPARQL 1.1 Protocol, query via GET: the answer in the format ``Accept`` prefers (default: SPARQL JSON
    results, or Turtle for CONSTRUCT and DESCRIBE), at most 1000 rows or triples. Other parameters (``format``,
    ``output``, ...) are ignored; ``default-graph-uri`` and ``named-graph-uri`` are refused (400). Without
    ``query``: the SPARQL 1.1 Service Description of this endpoint, in Turtle or the RDF format ``Accept`` names."""
    _refuse_datasets(parse_qsl(request.url.query, keep_blank_values=True))
    if query is None:
        media_type = negotiate(request.headers.get("accept"), RDF_OFFERS)
        if media_type is None:
            raise _not_acceptable(RDF_OFFERS)
        return _rdf_response(service_description(str(request.url_for("sparql_get"))), media_type, snap.version_id)
    return _run_sparql(SparqlCall(query, SPARQL_MAX_ROWS, own_json=False), request, role, snap, pool)


@router.post(
    "/facts/sparql",
    response_model=SparqlResponse,
    responses={200: SPARQL_RESULTS, **SPARQL_ERRORS},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": SparqlRequest.model_json_schema(),
                    "examples": {
                        "select": {
                            "summary": "places in Fayette County",
                            "value": {"query": SELECT_EXAMPLE, "limit": 10},
                        },
                        "ask": {"summary": "is anything located in Fayette County?", "value": {"query": ASK_EXAMPLE}},
                    },
                },
                "application/x-www-form-urlencoded": {
                    "schema": {
                        "type": "object",
                        "required": ["query"],
                        "properties": {
                            "query": {"type": "string", "minLength": 1, "maxLength": SPARQL_MAX_QUERY_CHARS}
                        },
                    },
                    "examples": {
                        "select": {"summary": "the SPARQL 1.1 Protocol form", "value": {"query": SELECT_EXAMPLE}}
                    },
                },
                "application/sparql-query": {
                    "schema": {"type": "string", "minLength": 1},
                    "examples": {"select": {"summary": "the query as the body", "value": SELECT_EXAMPLE}},
                },
            },
        }
    },
)
def sparql(
    call: Annotated[SparqlCall, Depends(posted_query)],
    request: Request,
    role: CallerRole,
    snap: CurrentSnapshot,
    pool: Annotated[SparqlPool, Depends(sparql_pool)],
) -> Any:
    """Run a read-only SPARQL query over the entities and relations (prefixes gbim:, geo:, rdfs:, rdf:).

    A JSON body (``{"query", "limit"}``) answers SELECT and ASK in this API's JSON unless ``Accept`` names a
    SPARQL results format; a form (``query=``) or an ``application/sparql-query`` body is the SPARQL 1.1 Protocol
    (as for GET). Not supported (400): updates, SERVICE, FROM / FROM NAMED, GRAPH."""
    return _run_sparql(call, request, role, snap, pool)


def _readable_row(index: GisIndex, entity_id: str, role: Any, version_id: str) -> int:
    row = index.row_of.get(entity_id)
    # An entity the caller may not read is reported exactly like one that does not exist.
    if row is None or index.access[row] not in role.access:
        raise HTTPException(404, f"no GBIM entity {entity_id} in index version {version_id}")
    return row


@router.head("/facts/{entity_id}", include_in_schema=False)
@router.get(
    "/facts/{entity_id}",
    responses={200: RDF_RESPONSES, 404: {"model": ErrorBody}, 406: {"model": ErrorBody}, 503: {"model": ErrorBody}},
    response_class=Response,
)
def entity_rdf(
    request: Request,
    entity_id: Annotated[str, Path(pattern=UUID_PATTERN, description="GBIM entity id (UUID)", examples=[HUB])],
    role: CallerRole,
    snap: CurrentSnapshot,
) -> Response:
    """An entity's RDF: its type, label, dataset, description, WGS 84 position and relations, in the format
    ``Accept`` prefers: Turtle (the default), N-Triples, JSON-LD (also for ``application/json``) or RDF/XML."""
    media_type = negotiate(request.headers.get("accept"), RDF_OFFERS)
    if media_type is None:
        raise _not_acceptable(RDF_OFFERS)
    index = gis_index(snap)
    row = _readable_row(index, entity_id, role, snap.version_id)
    relations = index.relations.get(entity_id, [])
    labels = {}  # entities it names (``near``): their label, as the whole export has it, when the caller may read them
    for rel in relations:
        other = index.row_of.get(rel["object"]) if rel["object_kind"] == "entity" else None
        if other is not None and index.access[other] in role.access:
            labels[rel["object"]] = index.entities[other]["label"]
    graph = rdf_graph([index.entities[row]], relations, labels, gbim_iri=gbim_iri(request))
    return _rdf_response(graph, media_type, snap.version_id)


@router.head("/gbim/entity/{entity_id}", include_in_schema=False)
@router.get(
    "/gbim/entity/{entity_id}",
    status_code=303,
    responses={
        303: {
            "description": "See Other: the entity's RDF, `GET /facts/{entity_id}`",
            "headers": {"Location": {"description": "the URL of the entity's RDF", "schema": {"type": "string"}}},
        },
        404: {"model": ErrorBody},
    },
    response_class=RedirectResponse,
)
def entity_iri(
    request: Request,
    entity_id: Annotated[str, Path(pattern=UUID_PATTERN, description="GBIM entity id (UUID)", examples=[HUB])],
    role: CallerRole,
    snap: CurrentSnapshot,
) -> RedirectResponse:
    """An entity's IRI (``<RAG_RDF_BASE_IRI>gbim/entity/<id>``) dereferenced: the entity is a place, not a
    document, so the answer is ``303 See Other`` to the document describing it (``GET /facts/{entity_id}``,
    which negotiates Turtle, N-Triples, JSON-LD or RDF/XML); 404 for an entity the caller may not read."""
    _readable_row(gis_index(snap), entity_id, role, snap.version_id)
    return RedirectResponse(str(request.url_for("entity_rdf", entity_id=entity_id)), status_code=303)
