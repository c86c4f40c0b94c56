"""Pydantic models of the /context, /chat and /v1/chat/completions bodies (so /openapi.json is exact)."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from serving.models import AnsweredFromField, AsOf, Text, VersionId, examples

# The answer options /chat and /context take, shared with the seed's routes (serving/models/compat.py).
MinScore = Annotated[
    float | None,
    Field(ge=0, le=1, description="passages below this normalised score (`score_normalized`, 0..1) are dropped"),
]
RecencyBias = Annotated[float, Field(ge=0, le=10, description="boost × 0.5^(age / half-life) by `updated_at`")]
RecencyHalfLife = Annotated[float | None, Field(gt=0, le=36_500, description="default RAG_RECENCY_HALF_LIFE_DAYS (90)")]
MaxWords = Annotated[
    int | None, Field(ge=20, le=2000, description="the answer budget in words (default: the persona's, else 200)")
]

MAX_PROFILE_EXTRAS = 20
MAX_EXTRA_CHARS = 200
MAX_MESSAGE_CHARS = 32_000


class Profile(BaseModel):
    """Who is asking, as far as it narrows the evidence; every field optional. Other fields are kept (at most 20,
    each a short string, a number, a boolean or null)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    state: str | None = Field(None, max_length=32, description="`WV` makes every message West-Virginia-scoped")
    county: str | None = Field(
        None, max_length=64, description="the person's county (e.g. `Fayette`): used when the message names none"
    )
    zip: str | None = Field(
        None, pattern=r"^[0-9]{5}$", description="the person's 5-digit ZIP code: used when the message names none"
    )

    @model_validator(mode="after")
    def _small_extras(self) -> Profile:
        extras = self.model_extra or {}
        if len(extras) > MAX_PROFILE_EXTRAS:
            raise ValueError(f"a profile has at most {MAX_PROFILE_EXTRAS} other fields, not {len(extras)}")
        for key, value in extras.items():
            if len(key) > 64:
                raise ValueError("profile field names have at most 64 characters")
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"profile field {key!r} is not a finite number")
            if not (value is None or isinstance(value, bool | int | float | str)):
                raise ValueError(f"profile field {key!r} must be a string, a number, a boolean or null")
            if isinstance(value, str) and len(value) > MAX_EXTRA_CHARS:
                raise ValueError(f"profile field {key!r} has more than {MAX_EXTRA_CHARS} characters")
        return self


class Mix(BaseModel):
    """How ``top_k`` is split between the caller's own memory and the corpus (docs/personal-memory.md)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    personal: float = Field(0.0, ge=0, le=1, description="share of top_k given to personal memory (at least 1 if > 0)")


USER_ID_PATTERN = r"^[A-Za-z0-9._@:-]{1,128}$"


class ContextRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"message": "Where can I apply for SNAP near Oak Hill?", "county": "Fayette", "top_k": 6},
                {
                    "message": "and who helps with heating bills?",
                    "history": ["Where can I apply for SNAP near Oak Hill?"],
                    "role": "community",
                    "zip": "25901",
                    "max_words": 120,
                },
            ]
        },
    )

    message: Text = Field(description="the person's message, as written")
    role: str | None = Field(
        None,
        max_length=64,
        description="a persona (community, researcher, governance_engineer, caseworker, or a role name) choosing "
        "collections and framing; access still comes from the API key: a persona needing more is refused (403)",
    )
    county: str | None = Field(None, min_length=2, max_length=64, description="county, e.g. Fayette")
    zip: str | None = Field(None, pattern=r"^[0-9]{5}$", description="5-digit ZIP code")
    profile: Profile | None = Field(
        None, description="who is asking (state, county, ZIP, ...), where it narrows evidence"
    )
    top_k: int | None = Field(None, ge=1, le=50, description="text passages (default LIVEMEM_CONTEXT_TOP_K, 6)")
    thread_id: str | None = Field(
        None,
        max_length=128,
        description="the conversation: its place, persona and topic carry to the next message with this id and "
        "the same API key (per process, expiring; `history` is the robust path with several workers)",
    )
    history: list[Annotated[str, Field(max_length=4000)]] | None = Field(
        None,
        max_length=50,
        description="the conversation's earlier user messages, oldest first: their place, persona and topic carry "
        "forward (used instead of the thread's stored state)",
    )
    min_score: MinScore = None
    recency_bias: RecencyBias = 0.0
    recency_half_life_days: RecencyHalfLife = None
    max_words: MaxWords = None
    mix: Mix | None = Field(None, description="personal memory's share of top_k, e.g. {personal: 0.3} (needs a key)")
    user_id: str | None = Field(
        None, pattern=USER_ID_PATTERN, description="a user within the API key's memory (another key never sees it)"
    )
    remember: bool = Field(False, description="record this exchange in the caller's personal memory (needs a key)")
    version: VersionId = None
    as_of: AsOf = None


class RouteRule(BaseModel):
    """One routing rule that fired on the message."""

    intent: str = Field(description="the intent it gives: greeting, governance, spatial, resource, factual, general")
    rule: str = Field(description="the rule, in words (e.g. `resource type food_pantry`)")
    matched: str = Field(description="the words of the message it matched (empty for `general`)")


class SelfQueryNote(BaseModel):
    """One filter read from the message or the request (self-query)."""

    field: str = Field(description="the filter set: county, zip, place, collections, updated_after, ...")
    value: str = Field(description="its value")
    source: str = Field(alias="from", serialization_alias="from", description="the phrase or field it came from")


class RouteFilters(BaseModel):
    """The filters the evidence was retrieved with (null: not applied)."""

    county: list[str] | None = Field(None, description="counties the passages, places and programs are limited to")
    zip: str | None = Field(None, description="the ZIP code programs must serve")
    collections: list[str] | None = Field(None, description="the collections the message itself asked for")
    seal_state: str | None = Field(None, description="SEALED when the message asks for authoritative sources")
    updated_after: str | None = Field(
        None, description="passages changed at or after (ISO 8601) a date the message named"
    )
    updated_before: str | None = Field(None, description="passages changed before (ISO 8601) a date the message named")
    resource_type: list[str] | None = Field(None, description="registry program types (snap, food_pantry, ...)")


class EligibilityModel(BaseModel):
    """The sources this caller's role may be answered from (a role never learns the names of the others)."""

    role: str = Field(description="the caller's role (from the API key; public without one)")
    collections: list[str] = Field(description="the collections this role may use (hidden ones are never named)")
    registries: list[str] = Field(description="the registries this role may use (`local_resources`)")
    spatial_datasets: list[str] = Field(description="the GBIM spatial datasets this role may use")
    web: bool = Field(description="whether this role may receive web context at all")


class WebDecision(BaseModel):
    """Whether web context was used, and why (never for a West-Virginia-scoped message)."""

    admitted: bool = Field(description="true: web results are part of the evidence")
    reason: str = Field(description="why admitted or excluded, in words")
    calls: list[dict[str, Any]] = Field(description="the web gateway's calls: provider, query, results, ms, error")


class PopulationHint(BaseModel):
    """A group of people the message names (veterans, seniors, ...), steering registry lookups."""

    population: str = Field(description="the group, e.g. `veterans`")
    matched: str = Field(description="the words that named it")
    resource_types: list[str] = Field(description="the program types it steers registry lookups to")


class Offer(BaseModel):
    """What a `negotiate` answer offers in place of what it could not answer."""

    kind: Literal["choose_county", "elsewhere", "none_listed"] = Field(
        description="choose_county: several counties named, which one?; elsewhere: no such program in the place "
        "asked about, these elsewhere; none_listed: none in the registry at all"
    )
    text: str = Field(description="the offer, as the answer words it")
    counties: list[str] | None = Field(None, description="choose_county: the counties named")
    resource_type: str | None = Field(None, description="the program type asked for (e.g. food_pantry)")
    missing_in: str | None = Field(None, description="the place that has none (a town, `X County` or `ZIP n`)")
    alternatives: list[dict[str, Any]] | None = Field(
        None, description="elsewhere: registry programs of that type in other places (registry row fields)"
    )


class Budget(BaseModel):
    """How long the answer may be and how much it must hedge, and why."""

    max_words: int = Field(description="the answer's length budget in words")
    hedging: Literal["none", "light", "strong"] = Field(description="how much the answer must hedge")
    reasons: list[str] = Field(description="why that hedging (e.g. `1 verified program(s)`, `web results only`)")


class Conversation(BaseModel):
    source: Literal["thread", "history"] = Field(
        description="history: the request's earlier messages; thread: the state stored for thread_id"
    )
    earlier_turns: int = Field(description="how many earlier user messages of the conversation were read")
    carried: dict[str, Any] = Field(
        description="what came from earlier turns: place {county, zip, from}, topic, persona"
    )


class Route(BaseModel):
    """How the message was understood and answered: intents, filters, places, programs, what was searched."""

    intents: list[Literal["greeting", "governance", "spatial", "resource", "factual", "general"]] = Field(
        description="what the message asks for, from the routing rules (`rules`)"
    )
    rules: list[RouteRule] = Field(description="the routing rules that fired")
    response_class: Literal["answer", "negotiate", "clarify", "refuse", "redirect"] = Field(
        description="answer; negotiate (part answered, offers in `negotiation`); clarify (which place, or no "
        "evidence); refuse (guardrail); redirect (a crisis: the `crisis` lines first, then the evidence; or a place "
        "outside West Virginia)"
    )
    reason: str = Field(description="why that response class, in words")
    crisis: dict[str, Any] | None = Field(
        None,
        description="a message from someone who may be in danger (docs/crisis.md): kind (suicide_self_harm, "
        "overdose_poisoning, violence_abuse, medical_emergency, child_in_danger), kinds, language (en, es), lines "
        "(name, number, text: given first in the answer), matched_by (lexicon, similarity), score, evidence_class "
        "(the response class the evidence alone gave); null otherwise. Its response_class is `redirect`",
    )
    filters: RouteFilters = Field(description="the filters the evidence was retrieved with")
    self_query: list[SelfQueryNote] = Field(description="each filter read from the message or request, and from what")
    wv_scoped: bool = Field(description="true: the message is about West Virginia (then no web context is used)")
    wv_reasons: list[str] = Field(description="why it is WV-scoped (a WV place named, profile state WV, ...)")
    home_scoped: bool = Field(
        False,
        description="true: the message is about the deployment's home states (`home`; docs/home.md); the same as "
        "wv_scoped, which keeps its name from when the home was always West Virginia",
    )
    home: dict[str, Any] | None = Field(
        None,
        description="the home of the version answering: states (postal abbreviations), name, state_names "
        "(West Virginia unless the sources file names another home)",
    )
    state: str | None = Field(
        None,
        description="the state the message is about (postal abbreviation): WV when WV-scoped, another state's "
        "when it names only places outside West Virginia (then redirected), else null",
    )
    places: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the places the message names: kind (zip, county, town, state), text, name, state, counties "
        "(every county of a ZIP or town spanning several), corrected_from (a misspelling), qualified_by (the state "
        "written beside it)",
    )
    programs: list[dict[str, Any]] = Field(
        default_factory=list,
        description="registry programs and places, most useful first (need, town, ZIP coverage, distance): kind "
        "(registry, place), id, name, need, town, in_town, covers_zip, distance_km, rank, and `eligible: false` for "
        "a program whose eligibility names counties the person did not; the answer lists them in this order",
    )
    links: list[dict[str, Any]] = Field(
        default_factory=list,
        description="registry programs and the places and passages about the same program (local_resource_id); "
        "conflicts: where a place or passage disagrees with the registry, which is authoritative for contact facts",
    )
    eligibility: EligibilityModel = Field(description="the sources the caller's role may be answered from")
    sources_queried: list[str] = Field(description="what was searched: collections, `gbim`, `local_resources`, `web`")
    registry_lookups: list[dict[str, Any]] = Field(
        description="each registry lookup: its arguments (county, zip, town, resource_type), total, returned ids"
    )
    web: WebDecision = Field(description="whether web context was used, and why")
    candidates: int = Field(description="text chunks that passed the collections and filters")
    steps_ms: dict[str, float] = Field(description="milliseconds per step (intent, self_query, encode, text, ...)")
    persona: str | None = Field(None, description="the persona the request named (its `role` field)")
    population: list[PopulationHint] = Field(default_factory=list, description="groups of people the message names")
    negotiation: list[Offer] = Field(default_factory=list, description="the offers of a `negotiate` response")
    budget: Budget | None = Field(None, description="the answer's length and hedging budget")
    recency: dict[str, float] | None = Field(None, description="the recency bias applied (bias, half_life_days)")
    min_score: float | None = Field(None, description="the normalised score threshold applied")
    graph: dict[str, Any] | None = Field(
        None,
        description="the graph's part: relationship (terms, resolved nodes, connections), named_in_passages",
    )
    dates: dict[str, Any] | None = Field(
        None, description="the date range the message named: after, before, from, what passages were dated by"
    )
    conversation: Conversation | None = Field(None, description="what the conversation carried into this message")
    personal: dict[str, Any] | None = Field(
        None, description="personal memory: the mix applied, passages per side, feedback nudges, snapshot, pending"
    )


class Passage(BaseModel):
    """A text passage (an indexed chunk) in the evidence."""

    chunk_id: str = Field(description="the chunk's id (GET /chunks/{chunk_id})")
    collection: str = Field(description="its collection")
    source: str = Field(description="its configured source")
    content: str = Field(description="its text")
    heading_path: list[str] = Field(description="the headings above it in its file, outermost first")
    county: str | None = Field(description="the county its file is about (sources' metadata rules), or null")
    seal_state: str = Field(description="SEALED (authoritative) or OPEN")
    score: float = Field(description="the raw hybrid score (min-max fusion: 0-2; RRF: ≈0.03 at best)")
    score_normalized: float = Field(
        description="the score on the documented 0..1 scale: relative to the best possible fused score "
        "(first in both rankings), capped at 1; the relevance part, before recency and attention; `min_score` "
        "applies to it"
    )
    scores: dict[str, float | None] = Field(
        description="dense (cosine) and sparse (BM25) parts; null: not on that list"
    )
    provenance: dict[str, Any] = Field(description="path, commit and timestamp of the file it was read from")
    local_resource_id: str | None = Field(None, description="the registry program its file is about, if any")
    page: int | None = Field(None, description="a PDF passage: the page it starts on")
    page_end: int | None = Field(None, description="a PDF passage spanning pages: the page it ends on")
    document_date: str | None = Field(None, description="the date the document carries (ISO), else its commit date")
    date_source: str | None = Field(None, description="front_matter, heading, file_name or commit")
    ref: int | None = Field(None, description="its number in the prompt (None: left out by the size budget)")


class PersonalPassage(BaseModel):
    """An item of the caller's own memory in the evidence (docs/personal-memory.md)."""

    memory_id: str = Field(description="its id in the caller's memory")
    kind: Literal["card", "exchange"] = Field(description="card: written by the person; exchange: a remembered Q&A")
    content: str = Field(description="its text")
    created_at: str = Field(description="when it was remembered (ISO 8601, UTC)")
    score: float = Field(description="cosine similarity to the message")
    personal: Literal[True] = Field(True, description="always true: the caller's own memory, not the corpus")
    provenance: dict[str, Any] = Field(description="store, memory_id, kind, created_at, state (consolidated|pending)")
    ref: int | None = Field(None, description="its number in the prompt (None: left out by the size budget)")


class EvidenceFact(BaseModel):
    """A GBIM relation in the evidence, as a labelled triple (``EvidenceFact``: ``/facts`` has its own ``Fact``, and
    two schemas of one name made a generated client drop one)."""

    subject: str = Field(description="the entity id (or registry program id) the fact is about")
    subject_label: str = Field(description="its name")
    predicate: str = Field(description="part_of, located_in, serves_zip, serves_program, operated_by or near")
    object: str = Field(description="the value: a county, ZIP, program or organization name, or an entity id (near)")
    object_kind: str = Field(description="worldview, county, zip, program, organization or entity")
    object_label: str | None = Field(None, description="the label of an entity object (near)")
    provenance: dict[str, Any] = Field(description="source, table, pk and the field or method the fact came from")
    resolved_from: str | None = Field(None, description="spatial, question, or passage <chunk id>")
    ref: int | None = Field(None, description="its number in the prompt (None: left out by the size budget)")


class SpatialEntity(BaseModel):
    """A GBIM place (a facility, office, pantry) in the evidence."""

    entity_id: str = Field(description="its GBIM entity id (GET /entities/{entity_id})")
    label: str = Field(description="its name")
    description: str = Field(description="the text it was embedded from")
    dataset: str = Field(description="the spatial dataset it comes from")
    gbim_entity: str = Field(description="its GBIM class (e.g. `facility`)")
    county: str | None = Field(description="its county (attribute or point-in-polygon), without `County`")
    town: str | None = Field(description="its town (the `city` attribute)")
    address: str | None = Field(description="its street address")
    zip: str | None = Field(description="its 5-digit ZIP code")
    lon: float | None = Field(description="longitude of its centroid, EPSG:4326 degrees")
    lat: float | None = Field(description="latitude of its centroid, EPSG:4326 degrees")
    score: float = Field(description="cosine similarity of the message and its description")
    matched_town: bool = Field(description="true: it is in a town the message names")
    provenance: dict[str, Any] = Field(description="source, table and primary key (pk) it was read from")
    type: str | None = Field(None, description="the place's own type (food_pantry, clinic, benefits_office, ...)")
    programs: str | None = Field(None, description="the programs the place lists")
    phone: str | None = Field(None, description="its phone number, as its data gives it")
    local_resource_id: str | None = Field(None, description="the registry program this place is, when its data says")
    same_as: str | None = Field(
        None, description="the registry program in this answer this place is (linked: route.links); not given twice"
    )
    ref: int | None = Field(None, description="its number in the prompt (None: left out by the size budget)")


class RegistryRow(BaseModel):
    """A program of the verified `local_resources` registry in the evidence (authoritative for contact facts)."""

    local_resource_id: str = Field(description="the program's registry id (GET /resources?id=...)")
    name: str = Field(description="the program's name")
    resource_type: str = Field(description="its type: snap, medicaid, food_pantry, liheap, ...")
    county: str = Field(description="its county, without `County`")
    zip: str = Field(description="its own 5-digit ZIP code")
    address: str | None = Field(None, description="its street address")
    contact_phone: str | None = Field(None, description="its phone, normalised to +1XXXXXXXXXX")
    url: str | None = Field(None, description="its web page")
    hours: str | None = Field(None, description="opening hours, as the registry words them")
    eligibility: str | None = Field(None, description="who may use it, as the registry words it")
    description: str | None = Field(None, description="what it offers")
    verification_status: str = Field(description="verified, stale (verified too long ago) or unverified")
    last_verified_at: str | None = Field(None, description="when it was last verified (ISO 8601, UTC)")
    match: str = Field(
        description="why it is listed: zip, county, town, id, filter, or `elsewhere: ...` (a negotiate alternative)"
    )
    zip_coverage: list[str] | None = Field(None, description="further ZIP codes it serves")
    conflicts: list[dict[str, Any]] | None = Field(
        None, description="where a linked place or passage disagrees with this row (the registry is authoritative)"
    )
    ref: int | None = Field(None, description="its number in the prompt (None: left out by the size budget)")


class WebResult(BaseModel):
    """A web search result in the evidence (only for messages that are not West-Virginia-scoped)."""

    title: str = Field(description="the page's title")
    snippet: str = Field(description="the text the search gave for it")
    url: str = Field(description="the page's URL")
    source: str = Field(description="the URL's host")
    published_at: str | None = Field(None, description="when it was published, as the search gave it")
    ref: int | None = Field(None, description="its number in the prompt (None: left out by the size budget)")


class Prompt(BaseModel):
    """The prompt the evidence makes: what an LLM backend is given."""

    system: str = Field(description="system text with the grounding instruction")
    context: str = Field(description="the labelled context block, numbered items, then the question")
    text: str = Field(description="system + context: what a model is given")
    chars: int = Field(description="characters of `text`")
    budget_chars: int = Field(description="the prompt's size budget in characters (LIVEMEM_PROMPT_BUDGET_CHARS, 6000)")
    items_included: int = Field(description="evidence items numbered in the prompt")
    items_left_out: int = Field(description="evidence items left out to keep within the budget (their `ref` is null)")


class Citation(BaseModel):
    """An evidence item by its number; other fields by kind: chunk (collection, provenance, page), fact (predicate,
    object, provenance), entity (label, provenance), registry (name, verification_status), web (title, source),
    memory (created_at, memory)."""

    model_config = ConfigDict(extra="allow")

    n: int = Field(description="its number, as the answer cites it: [n]")
    section: str = Field(
        description="the evidence section: unstructured, structured_facts, spatial, registry, web, personal"
    )
    kind: Literal["chunk", "fact", "entity", "registry", "web", "memory"] = Field(description="what it is")
    id: str = Field(description="its id: chunk id, fact subject, entity id, registry id, URL or memory id")


class Evidence(BaseModel):
    """The evidence an answer is made from, by section."""

    unstructured: list[Passage] = Field(description="text passages from the index, best first")
    structured_facts: list[EvidenceFact] = Field(
        description="GBIM relations of the places in evidence, and of the question"
    )
    spatial: list[SpatialEntity] = Field(description="GBIM places, most useful first (route.programs)")
    registry: list[RegistryRow] = Field(description="registry programs, most useful first (route.programs)")
    web: list[WebResult] = Field(description="web results (never for a West-Virginia-scoped message)")
    personal: list[PersonalPassage] = Field(default_factory=list, description="the caller's own memory (mix)")


class ContextResponse(Evidence):
    """The evidence for a message, how it was routed, and the prompt an LLM would be given (no answer)."""

    model_config = ConfigDict(json_schema_extra={"examples": [examples.CONTEXT]})

    message: str = Field(description="the message answered (with what the conversation carried)")
    route: Route = Field(description="how the message was understood and what was searched")
    facts_summary: str | None = Field(None, description="the structured facts in a few plain sentences")
    prompt: Prompt = Field(description="the prompt the evidence makes")
    citations: list[Citation] = Field(description="every numbered evidence item of the prompt")
    index_version: str = Field(description="the published index version that answered")
    trace_id: str = Field(description="this answer's signed trace id: send it to /feedback to judge the passages")
    thread_id: str | None = Field(None, description="the conversation's id, as sent")
    cached: bool = Field(description="true: served from the answer cache")
    answered_from: AnsweredFromField = None


class Guardrail(BaseModel):
    """What the grounding guardrail did to the answer."""

    mode: str = Field(description="LIVEMEM_CHAT_GUARDRAIL: annotate, refuse or off")
    action: str = Field(
        description="none; `annotated: ...` (a note added: no evidence cited); `refused: ...`; `blocked: ...` (the "
        "answer held text the role may not read)"
    )
    cited: int = Field(description="evidence items the answer cites")
    unmatched_citations: list[int] = Field(
        default_factory=list, description="numbers the answer cites, e.g. [99], that match no evidence item"
    )
    crisis_lines: str | None = Field(
        None, description="`first`: a crisis message's answer starts with its crisis lines (docs/crisis.md)"
    )


class ChatResponse(BaseModel):
    """An answer, the evidence it cites, and how it was made."""

    model_config = ConfigDict(json_schema_extra={"examples": [examples.CHAT]})

    answer: str = Field(description="the answer, citing evidence as [n]")
    citations: list[Citation] = Field(description="the evidence the answer cites, by its [n]")
    backend: Literal["llm", "extractive", "fixed"] = Field(
        description="llm: the configured model; extractive: quoted from the evidence; fixed: greeting, clarify, "
        "refuse or redirect text"
    )
    model: str = Field(description="the model that answered (`extractive` without an LLM)")
    fallback: str | None = Field(None, description="why the LLM was not used although configured")
    note: str | None = Field(
        None,
        description="a remark on how it was made (e.g. `Extractive answer (quoted from the evidence, no language model)`)",
    )
    guardrail: Guardrail = Field(description="what the grounding guardrail did")
    route: Route = Field(description="how the message was understood and what was searched")
    evidence: Evidence = Field(description="the evidence, by section")
    index_version: str = Field(description="the published index version that answered")
    trace_id: str = Field(description="this answer's signed trace id: send it to /feedback to judge the passages")
    thread_id: str | None = Field(None, description="the conversation's id, as sent")
    cached: bool = Field(description="true: served from the answer cache")
    answered_from: AnsweredFromField = None


# --- OpenAI chat format -------------------------------------------------------------------------------------------------
class OpenAIMessage(BaseModel):
    """One message of the conversation, as OpenAI's API takes it."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool", "developer"] = Field(
        description="who wrote it; the last user message is answered, earlier turns carry the conversation"
    )
    content: (
        Annotated[str, Field(max_length=MAX_MESSAGE_CHARS)]
        | Annotated[list[dict[str, Any]], Field(max_length=100)]
        | None
    ) = Field(None, description="its text, or content parts (the `text` parts are read), up to 32,000 characters")

    def text(self) -> str:
        if isinstance(self.content, list):
            return " ".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        return self.content or ""


class LivingMemoryOptions(BaseModel):
    """Living Memory's own request fields (OpenAI clients send them with ``extra_body``)."""

    model_config = ConfigDict(extra="forbid")

    county: str | None = Field(None, min_length=2, max_length=64, description="as on /chat: county, e.g. Fayette")
    zip: str | None = Field(None, pattern=r"^[0-9]{5}$", description="as on /chat: 5-digit ZIP code")
    profile: Profile | None = Field(None, description="as on /chat: who is asking")
    top_k: int | None = Field(None, ge=1, le=50, description="as on /chat: text passages (default 6)")
    thread_id: str | None = Field(
        None, max_length=128, description="the conversation's id (also metadata.conversation_id or X-Conversation-Id)"
    )
    persona: str | None = Field(None, max_length=64, description="as the `role` of /chat: narrows, never widens")
    min_score: float | None = Field(None, ge=0, le=1, description="as on /chat: on the normalised 0..1 scale")
    recency_bias: float = Field(0.0, ge=0, le=10, description="as on /chat: boost × 0.5^(age / half-life)")
    recency_half_life_days: float | None = Field(
        None, gt=0, le=36_500, description="as on /chat: default RAG_RECENCY_HALF_LIFE_DAYS (90)"
    )
    max_words: int | None = Field(None, ge=20, le=2000, description="the answer budget in words")
    mix: Mix | None = Field(None, description="as on /chat: personal memory's share of top_k (needs a key)")
    user_id: str | None = Field(None, pattern=USER_ID_PATTERN, description="a user within the key's memory")
    remember: bool = Field(False, description="record this exchange in the caller's personal memory")
    version: str | None = Field(None, max_length=64, description="as on /chat: answer from this kept version")
    as_of: str | None = Field(
        None, max_length=64, description="as on /chat: from the version current at this date-time, or holding a commit"
    )


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = Field(False, description="true: the stream's last chunk before [DONE] carries `usage`")


class ChatCompletionRequest(BaseModel):
    """OpenAI's request body. Sampling fields go to an LLM backend; fields that would change the answer's shape and
    are not supported (``tools``, ``n`` > 1, ...) are refused with 400; other fields are listed back as ignored in
    ``living_memory.options`` (docs/openai.md)."""

    model_config = ConfigDict(
        extra="allow",
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {
                    "model": "living-memory",
                    "messages": [
                        {"role": "system", "content": "Answer briefly for a caseworker."},
                        {"role": "user", "content": "Where can I apply for SNAP in Fayette County?"},
                    ],
                    "metadata": {"conversation_id": "chat-2f9c"},
                },
                {
                    "model": "extractive",
                    "messages": [{"role": "user", "content": "LIHEAP heating help in Raleigh County"}],
                    "stream": True,
                    "stream_options": {"include_usage": True},
                    "living_memory": {"county": "Raleigh", "persona": "community", "max_words": 80},
                },
            ]
        },
    )

    model: str | None = Field(
        None, max_length=256, description="a model of GET /v1/models (an unknown one is 404); omitted: the default"
    )
    messages: list[OpenAIMessage] = Field(
        ..., min_length=1, max_length=200, description="the conversation, oldest first; the last user message is asked"
    )
    stream: bool = Field(False, description="true: server-sent events (chat.completion.chunk), then `data: [DONE]`")
    stream_options: StreamOptions | None = Field(None, description="with stream: whether usage is sent at the end")
    user: str | None = Field(
        None, max_length=256, description="OpenAI's end-user id for abuse monitoring: never the conversation key"
    )
    metadata: dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]] | None = Field(
        None, max_length=16, description="OpenAI's metadata (16 pairs); `conversation_id` names the conversation"
    )
    temperature: float | None = Field(None, ge=0, le=2, description="sampling temperature, passed to an LLM backend")
    top_p: float | None = Field(None, ge=0, le=1, description="nucleus sampling, passed to an LLM backend")
    max_tokens: int | None = Field(
        None, ge=1, le=32_768, description="the answer's length limit (words); an answer cut short ends `length`"
    )
    max_completion_tokens: int | None = Field(None, ge=1, le=32_768, description="as max_tokens (it wins when both)")
    n: int | None = Field(None, ge=1, le=128, description="choices wanted: only 1 is supported (more: 400)")
    stop: Annotated[str, Field(max_length=256)] | Annotated[list[str], Field(max_length=4)] | None = Field(
        None, description="stop sequences (up to 4), passed to an LLM backend"
    )
    seed: int | None = Field(None, description="sampling seed, passed to an LLM backend")
    presence_penalty: float | None = Field(None, ge=-2, le=2, description="passed to an LLM backend")
    frequency_penalty: float | None = Field(None, ge=-2, le=2, description="passed to an LLM backend")
    living_memory: LivingMemoryOptions | None = Field(
        None, description="Living Memory's own options (place, persona, thread, ...); OpenAI clients: extra_body"
    )


class ChoiceMessage(BaseModel):
    role: Literal["assistant"] = Field("assistant", description="always assistant")
    content: str = Field(description="the answer, citing evidence as [n]")


class Choice(BaseModel):
    index: int = Field(0, description="always 0 (one choice)")
    message: ChoiceMessage = Field(description="the answer")
    finish_reason: Literal["stop", "length", "content_filter"] = Field(
        "stop",
        description="stop: complete; length: cut at max_tokens; content_filter: stopped by the guardrail (text only a hidden collection holds)",
    )


class Usage(BaseModel):
    """Sizes counted in whitespace-separated words (no tokenizer of the answering model is known)."""

    prompt_tokens: int = Field(description="words of the prompt")
    completion_tokens: int = Field(description="words of the answer")
    total_tokens: int = Field(description="prompt_tokens + completion_tokens")


class LivingMemoryExtra(BaseModel):
    """The evidence behind the answer: the documented extra field of a chat completion."""

    citations: list[Citation] = Field(description="the evidence the answer cites, by its [n]")
    backend: str = Field(description="llm, extractive or fixed (as on /chat)")
    fallback: str | None = Field(None, description="why the LLM was not used although configured")
    guardrail: Guardrail = Field(description="what the grounding guardrail did")
    route: Route = Field(description="how the message was understood and what was searched")
    evidence: Evidence = Field(description="the evidence, by section")
    index_version: str = Field(description="the published index version that answered")
    trace_id: str = Field(description="this answer's signed trace id: send it to /feedback to judge the passages")
    cached: bool = Field(description="true: served from the answer cache")
    persona: str | None = Field(None, description="the persona answered as (living_memory.persona)")
    answered_from: AnsweredFromField = None
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="what became of each request option: applied, not applicable (and why) or ignored; and how the "
        "conversation's earlier turns were used",
    )


class ChatCompletion(BaseModel):
    """OpenAI's chat completion, with the evidence behind the answer in `living_memory`."""

    model_config = ConfigDict(json_schema_extra={"examples": [examples.CHAT_COMPLETION]})

    id: str = Field(description="`chatcmpl-` and 32 hex digits, new for each completion")
    object: Literal["chat.completion"] = Field("chat.completion", description="always chat.completion")
    created: int = Field(description="when it was made, in Unix seconds")
    model: str = Field(description="the model named in the request (or the default)")
    choices: list[Choice] = Field(description="exactly one choice")
    usage: Usage = Field(description="prompt and answer sizes")
    living_memory: LivingMemoryExtra = Field(description="the evidence behind the answer and what each option did")
