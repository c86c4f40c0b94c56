"""The orchestrator: one message → an auditable evidence set and the prompt built from it.

Plain functions, each a visible step of ``route`` (docs/context.md has the rules as tables):

1. ``route_intents``: explicit rules (regular expressions) decide the intents: greeting (small talk, answered
   without retrieval), governance, spatial, resource (referral), factual (relations of named entities), general.
2. ``self_query``: structured filters from the message and the request: counties from county, town and ZIP
   names; ``updated_after`` / ``updated_before`` from date expressions (a range on each document's own date, else
   its commit time: ``livemem.dates``); collections from scope phrases; ``seal_state`` from "authoritative" /
   "sealed".
3. ``eligibility``: what the caller's role may use (collections, registry, spatial datasets, web).
4. WV-first: a West-Virginia-scoped message makes WV text, spatial and registry evidence mandatory and
   authoritative and excludes web context.
5. Retrieval per source, kept apart (``unstructured``, ``structured_facts``, ``spatial``, ``registry``, ``web``;
   population hints steer the registry's program types; the GBIM graph answers relationship questions and adds the
   facts of entities the passages name, ``livemem.answer.graph``), then ``response_class`` (answer, negotiate, clarify,
   refuse, redirect), the response ``budget`` (answer length, hedging) and ``assemble_prompt`` within a size budget.

Passage scores are also given on one documented scale, ``score_normalized`` in [0, 1] (``normalized_score``);
the request's ``min_score`` applies to it. What a conversation carries into a message (place, persona, topic) is
decided before, in ``livemem.answer.conversation``.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from livemem.answer import graph
from livemem.dates import passage_date, question_dates
from livemem.geo.places import STATE, Place, county_name, find_places, zip_place
from livemem.query.fusion import normalized_score
from livemem.query.gis_index import GisIndex, cached_gis_index
from livemem.query.retrieval import Filters, Query, Retriever, chunk_result, top_order
from livemem.registry import RegistryQueryError, load_registry_index, resolve
from livemem.settings import ContextSettings
from livemem.version.reader import Snapshot

REGISTRY_NAME = "local_resources"


@dataclass(frozen=True)
class ContextRequest:
    message: str
    county: str | None = None
    zip: str | None = None
    profile: dict[str, Any] = field(default_factory=dict)
    top_k: int | None = None
    thread_id: str | None = None
    # A persona (livemem.answer.chat.resolve_persona) narrows the searched collections and frames the prompt.
    persona: str | None = None
    collections: tuple[str, ...] = ()  # () : every collection the caller may read
    framing: str = ""
    # Where county / zip came from when not from this request ("conversation: town Oak Hill"; livemem.answer.conversation).
    place_from: str | None = None
    min_score: float | None = None  # on the normalised scale [0, 1] (``normalized_score``)
    recency_bias: float = 0.0
    recency_half_life_days: float | None = None
    max_words: int | None = None  # the answer budget (None: the persona's, else ``answer_words``)
    conversation: dict[str, Any] | None = None  # what the conversation carried (route.conversation)
    personal: Any = (
        None  # livemem.answer.personal.PersonalView: the caller's own memory, its mix and nudges (None: unused)
    )


@dataclass(frozen=True)
class Caller:
    role: str
    access: frozenset[str]


# --- 1. intent routing -------------------------------------------------------------------------------------------
GREETING = re.compile(
    r"^\s*(?:(?:hi|hello|hey|howdy|hiya|good (?:morning|afternoon|evening)|thanks?|thank you|thx|bye|goodbye|"
    r"how are you|what'?s up|nice to meet you|ok(?:ay)?|cool)(?:\s+(?:there|again|so much|a lot|all|today|doing))*"
    r"[\s!.,?]*)+$",
    re.IGNORECASE,
)
RESOURCE_TYPES: dict[str, str] = {
    "utility_assistance": r"utilit\w*|heating|heat bill|electric\w*|water bill|lieap|liheap|energy assistance|"
    r"shut-?off",
    "snap": r"snap|food stamps?|ebt",
    "wic": r"wic",
    "medicaid": r"medicaid|wvchip|health coverage|health insurance",
    "food_pantry": r"pantry|pantries|food bank|groceries|meals?|soup kitchen|hungry",
    "seasonal_assistance": r"winter coats?|coats?|holiday|christmas|toys|school supplies|cooling cent\w*",
    "housing": r"housing|rent|rental|shelter|evict\w*|homeless\w*|weatheri\w*",
    "healthcare": r"clinic|doctor|dental|dentist|pharmac\w*|prescriptions?|primary care",
    "behavioral_health": r"mental health|counsel(?:ing|or)|addiction|substance use|behavioral health",
    "transportation": r"rides?|transportation|bus",
    "childcare": r"child ?care|daycare",
    "employment": r"jobs?|employment",
    "legal_aid": r"legal aid|lawyer|attorney|legal help",
    "senior_services": r"senior services|elderly",
    "disability_services": r"disability services",
}
RESOURCE_PATTERNS = {t: re.compile(rf"\b(?:{p})\b", re.IGNORECASE) for t, p in RESOURCE_TYPES.items()}
INTENT_RULES: list[tuple[str, str, re.Pattern[str]]] = [
    (
        "governance",
        "governance vocabulary",
        re.compile(
            r"\b(governance|council|constitution|charter|stewards?|minutes|decisions?|votes?|voted|bylaws?|"
            r"breath|sealed|authoritative|policy|policies)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "spatial",
        "place or proximity words",
        re.compile(
            r"\b(near|nearest|closest|where|map|located|location|address|directions?|around|distance|"
            r"within \d+ ?(?:km|miles?|mi))\b",
            re.IGNORECASE,
        ),
    ),
    (
        "resource",
        "help / program vocabulary",
        re.compile(
            r"\b(help|assistance|programs?|apply|application|benefits?|referr\w*|office|services?|eligib\w*|"
            r"qualify|pay(?:ing)?)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "factual",
        "relation question",
        re.compile(
            r"\b(which|what) (county|zip|zips|zip codes?)\b|\b(serves?|serving) (?:zip|the zip|\d{5})|"
            r"\blocated in\b|\bpart of\b|\bin which county\b|\b(?:relationship|relation|connection) between\b|"
            r"\b(?:connects?|connected|related|linked) (?:to|with)\b",
            re.IGNORECASE,
        ),
    ),
]
EMERGENCY = re.compile(
    r"\b(911|suicid\w*|kill (?:my|him|her)self|overdos\w*|in danger|being abused|emergency room)\b", re.IGNORECASE
)


def route_intents(message: str) -> tuple[list[str], list[dict[str, str]]]:
    """The intents of a message and the rules that fired (``general`` when no topical rule did)."""
    if GREETING.match(message):
        return ["greeting"], [{"intent": "greeting", "rule": "whole message is small talk", "matched": message}]
    intents: list[str] = []
    fired: list[dict[str, str]] = []
    for intent, rule, pattern in INTENT_RULES:
        m = pattern.search(message)
        if m:
            intents.append(intent)
            fired.append({"intent": intent, "rule": rule, "matched": m.group(0)})
    for rtype, pattern in RESOURCE_PATTERNS.items():
        m = pattern.search(message)
        if m:
            if "resource" not in intents:
                intents.append("resource")
            fired.append({"intent": "resource", "rule": f"resource type {rtype}", "matched": m.group(0)})
    if not {"governance", "resource", "factual"} & set(intents):
        intents.append("general")
        fired.append({"intent": "general", "rule": "no topical rule matched", "matched": ""})
    return intents, fired


def resource_types(message: str) -> list[str]:
    return [t for t, p in RESOURCE_PATTERNS.items() if p.search(message)]


# Population hints: who the help is for. They steer the registry lookups to the program types that population is
# usually referred to when the message names none, and rank rows whose eligibility or description mentions that
# population first (docs/context.md, "Population hints").
POPULATIONS: list[tuple[str, str, tuple[str, ...], str]] = [
    (
        "senior",
        r"grand(?:mother|father|parents?|ma|pa)|elderly|seniors?|older (?:adults?|people)|aging parents?|"
        r"retir(?:ed|ees?)",
        ("senior_services", "medicaid", "utility_assistance", "healthcare", "transportation"),
        r"senior|elderly|older|aging|long-term care|\b6[05]\+?",
    ),
    (
        "family_with_children",
        r"famil(?:y|ies) with (?:kids|children|a baby|young children)|my (?:kids|children|baby|son|daughter)|"
        r"kids|children|infants?|toddlers?|newborns?|babies",
        ("wic", "snap", "childcare", "seasonal_assistance", "medicaid", "food_pantry"),
        r"child|famil|infant|kids|baby",
    ),
    (
        "pregnant",
        r"pregnan\w*|expecting a baby|breastfeed\w*|postpartum",
        ("wic", "medicaid", "healthcare"),
        r"pregnan|breastfeed|postpartum",
    ),
    (
        "veteran",
        r"veterans?|vets|served in the (?:army|navy|military|marines|air force)",
        ("healthcare", "behavioral_health", "housing", "employment", "disability_services"),
        r"veteran",
    ),
    (
        "disability",
        r"disabilit(?:y|ies)|disabled|wheelchair",
        ("disability_services", "medicaid", "transportation"),
        r"disabilit|disabled",
    ),
]
POPULATION_PATTERNS = [
    (name, re.compile(rf"\b(?:{words})\b", re.IGNORECASE), types, re.compile(rows, re.IGNORECASE))
    for name, words, types, rows in POPULATIONS
]


def population_hints(message: str) -> list[dict[str, Any]]:
    """The populations a message names, each with the words that named it and the program types it steers to."""
    found = []
    for name, pattern, types, _ in POPULATION_PATTERNS:
        if m := pattern.search(message):
            found.append({"population": name, "matched": m.group(0), "resource_types": list(types)})
    return found


def serves_population(row: dict[str, Any], populations: list[dict[str, Any]]) -> bool:
    """Whether a registry row's eligibility or description names one of the populations."""
    text = f"{row.get('eligibility') or ''} {row.get('description') or ''}"
    wanted = {p["population"] for p in populations}
    return any(rows.search(text) for name, _, _, rows in POPULATION_PATTERNS if name in wanted)


# --- 2. self-querying --------------------------------------------------------------------------------------------
SCOPE_RULES: list[tuple[str, re.Pattern[str]]] = [
    (
        "governance",
        re.compile(
            r"\b(?:in|from|according to|per|within|under|search) (?:the )?(?:governance (?:docs?|documents?|records?|"
            r"files?|texts?)|council (?:minutes|decisions|records)|charter|constitution)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "wv_benefits",
        re.compile(
            r"\b(?:in|from|according to|per|within) (?:the )?(?:county |benefits? |wv )*(?:benefits? )?guides?\b",
            re.IGNORECASE,
        ),
    ),
    ("code", re.compile(r"\b(?:in|from|within) (?:the )?(?:client |example )?(?:code|source code)\b", re.IGNORECASE)),
    (
        "internal_playbooks",
        re.compile(
            r"\b(?:in|from|according to|per|within) (?:the )?(?:caseworker |internal )?playbooks?\b|"
            r"\binternal (?:docs?|documents?|guidance|playbooks?)\b",
            re.IGNORECASE,
        ),
    ),
]
COLLECTION_SCOPE = re.compile(r"\b(?:in|from) (?:the )?([a-z0-9_.-]{3,}) collection\b", re.IGNORECASE)
SEAL_WORDS = re.compile(r"\b(authoritative|sealed)\b", re.IGNORECASE)


def time_filters(message: str, now: datetime) -> tuple[dict[str, datetime], list[dict[str, str]]]:
    """``updated_after`` / ``updated_before`` from the date expressions of the message (``livemem.dates``); they
    filter on each document's own date, else its commit time (``text_search``)."""
    found, notes = question_dates(message, now)
    times = {"updated_after": found.after, "updated_before": found.before}
    return {k: v for k, v in times.items() if v is not None}, notes


@dataclass
class SelfQuery:
    counties: list[str] = field(default_factory=list)
    zip: str | None = None
    zip_state: str | None = None
    places: list[Place] = field(default_factory=list)
    towns: list[str] = field(default_factory=list)
    collections: list[str] = field(default_factory=list)
    seal_state: str | None = None
    updated_after: datetime | None = None
    updated_before: datetime | None = None
    resource_types: list[str] = field(default_factory=list)
    populations: list[dict[str, Any]] = field(default_factory=list)
    notes: list[dict[str, str]] = field(default_factory=list)

    def steered_types(self) -> list[str]:
        """The program types of the registry lookups: the message's own, else its populations' (in order)."""
        if self.resource_types:
            return self.resource_types
        return list(dict.fromkeys(t for p in self.populations for t in p["resource_types"]))

    def filters(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "county": self.counties,
            "zip": self.zip,
            "collections": self.collections,
            "seal_state": self.seal_state,
            "updated_after": iso(self.updated_after),
            "updated_before": iso(self.updated_before),
            "resource_type": self.resource_types,
        }
        return {k: v for k, v in out.items() if v}


def self_query(request: ContextRequest, known_collections: list[str], now: datetime) -> SelfQuery:
    """Structured filters from the request fields and the message text. Only ``known_collections`` (the ones the
    caller may read) can become a scope: any other name, hidden or nonexistent, is ignored the same way."""
    sq = SelfQuery()

    def add_county(county: str | None, source: str) -> None:
        if county and county not in sq.counties:
            sq.counties.append(county)
            sq.notes.append({"field": "county", "value": county, "from": source})

    if request.county:
        add_county(county_name(request.county) or request.county, request.place_from or "request county")
    profile = request.profile or {}
    if isinstance(profile.get("county"), str):
        add_county(county_name(profile["county"]) or profile["county"], "profile county")
    zip_code = request.zip or (profile.get("zip") if isinstance(profile.get("zip"), str) else None)
    if zip_code:
        place = zip_place(zip_code)
        sq.zip = zip_code
        sq.zip_state = place.state if place else None
        sq.notes.append({"field": "zip", "value": zip_code, "from": request.place_from or "request zip"})
        if place and place.state == STATE:
            add_county(
                place.county, f"{request.place_from}: ZIP {zip_code}" if request.place_from else f"ZIP {zip_code}"
            )
    sq.places = find_places(request.message)
    for place in sq.places:
        if place.kind == "zip":
            if sq.zip is None:
                sq.zip, sq.zip_state = place.text, place.state
                sq.notes.append({"field": "zip", "value": place.text, "from": f"message ZIP {place.text}"})
            if place.state == STATE:
                add_county(place.county, f"ZIP {place.text}")
        elif place.kind == "county":
            add_county(place.county, f"county {place.text}")
        elif place.kind == "town":
            sq.towns.append(place.text)
            add_county(place.county, f"town {place.text}")
    for collection, pattern in SCOPE_RULES:
        m = pattern.search(request.message)
        if m and collection in known_collections and collection not in sq.collections:
            sq.collections.append(collection)
            sq.notes.append({"field": "collections", "value": collection, "from": m.group(0)})
    for m in COLLECTION_SCOPE.finditer(request.message):
        if m.group(1) in known_collections and m.group(1) not in sq.collections:
            sq.collections.append(m.group(1))
            sq.notes.append({"field": "collections", "value": m.group(1), "from": m.group(0)})
    m = SEAL_WORDS.search(request.message)
    if m:
        sq.seal_state = "SEALED"
        sq.notes.append({"field": "seal_state", "value": "SEALED", "from": m.group(0)})
    times, time_notes = time_filters(request.message, now)
    sq.updated_after, sq.updated_before = times.get("updated_after"), times.get("updated_before")
    sq.notes.extend(time_notes)
    sq.resource_types = resource_types(request.message)
    sq.populations = population_hints(request.message)
    return sq


# --- 3. role-aware eligibility and WV scope --------------------------------------------------------------------------
@dataclass
class Eligibility:
    collections: list[str]
    hidden: list[str]
    registries: list[str]
    spatial_datasets: list[str]
    web: bool

    def public(self) -> dict[str, Any]:
        """What the caller may be told: its own eligible sources, never the names of hidden ones."""
        return {
            "collections": self.collections,
            "registries": self.registries,
            "spatial_datasets": self.spatial_datasets,
            "web": self.web,
        }


def eligibility(snap: Snapshot, gis: GisIndex | None, caller: Caller, settings: ContextSettings) -> Eligibility:
    visible = snap.collections_for(caller.access)
    hidden = sorted(set(snap.access_of) - set(visible))
    datasets: list[str] = []
    if gis is not None:
        datasets = sorted({str(d) for d, a in zip(gis.dataset, gis.access, strict=True) if a in caller.access})
    registries = [REGISTRY_NAME] if load_registry_index(snap.path) is not None else []
    web = settings.web_roles is None or caller.role in settings.web_roles
    return Eligibility(visible, hidden, registries, datasets, web)


def wv_scope(sq: SelfQuery, request: ContextRequest, caller: Caller, settings: ContextSettings) -> list[str]:
    """Why the message is West-Virginia-scoped (empty: it is not)."""
    reasons: list[str] = []
    for county in sq.counties:
        if county_name(county):
            reasons.append(f"WV county {county}")
    if sq.zip and sq.zip_state == STATE:
        reasons.append(f"WV ZIP {sq.zip}")
    if caller.role in settings.wv_roles:
        reasons.append(f"WV role {caller.role}")
    state = str((request.profile or {}).get("state", "")).strip().lower()
    if state in ("wv", "west virginia"):
        reasons.append("profile state WV")
    for place in sq.places:
        if place.state == STATE and place.kind in ("state", "town"):
            reasons.append(f"WV place in the text: {place.text}")
    return list(dict.fromkeys(reasons))


# --- 4. retrieval per source ------------------------------------------------------------------------------------------


def gis_for(snap: Snapshot) -> GisIndex | None:
    return cached_gis_index(str(snap.path))


def text_search(
    snap: Snapshot,
    retriever: Retriever,
    request: ContextRequest,
    vector: np.ndarray,
    collections: list[str],
    sq: SelfQuery,
    top_k: int,
    min_dense: float,
) -> tuple[list[dict[str, Any]], int]:
    """Passages passing the thresholds (cosine ``min_dense``; the request's ``min_score`` on the normalised scale):
    the counties' own passages first, then the rest (minus other counties')."""
    message = request.message
    # The question's dates filter on each document's own date, else its commit time (``livemem.dates``), before
    # ranking: every passage in range can be found, however many are out of it.
    base = {"seal_state": sq.seal_state, "dated_after": sq.updated_after, "dated_before": sq.updated_before}
    searches = []
    if sq.counties:
        searches.append(Filters(county=tuple(sq.counties), **base))
    searches.append(Filters(**base))
    wanted = set(sq.counties)
    out: dict[str, dict[str, Any]] = {}
    candidates = 0
    for filters in searches:
        if len(out) >= top_k:
            break
        query = Query(
            message, top_k, collections=tuple(collections), filters=filters, recency_bias=request.recency_bias,
            recency_half_life_days=request.recency_half_life_days,
        )  # fmt: skip
        found = retriever.search(snap, query, collections, vector)
        candidates = max(candidates, found.candidates)
        for hit in found.chunks:
            if (hit.dense or 0.0) < min_dense or len(out) >= top_k:
                continue
            normalized = normalized_score(hit.score, retriever.fusion, found.chunks[0].score)
            if request.min_score is not None and normalized < request.min_score:
                continue
            result = {**chunk_result(snap, hit), "score_normalized": normalized}
            county = result["metadata"].get("county")
            if wanted and county and county not in wanted:
                continue  # another county's rules would poison this answer
            out.setdefault(result["chunk_id"], result)
    return list(out.values()), candidates


REFINEMENT_SHARE = 3  # a refinement adds at most a third of the passages (at least one), replacing the last ones


def refine_passages(
    snap: Snapshot,
    retriever: Retriever,
    request: ContextRequest,
    terms: list[str],
    collections: list[str],
    sq: SelfQuery,
    pool: int,
    settings: Any,
    sections: dict[str, Any],
) -> list[dict[str, Any]]:
    """A second text search with the graph's terms added to the message (``livemem.answer.graph.refinement_terms``): the
    passages it finds that the first did not replace the first search's last ones (at most a third of them), so
    the evidence stays within ``top_k``. Returns the passages added."""
    refined = replace(request, message=f"{request.message} {' '.join(terms)}")
    vector = retriever.encode(refined.message)
    found, _ = text_search(snap, retriever, refined, vector, collections, sq, pool, settings.min_dense)
    seen = {p["chunk_id"] for p in sections["unstructured"]}
    added = [passage(r) for r in found if r["chunk_id"] not in seen][: max(1, pool // REFINEMENT_SHARE)]
    if added:
        kept = sections["unstructured"][: max(0, pool - len(added))]
        sections["unstructured"] = kept + added
    return added


def passage(result: dict[str, Any]) -> dict[str, Any]:
    meta = result["metadata"]
    return {
        "chunk_id": result["chunk_id"],
        "collection": result["collection"],
        "source": result["source"],
        "content": result["content"],
        "heading_path": meta.get("heading_path") or [],
        "county": meta.get("county"),
        "seal_state": result["seal_state"],
        "score": result["score"],
        "score_normalized": result["score_normalized"],
        "scores": result["scores"],
        "provenance": result["provenance"],
        "local_resource_id": meta.get("local_resource_id"),
        **passage_date(meta, result["provenance"]["timestamp"]),
    }


def spatial_search(
    gis: GisIndex, access: frozenset[str], vector: np.ndarray, sq: SelfQuery, k: int, min_score: float
) -> list[dict[str, Any]]:
    """Entities of the counties (or, without one, similar enough), towns named in the message first."""
    if k <= 0:
        return []
    mask = gis.mask(access, counties=tuple(sq.counties))
    rows = np.flatnonzero(mask)
    if not rows.size:
        return []
    scores = gis.dense[rows] @ vector
    order = top_order(scores, rows.size)
    towns = {t.lower() for t in sq.towns}
    picked: list[tuple[int, float, bool]] = []
    for i in order:
        entity = gis.entities[int(rows[i])]
        in_town = str(entity["attributes"].get("city", "")).lower() in towns
        if in_town or sq.counties or scores[i] >= min_score:
            picked.append((int(rows[i]), float(scores[i]), in_town))
    picked.sort(key=lambda p: (not p[2], -p[1]))
    return [spatial_item(gis.entities[row], score, in_town) for row, score, in_town in picked[:k]]


def spatial_item(e: dict[str, Any], score: float, in_town: bool) -> dict[str, Any]:
    """An entity as the ``spatial`` section shows it."""
    return {
        "entity_id": e["entity_id"],
        "label": e["label"],
        "description": e["description"],
        "dataset": e["dataset"],
        "gbim_entity": e["gbim_entity"],
        "county": e["county"],
        "town": e["attributes"].get("city"),
        "address": e["attributes"].get("address"),
        "zip": e["attributes"].get("zip"),
        "lon": e["lon"],
        "lat": e["lat"],
        "score": score,
        "matched_town": in_town,
        "provenance": {"source": e["source"], "table": e["source_table"], "pk": e["source_pk"]},
    }


def structured_facts(gis: GisIndex, entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GBIM relations (``gbim_relations``) of the entities in evidence, as labelled triples."""
    return [
        graph.fact(gis, e["entity_id"], rel, "spatial")
        for e in entities
        for rel in gis.relations.get(e["entity_id"], [])
    ]


def merge_facts(first: list[dict[str, Any]], then: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Both lists of triples, each triple once (where it first appears)."""
    merged: dict[tuple[str, str, str], dict[str, Any]] = {}
    for f in [*first, *then]:
        merged.setdefault((f["subject"], f["predicate"], f["object"]), f)
    return list(merged.values())


MAX_LOOKUP_COUNTIES = 3
TYPE_LABELS = {"snap": "SNAP", "wic": "WIC", "medicaid": "Medicaid"}
ALTERNATIVES = 3  # programs of a missing type offered from other counties
REGISTRY_FIELDS = (
    "local_resource_id", "name", "resource_type", "county", "zip", "address", "contact_phone", "url", "hours",
    "eligibility", "description", "verification_status", "last_verified_at", "match",
)  # fmt: skip


def registry_lookup(
    snap: Snapshot, sq: SelfQuery, ids: list[str], limit: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Verified registry rows for the place (each county named, at most three) and the program types (the
    message's, else its populations'); rows serving a named population first. Also the lookups made (audit)."""
    index = load_registry_index(snap.path)
    if index is None or limit <= 0:
        return [], []
    place_zip = sq.zip if sq.zip_state == index.state else None
    counties: list[str | None] = list(sq.counties[:MAX_LOOKUP_COUNTIES]) or [None]
    types = sq.steered_types()
    if place_zip is None and counties == [None] and not types and not ids:
        return [], []
    steered = not sq.resource_types and bool(types)
    rows: dict[str, dict[str, Any]] = {}
    lookups: list[dict[str, Any]] = []
    for i, county in enumerate(counties):
        for rtype in types or [None]:
            # the ZIP narrows the county it lies in (the first); other counties named are searched whole
            args = {"zip": place_zip if i == 0 else None, "county": county, "resource_type": rtype, "ids": ids}
            try:
                found = resolve(index, limit=limit, **args)
            except RegistryQueryError as exc:
                lookups.append({**args, "error": str(exc)})
                continue
            lookup = {**args, "total": found.total, "returned": [r["local_resource_id"] for r in found.rows]}
            if steered:
                lookup["steered_by"] = [p["population"] for p in sq.populations if rtype in p["resource_types"]]
            lookups.append(lookup)
            for row in found.rows:
                rows.setdefault(row["local_resource_id"], {k: row.get(k) for k in REGISTRY_FIELDS})
    ordered = list(rows.values())
    if sq.populations:
        ordered.sort(key=lambda row: not serves_population(row, sq.populations))  # stable: resolve's order within
    return ordered[:limit], lookups


def negotiation(
    snap: Snapshot, sq: SelfQuery, registry: list[dict[str, Any]], lookups: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """What to agree on with the person when the evidence answers only part of the request (response class
    ``negotiate``): a program type they named with no verified program at their place (up to ``ALTERNATIVES``
    programs of that type in other counties are offered), or several counties named (which one do they mean?)."""
    offers: list[dict[str, Any]] = []
    if len(sq.counties) > 1:
        offers.append({"kind": "choose_county", "counties": sq.counties,
                       "text": f"You named {' and '.join(sq.counties)} counties: evidence for each is below; "
                               "which one do you mean?"})  # fmt: skip
    index = load_registry_index(snap.path)
    place = f"{sq.counties[0]} County" if sq.counties else f"ZIP {sq.zip}" if sq.zip else None
    if index is None or place is None or not sq.resource_types:
        return offers
    have = {row["resource_type"] for row in registry}
    for rtype in sq.resource_types:
        asked = [lk for lk in lookups if lk.get("resource_type") == rtype and "error" not in lk]
        if rtype in have or not asked or any(lk["total"] for lk in asked):
            continue
        rows = resolve(index, resource_type=rtype).rows
        elsewhere = [r for r in rows if r["county"] not in sq.counties][:ALTERNATIVES]
        label = TYPE_LABELS.get(rtype, rtype.replace("_", " "))
        missing = f"No verified {label} program is listed for {place}"
        if elsewhere:
            names = "; ".join(f"{r['name']} ({r['county']} County)" for r in elsewhere)
            text = f"{missing}. Listed elsewhere: {names}. Would one of those work?"
        else:
            text = f"{missing} or anywhere in Living Memory; 211 can help find one."
        offers.append(
            {
                "kind": "elsewhere" if elsewhere else "none_listed",
                "resource_type": rtype,
                "missing_in": place,
                "alternatives": [{k: r.get(k) for k in REGISTRY_FIELDS} for r in elsewhere],
                "text": text,
            }
        )
    return offers


# --- 5. prompt assembly ------------------------------------------------------------------------------------------------
GROUNDING_WV = (
    "This question is about West Virginia. The West Virginia evidence below (text passages, GBIM facts, mapped "
    "places and verified registry programs) is mandatory and authoritative: answer only from it, prefer verified "
    "registry rows for referrals, and do not use web results or outside knowledge. If the evidence does not "
    "answer the question, say so and suggest calling the listed office."
)
GROUNDING_OPEN = (
    "Answer from the evidence below. Local evidence (text passages, GBIM facts, places, registry programs) is "
    "authoritative; web results, when present, are secondary and must be named as such. If the evidence does not "
    "answer the question, say so."
)
SYSTEM_TEXT = (
    "You are Living Memory, a careful assistant for benefits and community resources. Cite every statement with "
    "the bracketed number of the evidence it rests on, e.g. [2]. Never invent phone numbers, addresses or rules."
)
SECTION_TITLES = {
    "unstructured": "Text passages",
    "structured_facts": "Structured facts (GBIM relations)",
    "spatial": "Places (GBIM entities)",
    "registry": "Verified programs (local_resources registry)",
    "personal": "The person's own memory (what they told Living Memory; not authoritative)",
    "web": "Web results (not authoritative)",
}
SECTIONS = tuple(SECTION_TITLES)


def evidence_line(section: str, item: dict[str, Any], max_chars: int) -> str:
    if section == "unstructured":
        where = f"{item['collection']} · {item['provenance']['path']} @ {item['provenance']['commit'][:8]}"
        heading = " > ".join(item["heading_path"])
        seal = " · SEALED" if item["seal_state"] == "SEALED" else ""
        text = " ".join(item["content"].split())
        if len(text) > max_chars:
            text = text[: max_chars - 1].rstrip() + "…"
        return f"({where}{seal}) {heading}\n{text}"
    if section == "structured_facts":
        target = item.get("object_label") or item["object"]  # a near fact names the other entity, not its id
        return f"{item['subject_label']} {item['predicate']} {target} ({item['object_kind']})"
    if section == "spatial":
        where = ", ".join(str(v) for v in (item.get("address"), item.get("town"), item.get("zip")) if v)
        return (
            f"{item['label']} ({item['gbim_entity']}, {item['county']} County; {where}; lat {item['lat']:.4f}, "
            f"lon {item['lon']:.4f}): {item['description']}"
            if item.get("lat") is not None
            else f"{item['label']} ({item['gbim_entity']}, {item['county']} County): {item['description']}"
        )
    if section == "registry":
        parts = [
            f"{item['name']} [{item['local_resource_id']}; {item['resource_type']}; {item['county']} County; "
            f"{item['verification_status']}]",
            item.get("description"),
            item.get("address"),
            f"phone {item['contact_phone']}" if item.get("contact_phone") else None,
            f"hours {item['hours']}" if item.get("hours") else None,
            f"eligibility {item['eligibility']}" if item.get("eligibility") else None,
            item.get("url"),
        ]
        return " · ".join(p for p in parts if p)
    if section == "personal":
        text = " ".join(item["content"].split())[:max_chars]
        return f"(your memory · {item['kind']} · {item['created_at'][:10]}) {text}"
    return f"{item['title']} ({item['url']}, {item.get('published_at') or 'undated'}): {item['snippet']}"


def citation_for(section: str, item: dict[str, Any]) -> dict[str, Any]:
    if section == "unstructured":
        return {"kind": "chunk", "id": item["chunk_id"], "collection": item["collection"],
                "provenance": item["provenance"]}  # fmt: skip
    if section == "structured_facts":
        return {"kind": "fact", "id": item["subject"], "predicate": item["predicate"], "object": item["object"],
                "provenance": item["provenance"]}  # fmt: skip
    if section == "spatial":
        return {"kind": "entity", "id": item["entity_id"], "label": item["label"], "provenance": item["provenance"]}
    if section == "registry":
        return {"kind": "registry", "id": item["local_resource_id"], "name": item["name"],
                "verification_status": item["verification_status"]}  # fmt: skip
    if section == "personal":
        return {"kind": "memory", "id": item["memory_id"], "created_at": item["created_at"], "memory": item["kind"]}
    return {"kind": "web", "id": item["url"], "title": item["title"], "source": item["source"]}


def assemble_prompt(
    message: str,
    sections: dict[str, list[dict[str, Any]]],
    wv_scoped: bool,
    settings: ContextSettings,
    extra_system: list[str] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """System text with the grounding instruction, then the labelled context block, within the size budget.

    Items are admitted by priority (WV-scoped: registry, places, facts, passages; otherwise passages first);
    passages are cut to ``max_passage_chars``; an item that does not fit is left out (``ref`` stays None).
    Citation numbers follow the order of the context block.
    """
    grounding = GROUNDING_WV if wv_scoped else GROUNDING_OPEN
    system = "\n".join([SYSTEM_TEXT, grounding, *(extra_system or [])])
    question = f"\n\nQuestion: {message}"
    budget = settings.prompt_budget_chars - len(system) - len(question) - 40
    order = (
        ("registry", "spatial", "structured_facts", "unstructured", "personal", "web")
        if wv_scoped
        else ("unstructured", "personal", "registry", "spatial", "structured_facts", "web")
    )
    lines: dict[tuple[str, int], str] = {}
    used = sum(len(SECTION_TITLES[s]) + 6 for s in SECTIONS if sections.get(s))
    dropped = 0
    # Round-robin over the priority order so one long section cannot crowd the others out entirely.
    queues = {s: list(enumerate(sections.get(s, []))) for s in order}
    while any(queues.values()):
        for section in order:
            if not queues[section]:
                continue
            i, item = queues[section].pop(0)
            line = evidence_line(section, item, settings.max_passage_chars)
            cost = len(line) + 8
            if used + cost > budget and section == "unstructured" and budget - used > 300:
                line = evidence_line(section, item, budget - used - 120)
                cost = len(line) + 8
            if used + cost > budget:
                dropped += 1
                continue
            lines[(section, i)] = line
            used += cost
    citations: list[dict[str, Any]] = []
    blocks: list[str] = []
    for section in SECTIONS:
        items = sections.get(section, [])
        rendered = []
        for i, item in enumerate(items):
            line = lines.get((section, i))
            if line is None:
                item["ref"] = None
                continue
            n = len(citations) + 1
            item["ref"] = n
            citations.append({"n": n, "section": section, **citation_for(section, item)})
            rendered.append(f"[{n}] {line}")
        if rendered:
            blocks.append(f"## {SECTION_TITLES[section]}\n" + "\n".join(rendered))
    context = "Context:\n" + ("\n\n".join(blocks) if blocks else "(no evidence)") + question
    text = f"{system}\n\n{context}"
    prompt = {
        "system": system,
        "context": context,
        "text": text,
        "chars": len(text),
        "budget_chars": settings.prompt_budget_chars,
        "items_included": len(citations),
        "items_left_out": dropped,
    }
    return prompt, citations


# --- response budgets ---------------------------------------------------------------------------------------------
PERSONA_ANSWER_WORDS = {"community": 120, "caseworker": 250, "governance_engineer": 250, "researcher": 350}
HEDGING_TEXT = {
    "none": "The evidence is verified or authoritative: state it plainly, without hedging.",
    "light": "The evidence is documents and places, not verified program listings: say the person should confirm "
    "details (hours, eligibility) with the office.",
    "strong": "The evidence is thin (weak matches or web results only): say plainly that it may not answer the "
    "question and do not guess.",
}
NEGOTIATE_TEXT = (
    "The evidence answers only part of the request: say what is missing, offer the listed alternatives and ask "
    "which the person prefers."
)
STRONG_BELOW = 0.35  # best passage cosine under this, with no verified program or place: the evidence is thin


def response_budget(
    response_class: str,
    intents: list[str],
    sections: dict[str, list[dict[str, Any]]],
    request: ContextRequest,
    settings: ContextSettings,
) -> dict[str, Any]:
    """How long the answer may be and how much it must hedge, and why (``route.budget``)."""
    words = request.max_words or PERSONA_ANSWER_WORDS.get(request.persona or "", settings.answer_words)
    if intents == ["greeting"] or response_class in ("clarify", "redirect", "refuse"):
        return {"max_words": words, "hedging": "none", "reasons": ["a fixed reply: nothing to hedge"]}
    verified = [r for r in sections["registry"] if r.get("verification_status") == "verified"]
    sealed = [p for p in sections["unstructured"] if p["seal_state"] == "SEALED"]
    best = max((p["scores"].get("dense") or 0.0 for p in sections["unstructured"]), default=0.0)
    local = sections["unstructured"] or sections["spatial"] or sections["registry"]
    if not local:
        hedging, reasons = "strong", ["web results only: not authoritative"]
    elif not verified and not sealed and not sections["spatial"] and best < STRONG_BELOW:
        hedging, reasons = "strong", [f"best passage cosine {best:.2f} < {STRONG_BELOW}"]
    elif verified or sealed:
        hedging = "none"
        reasons = [f"{len(verified)} verified program(s)" if verified else f"{len(sealed)} sealed passage(s)"]
    else:
        hedging, reasons = "light", ["documents and places, no verified program or sealed source"]
    return {"max_words": words, "hedging": hedging, "reasons": reasons}


def budget_instruction(budget: dict[str, Any], response_class: str) -> str:
    text = f"Answer in at most {budget['max_words']} words. {HEDGING_TEXT[budget['hedging']]}"
    return f"{text} {NEGOTIATE_TEXT}" if response_class == "negotiate" else text


# --- the whole flow ------------------------------------------------------------------------------------------------------
REDIRECT_EMERGENCY = "This sounds urgent: call 911 for an emergency, or 988 (call or text) for a mental health crisis."
GREETING_REPLY = (
    "Hello! I can help you find benefits and community programs in West Virginia (SNAP, WIC, Medicaid, heating "
    "help, food pantries and more). Tell me what you need and your county or ZIP code."
)


def build_context(
    snap: Snapshot,
    retriever: Retriever,
    caller: Caller,
    request: ContextRequest,
    settings: ContextSettings,
    web: Any | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The evidence set, route and prompt for one message (no I/O besides the index and the web gateway)."""
    now = now or datetime.now(UTC)
    steps: dict[str, float] = {}
    t = time.perf_counter()

    def tick(name: str) -> None:
        nonlocal t
        now_t = time.perf_counter()
        steps[name] = round((now_t - t) * 1000, 3)
        t = now_t

    intents, rules = route_intents(request.message)
    tick("intent")
    gis = gis_for(snap)
    elig = eligibility(snap, gis, caller, settings)
    if request.collections:  # narrows only: a collection the caller may not read never comes back
        elig.collections = [c for c in elig.collections if c in request.collections]
    # A collection the role may not read is treated as one that does not exist: same answer, same notes.
    sq = self_query(request, elig.collections, now)
    tick("self_query")
    wv_reasons = wv_scope(sq, request, caller, settings)
    wv_scoped = bool(wv_reasons)
    sections: dict[str, list[dict[str, Any]]] = {s: [] for s in SECTIONS}
    queried: list[str] = []
    registry_lookups: list[dict[str, Any]] = []
    candidates = 0
    offers: list[dict[str, Any]] = []
    graph_route: dict[str, Any] | None = None
    response_class, reason = "answer", "evidence found"
    web_info: dict[str, Any] = {"admitted": False, "reason": "", "calls": []}
    out_of_state = [p for p in sq.places if p.state != STATE]
    if sq.zip and sq.zip_state and sq.zip_state != STATE:
        out_of_state.append(Place("zip", sq.zip, None, sq.zip_state))
    top_k = request.top_k or settings.top_k

    if intents == ["greeting"]:
        response_class, reason = "answer", "small talk: answered without retrieval"
    elif EMERGENCY.search(request.message):
        response_class, reason = "redirect", "emergency words: pointed to 911 / 988"
    elif out_of_state and not wv_scoped:
        response_class = "redirect"
        reason = f"place outside West Virginia ({', '.join(p.text for p in out_of_state)}): this memory covers WV"
    else:
        collections = sq.collections or elig.collections
        vector = retriever.encode(request.message)
        tick("encode")
        mine = request.personal  # the mix: the person's own memory takes its share of top_k first
        sections["personal"] = mine.search(vector, top_k, settings.min_dense) if mine else []
        corpus_k = top_k - len(sections["personal"])
        pool = mine.corpus_pool(corpus_k) if mine else corpus_k
        found, candidates = [], 0
        if pool:
            found, candidates = text_search(snap, retriever, request, vector, collections, sq, pool, settings.min_dense)
        if mine:
            found = mine.nudge(found, sq.counties, corpus_k)  # this user's feedback, bounded (livemem.answer.personal)
        sections["unstructured"] = [passage(r) for r in found]
        queried.extend(collections)
        tick("text")
        wants_places = bool({"spatial", "resource", "factual"} & set(intents)) or wv_scoped
        if gis is not None and wants_places and elig.spatial_datasets and not sq.collections:
            sections["spatial"] = spatial_search(
                gis, caller.access, vector, sq, settings.spatial_k, settings.min_spatial
            )
            sections["structured_facts"] = structured_facts(gis, sections["spatial"])
            queried.append("gbim")
            tick("spatial")
        if gis is not None and elig.spatial_datasets and not sq.collections:
            # The graph beside the passages: relationship questions, and entities the passages name (livemem.answer.graph)
            graph_facts, graph_route = graph.fuse(gis, caller.access, request.message, sections["unstructured"])
            if graph_facts:
                sections["structured_facts"] = merge_facts(graph_facts, sections["structured_facts"])
                queried.extend([] if "gbim" in queried else ["gbim"])
            refine = graph.refinement_terms(graph_route, request.message) if pool else []
            if refine:  # iterative refinement: search the text again with what the graph found
                added = refine_passages(snap, retriever, request, refine, collections, sq, pool, settings, sections)
                graph_route["refinement"] = {"terms": refine, "added": [p["chunk_id"] for p in added]}
                more_facts, _ = graph.fuse(gis, caller.access, "", added)  # the facts of what they name
                if more_facts:
                    sections["structured_facts"] = merge_facts(sections["structured_facts"], more_facts)
            shown = {e["entity_id"] for e in sections["spatial"]}
            for entity_id in graph.asked_entities(graph_route):  # the places the question names are evidence too
                if entity_id not in shown:
                    row = gis.row_of[entity_id]
                    sections["spatial"].append(spatial_item(gis.entities[row], float(gis.dense[row] @ vector), False))
            tick("graph")
        wants_registry = "resource" in intents or (wv_scoped and sq.counties)
        if elig.registries and wants_registry and not sq.collections:
            ids = [p["local_resource_id"] for p in sections["unstructured"] if p.get("local_resource_id")]
            sections["registry"], registry_lookups = registry_lookup(snap, sq, ids, settings.registry_limit)
            queried.append(REGISTRY_NAME)
            tick("registry")
        if wv_scoped:
            web_info["reason"] = "excluded: West-Virginia-scoped (" + "; ".join(wv_reasons) + ")"
        elif web is None:
            web_info["reason"] = "excluded: the web gateway is disabled"
        elif not elig.web:
            web_info["reason"] = f"excluded: role {caller.role} may not use web context"
        else:
            results, calls = web.search(request.message)
            sections["web"] = results
            web_info.update(admitted=bool(results), calls=calls)
            failed = [c["error"] for c in calls if c.get("error")]
            web_info["reason"] = "admitted: not WV-scoped" if results else (
                f"no web results: {failed[0]}" if failed else "no web result passed the policy")  # fmt: skip
            queried.append("web")
            tick("web")
        if not any(sections[s] for s in ("unstructured", "spatial", "registry", "web")):
            response_class, reason = "clarify", "no eligible evidence passed the thresholds"
            tick("thresholds")
        elif offers := negotiation(snap, sq, sections["registry"], registry_lookups) if elig.registries else []:
            response_class = "negotiate"
            reason = "only part of the request is answered: " + "; ".join(o["kind"] for o in offers)
            known = {r["local_resource_id"] for r in sections["registry"]}
            for offer in offers:  # the alternatives become evidence, so the answer can cite them
                for row in offer.get("alternatives", []):
                    if row["local_resource_id"] not in known:
                        known.add(row["local_resource_id"])
                        sections["registry"].append({**row, "match": f"elsewhere: no {offer['resource_type']} "
                                                     f"program in {offer['missing_in']}"})  # fmt: skip
            tick("negotiate")
    if not web_info["reason"]:
        web_info["reason"] = f"excluded: no retrieval ({response_class})"
    budget = response_budget(response_class, intents, sections, request, settings)
    extra = [request.framing] if request.framing else []
    if response_class in ("answer", "negotiate") and intents != ["greeting"]:
        extra.append(budget_instruction(budget, response_class))
    prompt, citations = assemble_prompt(request.message, sections, wv_scoped, settings, extra)
    tick("prompt")
    filters = sq.filters()
    notes = sq.notes
    route = {
        "intents": intents,
        "rules": rules,
        "response_class": response_class,
        "reason": reason,
        "filters": filters,
        "self_query": notes,
        "wv_scoped": wv_scoped,
        "wv_reasons": wv_reasons,
        "eligibility": {"role": caller.role, **elig.public()},
        "persona": request.persona,
        "population": sq.populations,
        "negotiation": offers if response_class == "negotiate" else [],
        "budget": budget,
        "recency": {
            "bias": request.recency_bias,
            "half_life_days": request.recency_half_life_days or retriever.recency_half_life_days,
        }
        if request.recency_bias
        else None,
        "min_score": request.min_score,
        "dates": date_route(sq, sections["unstructured"]),
        "graph": graph_route,
        "conversation": request.conversation,
        "personal": request.personal.route(sections["personal"], sections["unstructured"])
        if request.personal
        else None,
        "sources_queried": queried,
        "registry_lookups": registry_lookups,
        "web": web_info,
        "candidates": candidates,
        "steps_ms": steps,
    }
    return {
        "message": request.message,
        "route": route,
        **sections,
        "facts_summary": graph.summarize(sections["structured_facts"], graph_route),
        "prompt": prompt,
        "citations": citations,
        "index_version": snap.version_id,
        "thread_id": request.thread_id,
        "hidden_collections": elig.hidden,  # for the guardrail and the audit only; never sent to the caller
    }


def date_route(sq: SelfQuery, passages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``route.dates``: the range the message named and what each passage was dated by."""
    if not (sq.updated_after or sq.updated_before):
        return None
    return {
        "after": iso(sq.updated_after),
        "before": iso(sq.updated_before),
        "from": next((n["from"] for n in sq.notes if n["field"].startswith("updated_")), None),
        "filters_on": "document_date, else commit time",
        "passages_dated_by": dict(Counter(p["date_source"] for p in passages)),
    }


def iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None
