"""Request and response bodies of serving/routers/facts.py."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SPARQL_MAX_ROWS = 1000


SPARQL_MAX_QUERY_CHARS = 5000


class Fact(BaseModel):
    subject: str = Field(description="GBIM entity id")
    subject_label: str = Field(description="the subject entity's label (name), as the GBIM export has it")
    predicate: Literal["located_in", "serves_zip", "part_of", "serves_program", "operated_by", "near"] | str = Field(
        description="the relation, as its local name in the `gbim:` vocabulary (`docs/gbim.md`)"
    )
    object: str = Field(description="what the relation points at: a county name, a ZIP code, an entity id, ...")
    object_kind: str = Field(description="county, zip, worldview, program, organization or entity")
    object_label: str | None = Field(None, description="the label of an entity object (`near`)")
    provenance: dict[str, Any] = Field(
        description="where the fact comes from: `source`, `source_table`, `source_pk` of the feature and the `method` "
        "that derived it (attribute, polygon containment, distance for `near`)"
    )


class MatchedEntity(BaseModel):
    entity_id: str = Field(description="GBIM entity id (`/facts/{entity}`, `/entities/{id}`)")
    label: str = Field(description="the entity's label (name)")


class FactsResponse(BaseModel):
    facts: list[Fact] = Field(description="the matching facts (triples), at most `limit`, the caller's role applied")
    total: int = Field(description="matching triples before `limit` (on every page: all of them)")
    matched: list[MatchedEntity] | None = Field(
        None, description="with `name`: the entities it found, best match first"
    )
    index_version: str = Field(description="the published index version the facts come from")
    next_cursor: str | None = Field(
        None,
        description="more triples match: send this back as `cursor` (same filters) for the next page; null on the "
        'last page (docs/serving.md, "Paging")',
    )


class SparqlRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "query": "SELECT ?label ?zip WHERE { ?e rdfs:label ?label ; gbim:serves_zip ?z . ?z rdfs:label ?zip } "
                    "ORDER BY ?label LIMIT 3",
                    "limit": 3,
                },
                {"query": 'ASK { ?e gbim:located_in ?c . ?c rdfs:label "Fayette" }'},
            ]
        },
    )

    query: str = Field(
        ..., min_length=1, max_length=SPARQL_MAX_QUERY_CHARS, description="a SPARQL SELECT, ASK, CONSTRUCT or DESCRIBE"
    )
    limit: int = Field(100, ge=1, le=SPARQL_MAX_ROWS, description="rows (or triples) returned at most")


class SparqlResponse(BaseModel):
    variables: list[str] = Field(description="the SELECT's variables, in the query's order (empty for ASK)")
    rows: list[dict[str, str | None]] = Field(
        description="one mapping per solution: variable -> the value as text (IRI, literal's lexical form), "
        "null when unbound"
    )
    boolean: bool | None = Field(None, description="the answer of an ASK query")
    truncated: bool = Field(description="true when rows were cut at `limit` (or at the 1 M character bound)")
    index_version: str = Field(description="the published index version the query ran against")
