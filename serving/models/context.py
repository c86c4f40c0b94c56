"""Pydantic models of the /context, /chat and /v1/chat/completions bodies (so /openapi.json is exact)."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from serving.models import Text

MAX_PROFILE_EXTRAS = 20
MAX_EXTRA_CHARS = 200
MAX_MESSAGE_CHARS = 32_000


class Profile(BaseModel):
    """Who is asking, as far as it narrows the evidence; every field optional. Other fields are kept (at most 20,
    each a short string, a number, a boolean or null)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    state: str | None = Field(None, max_length=32, description="`WV` makes every message West-Virginia-scoped")
    county: str | None = Field(None, max_length=64)
    zip: str | None = Field(None, pattern=r"^[0-9]{5}$")

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
    model_config = ConfigDict(extra="forbid")

    message: Text = Field(description="the person's message, as written")
    role: str | None = Field(
        None,
        max_length=64,
        description="a persona (community, researcher, governance_engineer, caseworker, or a role name) choosing "
        "collections and framing; access still comes from the API key: a persona needing more is refused (403)",
    )
    county: str | None = Field(None, min_length=2, max_length=64, description="county, e.g. Fayette")
    zip: str | None = Field(None, pattern=r"^[0-9]{5}$", description="5-digit ZIP code")
    profile: Profile | None = None
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
    min_score: float | None = Field(
        None, ge=0, le=1, description="passages below this normalised score (`score_normalized`, 0..1) are dropped"
    )
    recency_bias: float = Field(0.0, ge=0, le=10, description="boost × 0.5^(age / half-life) by `updated_at`")
    recency_half_life_days: float | None = Field(
        None, gt=0, le=36_500, description="default RAG_RECENCY_HALF_LIFE_DAYS (90)"
    )
    max_words: int | None = Field(
        None, ge=20, le=2000, description="the answer budget in words (default: the persona's, else 200)"
    )
    mix: Mix | None = Field(None, description="personal memory's share of top_k, e.g. {personal: 0.3} (needs a key)")
    user_id: str | None = Field(
        None, pattern=USER_ID_PATTERN, description="a user within the API key's memory (another key never sees it)"
    )
    remember: bool = Field(False, description="record this exchange in the caller's personal memory (needs a key)")


class RouteRule(BaseModel):
    intent: str
    rule: str
    matched: str


class SelfQueryNote(BaseModel):
    field: str
    value: str
    source: str = Field(alias="from", serialization_alias="from", description="the phrase or field it came from")


class RouteFilters(BaseModel):
    county: list[str] | None = None
    zip: str | None = None
    collections: list[str] | None = None
    seal_state: str | None = None
    updated_after: str | None = None
    updated_before: str | None = None
    resource_type: list[str] | None = None


class EligibilityModel(BaseModel):
    role: str
    collections: list[str] = Field(description="the collections this role may use (hidden ones are never named)")
    registries: list[str]
    spatial_datasets: list[str]
    web: bool = Field(description="whether this role may receive web context at all")


class WebDecision(BaseModel):
    admitted: bool
    reason: str
    calls: list[dict[str, Any]]


class PopulationHint(BaseModel):
    population: str
    matched: str = Field(description="the words that named it")
    resource_types: list[str] = Field(description="the program types it steers registry lookups to")


class Offer(BaseModel):
    kind: Literal["choose_county", "elsewhere", "none_listed"]
    text: str = Field(description="the offer, as the answer words it")
    counties: list[str] | None = None
    resource_type: str | None = None
    missing_in: str | None = None
    alternatives: list[dict[str, Any]] | None = None


class Budget(BaseModel):
    max_words: int = Field(description="the answer's length budget in words")
    hedging: Literal["none", "light", "strong"] = Field(description="how much the answer must hedge")
    reasons: list[str]


class Conversation(BaseModel):
    source: Literal["thread", "history"] = Field(
        description="history: the request's earlier messages; thread: the state stored for thread_id"
    )
    earlier_turns: int
    carried: dict[str, Any] = Field(
        description="what came from earlier turns: place {county, zip, from}, topic, persona"
    )


class Route(BaseModel):
    intents: list[Literal["greeting", "governance", "spatial", "resource", "factual", "general"]]
    rules: list[RouteRule]
    response_class: Literal["answer", "negotiate", "clarify", "refuse", "redirect"]
    reason: str
    filters: RouteFilters
    self_query: list[SelfQueryNote]
    wv_scoped: bool
    wv_reasons: list[str]
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
        "(registry, place), id, name, need, town, in_town, covers_zip, distance_km, rank; the answer lists them in "
        "this order",
    )
    links: list[dict[str, Any]] = Field(
        default_factory=list,
        description="registry programs and the places and passages about the same program (local_resource_id); "
        "conflicts: where a place or passage disagrees with the registry, which is authoritative for contact facts",
    )
    eligibility: EligibilityModel
    sources_queried: list[str]
    registry_lookups: list[dict[str, Any]]
    web: WebDecision
    candidates: int
    steps_ms: dict[str, float]
    persona: str | None = Field(None, description="the persona the request named (its `role` field)")
    population: list[PopulationHint] = Field(default_factory=list)
    negotiation: list[Offer] = Field(default_factory=list, description="the offers of a `negotiate` response")
    budget: Budget | None = None
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
    chunk_id: str
    collection: str
    source: str
    content: str
    heading_path: list[str]
    county: str | None
    seal_state: str
    score: float = Field(description="the raw hybrid score (min-max fusion: 0-2; RRF: ≈0.03 at best)")
    score_normalized: float = Field(
        description="the score on the documented 0..1 scale: relative to the best possible fused score "
        "(first in both rankings), capped at 1; the relevance part, before recency and attention; `min_score` "
        "applies to it"
    )
    scores: dict[str, float | None]
    provenance: dict[str, Any]
    local_resource_id: str | None = None
    page: int | None = Field(None, description="a PDF passage: the page it starts on")
    page_end: int | None = Field(None, description="a PDF passage spanning pages: the page it ends on")
    document_date: str | None = Field(None, description="the date the document carries (ISO), else its commit date")
    date_source: str | None = Field(None, description="front_matter, heading, file_name or commit")
    ref: int | None = Field(None, description="its number in the prompt (None: left out by the size budget)")


class PersonalPassage(BaseModel):
    memory_id: str
    kind: Literal["card", "exchange"]
    content: str
    created_at: str
    score: float = Field(description="cosine similarity to the message")
    personal: Literal[True] = True
    provenance: dict[str, Any] = Field(description="store, memory_id, kind, created_at, state (consolidated|pending)")
    ref: int | None = None


class Fact(BaseModel):
    subject: str
    subject_label: str
    predicate: str
    object: str
    object_kind: str
    object_label: str | None = Field(None, description="the label of an entity object (near)")
    provenance: dict[str, Any]
    resolved_from: str | None = Field(None, description="spatial, question, or passage <chunk id>")
    ref: int | None = None


class SpatialEntity(BaseModel):
    entity_id: str
    label: str
    description: str
    dataset: str
    gbim_entity: str
    county: str | None
    town: str | None
    address: str | None
    zip: str | None
    lon: float | None
    lat: float | None
    score: float
    matched_town: bool
    provenance: dict[str, Any]
    type: str | None = Field(None, description="the place's own type (food_pantry, clinic, benefits_office, ...)")
    programs: str | None = Field(None, description="the programs the place lists")
    phone: str | None = None
    local_resource_id: str | None = Field(None, description="the registry program this place is, when its data says")
    same_as: str | None = Field(
        None, description="the registry program in this answer this place is (linked: route.links); not given twice"
    )
    ref: int | None = None


class RegistryRow(BaseModel):
    local_resource_id: str
    name: str
    resource_type: str
    county: str
    zip: str
    address: str | None = None
    contact_phone: str | None = None
    url: str | None = None
    hours: str | None = None
    eligibility: str | None = None
    description: str | None = None
    verification_status: str
    last_verified_at: str | None = None
    match: str
    zip_coverage: list[str] | None = None
    conflicts: list[dict[str, Any]] | None = Field(
        None, description="where a linked place or passage disagrees with this row (the registry is authoritative)"
    )
    ref: int | None = None


class WebResult(BaseModel):
    title: str
    snippet: str
    url: str
    source: str
    published_at: str | None = None
    ref: int | None = None


class Prompt(BaseModel):
    system: str = Field(description="system text with the grounding instruction")
    context: str = Field(description="the labelled context block, numbered items, then the question")
    text: str = Field(description="system + context: what a model is given")
    chars: int
    budget_chars: int
    items_included: int
    items_left_out: int


class Citation(BaseModel):
    model_config = ConfigDict(extra="allow")

    n: int
    section: str
    kind: Literal["chunk", "fact", "entity", "registry", "web", "memory"]
    id: str


class Evidence(BaseModel):
    unstructured: list[Passage]
    structured_facts: list[Fact]
    spatial: list[SpatialEntity]
    registry: list[RegistryRow]
    web: list[WebResult]
    personal: list[PersonalPassage] = Field(default_factory=list, description="the caller's own memory (mix)")


class ContextResponse(Evidence):
    message: str
    route: Route
    facts_summary: str | None = Field(None, description="the structured facts in a few plain sentences")
    prompt: Prompt
    citations: list[Citation]
    index_version: str
    trace_id: str
    thread_id: str | None = None
    cached: bool


class Guardrail(BaseModel):
    mode: str
    action: str
    cited: int
    unmatched_citations: list[int] = Field(
        default_factory=list, description="numbers the answer cites, e.g. [99], that match no evidence item"
    )


class ChatResponse(BaseModel):
    answer: str
    citations: list[Citation] = Field(description="the evidence the answer cites, by its [n]")
    backend: Literal["llm", "extractive", "fixed"] = Field(
        description="llm: the configured model; extractive: quoted from the evidence; fixed: greeting, clarify, "
        "refuse or redirect text"
    )
    model: str
    fallback: str | None = Field(None, description="why the LLM was not used although configured")
    note: str | None = None
    guardrail: Guardrail
    route: Route
    evidence: Evidence
    index_version: str
    trace_id: str
    thread_id: str | None = None
    cached: bool


# --- OpenAI chat format -------------------------------------------------------------------------------------------------
class OpenAIMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: (
        Annotated[str, Field(max_length=MAX_MESSAGE_CHARS)]
        | Annotated[list[dict[str, Any]], Field(max_length=100)]
        | None
    ) = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return " ".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        return self.content or ""


class LivingMemoryOptions(BaseModel):
    """Living Memory's own request fields (OpenAI clients send them with ``extra_body``)."""

    model_config = ConfigDict(extra="forbid")

    county: str | None = Field(None, min_length=2, max_length=64)
    zip: str | None = Field(None, pattern=r"^[0-9]{5}$")
    profile: Profile | None = None
    top_k: int | None = Field(None, ge=1, le=50)
    thread_id: str | None = Field(None, max_length=128)
    persona: str | None = Field(None, max_length=64, description="as the `role` of /chat: narrows, never widens")
    min_score: float | None = Field(None, ge=0, le=1, description="as on /chat: on the normalised 0..1 scale")
    recency_bias: float = Field(0.0, ge=0, le=10)
    recency_half_life_days: float | None = Field(None, gt=0, le=36_500)
    max_words: int | None = Field(None, ge=20, le=2000, description="the answer budget in words")
    mix: Mix | None = Field(None, description="as on /chat: personal memory's share of top_k (needs a key)")
    user_id: str | None = Field(None, pattern=USER_ID_PATTERN, description="a user within the key's memory")
    remember: bool = Field(False, description="record this exchange in the caller's personal memory")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """OpenAI's request body. Sampling fields go to an LLM backend; fields that would change the answer's shape and
    are not supported (``tools``, ``n`` > 1, ...) are refused with 400; other fields are listed back as ignored in
    ``living_memory.options`` (docs/openai.md)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    model: str | None = Field(None, max_length=256)
    messages: list[OpenAIMessage] = Field(..., min_length=1, max_length=200)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(
        None, max_length=256, description="OpenAI's end-user id for abuse monitoring: never the conversation key"
    )
    metadata: dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]] | None = Field(
        None, max_length=16, description="OpenAI's metadata (16 pairs); `conversation_id` names the conversation"
    )
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    max_tokens: int | None = Field(None, ge=1, le=32_768)
    max_completion_tokens: int | None = Field(None, ge=1, le=32_768)
    n: int | None = Field(None, ge=1, le=128)
    stop: Annotated[str, Field(max_length=256)] | Annotated[list[str], Field(max_length=4)] | None = None
    seed: int | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    living_memory: LivingMemoryOptions | None = None


class ChoiceMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    index: int = 0
    message: ChoiceMessage
    finish_reason: Literal["stop", "length", "content_filter"] = "stop"


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class LivingMemoryExtra(BaseModel):
    """The evidence behind the answer: the documented extra field of a chat completion."""

    citations: list[Citation]
    backend: str
    fallback: str | None = None
    guardrail: Guardrail
    route: Route
    evidence: Evidence
    index_version: str
    trace_id: str
    cached: bool
    persona: str | None = None
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="what became of each request option: applied, not applicable (and why) or ignored; and how the "
        "conversation's earlier turns were used",
    )


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    living_memory: LivingMemoryExtra
