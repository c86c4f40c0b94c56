"""What a message asks and who asks it: intents, structured filters (self-query), eligibility by role, the
home-first scope (the deployment's home states: livemem.geo.home). What ``understand``, the first step of
``livemem.answer.steps``, makes the ``Question`` of.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from livemem.dates import iso, question_dates
from livemem.engine.snapshot import Snapshot
from livemem.geo.home import WEST_VIRGINIA, Home
from livemem.geo.places import Place, county_name, find_places, state_name, zip_place
from livemem.query.gis_index import GisIndex
from livemem.registry import load_registry_index
from livemem.registry.needs import COMPANION_POPULATIONS, NEED_FAMILIES, NEEDS
from livemem.settings import ContextSettings

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
    personal: Any = None  # livemem.personal.PersonalView: the caller's own memory, its mix and nudges (None: unused)


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
# Needs, as people write them: synonyms and plurals of each program type, English and Spanish (docs/context.md,
# "Needs"), from the one vocabulary of needs that also types the registry's taxonomy terms (livemem.registry.needs).
RESOURCE_TYPES: dict[str, str] = {n.type: n.words for n in NEEDS}
# A need named only in general ("county benefits", "what help is there") is steered to the public benefits a
# benefits office handles, in this order (SelfQuery.steered_types).
GENERAL_BENEFITS = re.compile(r"\b(?:benefits?|public assistance|government (?:help|assistance)|dhhr|aid)\b", re.I)
GENERAL_BENEFIT_TYPES = ("snap", "medicaid", "wic", "utility_assistance")
# Program types that meet one need, and the populations whose program of the family is looked up beside the one
# named (NEED_FAMILIES, COMPANION_POPULATIONS: livemem.registry.needs).
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
            r"within \d+ ?(?:km|miles?|mi)|cerca|d[oó]nde|direcci[oó]n)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "resource",
        "help / program vocabulary",
        re.compile(
            r"\b(help|assistance|programs?|apply|application|benefits?|referr\w*|office|services?|eligib\w*|"
            r"qualify|pay(?:ing)?|ayuda|asistencia|programas?|solicit\w*|beneficios?|servicios?|oficinas?)\b",
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
    """The program types a message names, in the order it names them ("SNAP and WIC": snap, wic). Words that
    name two ("need food": a pantry and SNAP) put the direct help first (``SAME_WORDS_FIRST``), so the pantry in
    the town asked is not listed after the county's SNAP office."""
    first = {t: m for t, p in RESOURCE_PATTERNS.items() if (m := p.search(message))}
    start = {t: m.start() for t, m in first.items()}
    if "wic" in first and (m := WIC_CLINIC_ES.search(message)):  # "la clínica WIC": a WIC clinic, as "WIC clinic"
        start["wic"] = min(start["wic"], m.start() - 1)  # before the clinic it names
    return sorted(first, key=lambda t: (start[t], -len(first[t].group(0)), t not in SAME_WORDS_FIRST))


# The Spanish order of "WIC clinic": the program named after the noun ("clínica WIC", "clínica de WIC") is the need
WIC_CLINIC_ES = re.compile(r"\bcl[ií]nicas?\s+(?:del?\s+)?wic\b", re.I)


SAME_WORDS_FIRST = frozenset({"food_pantry"})  # of needs named by the same words, the one answered first


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
        r"kids|children|infants?|toddlers?|newborns?|babies|mis hij[oa]s|mis niñ[oa]s|mi beb[eé]|niñ[oa]s",
        ("wic", "snap", "childcare", "seasonal_assistance", "medicaid", "food_pantry"),
        r"child|famil|infant|kids|baby",
    ),
    (
        "pregnant",
        r"pregnan\w*|expecting a baby|breastfeed\w*|postpartum|embarazada|esperando un beb[eé]",
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
    home: Home = WEST_VIRGINIA  # the home states the message's places were read for
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
    general_benefits: bool = False  # "county benefits": no program type named, benefits in general
    named_counties: list[str] = field(default_factory=list)  # counties named as counties (not a ZIP's or town's)
    invalid_zips: list[str] = field(default_factory=list)  # five digits written as a ZIP that is no ZIP code
    notes: list[dict[str, str]] = field(default_factory=list)

    def steered_types(self) -> list[str]:
        """The program types of the registry lookups: the message's own, else its populations', else the public
        benefits when it asks for benefits in general (in order)."""
        if self.resource_types:  # those a named population is referred to first ("pregnant ... food": WIC, then SNAP)
            wanted = {t for p in self.populations for t in p["resource_types"]}
            # and the population's programs for the same need ("pregnant and need help buying food": WIC too)
            family = {t for f in NEED_FAMILIES if f & set(self.resource_types) for t in f}
            added = [t for p in self.populations if p["population"] in COMPANION_POPULATIONS
                     for t in p["resource_types"] if t in family]  # fmt: skip
            return sorted(dict.fromkeys([*self.resource_types, *added]), key=lambda t: t not in wanted)
        steered = list(dict.fromkeys(t for p in self.populations for t in p["resource_types"]))
        if not steered and self.general_benefits:
            steered = list(GENERAL_BENEFIT_TYPES)
        return steered

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


def self_query(
    request: ContextRequest, known_collections: list[str], now: datetime, home: Home = WEST_VIRGINIA
) -> SelfQuery:
    """Structured filters from the request fields and the message text, its places read for ``home`` (the
    deployment's home states). Only ``known_collections`` (the ones the caller may read) can become a scope: any
    other name, hidden or nonexistent, is ignored the same way."""
    sq = SelfQuery(home=home)
    _request_places(sq, request, home)
    _message_places(sq, request.message, home)
    _scopes(sq, request.message, known_collections)
    times, time_notes = time_filters(request.message, now)
    sq.updated_after, sq.updated_before = times.get("updated_after"), times.get("updated_before")
    sq.notes.extend(time_notes)
    sq.resource_types = resource_types(request.message)
    sq.populations = population_hints(request.message)
    sq.general_benefits = bool(GENERAL_BENEFITS.search(request.message))
    return sq


def _add_county(sq: SelfQuery, county: str | None, source: str) -> None:
    """Add a county to the filters (once), noting where it came from."""
    if county and county not in sq.counties:
        sq.counties.append(county)
        sq.notes.append({"field": "county", "value": county, "from": source})


def _request_places(sq: SelfQuery, request: ContextRequest, home: Home) -> None:
    """The county and ZIP of the request's fields (or of the conversation: ``place_from``) and of its profile; a
    home ZIP adds its counties."""
    if request.county:
        _add_county(sq, county_name(request.county, home) or request.county, request.place_from or "request county")
        sq.named_counties.append(sq.counties[-1])
    profile = request.profile or {}
    if isinstance(profile.get("county"), str):
        _add_county(sq, county_name(profile["county"], home) or profile["county"], "profile county")
    zip_code = request.zip or (profile.get("zip") if isinstance(profile.get("zip"), str) else None)
    if zip_code:
        place = zip_place(zip_code, home)
        sq.zip = zip_code
        sq.zip_state = place.state if place else None
        sq.notes.append({"field": "zip", "value": zip_code, "from": request.place_from or "request zip"})
        if place and home.covers(place.state):
            source = f"{request.place_from}: ZIP {zip_code}" if request.place_from else f"ZIP {zip_code}"
            for county in place.counties:
                _add_county(sq, county, source)


def _message_places(sq: SelfQuery, message: str, home: Home) -> None:
    """The places the message names (``find_places``): home ZIPs, counties and towns become filters (a ZIP only
    when the request gave none); a ZIP of another state stands when none was given, one that does not exist is
    noted as invalid."""
    sq.places = find_places(message, home)
    for place in sq.places:
        if place.corrected_from:
            sq.notes.append({"field": "place", "value": place.corrected, "from": f"corrected {place.corrected_from!r}"})
        if not home.covers(place.state):
            continue
        if place.kind == "zip":
            if sq.zip is None:
                sq.zip, sq.zip_state = place.text, place.state
                sq.notes.append({"field": "zip", "value": place.text, "from": f"message ZIP {place.text}"})
            for county in place.counties:  # a ZIP spanning counties keeps all of them
                _add_county(sq, county, f"ZIP {place.text}")
        elif place.kind == "county":
            _add_county(sq, place.county, f"county {place.text}")
            if place.county is not None and place.county not in sq.named_counties:  # a county place names one
                sq.named_counties.append(place.county)
        elif place.kind == "town":
            sq.towns.append(place.corrected)
            for county in place.counties:
                _add_county(sq, county, f"town {place.corrected}")
    for place in sq.places:  # a ZIP of another state written in the message, or one that does not exist
        if place.kind == "zip" and not place.state:
            sq.invalid_zips.append(place.text)
        elif place.kind == "zip" and not home.covers(place.state) and sq.zip is None:
            sq.zip, sq.zip_state = place.text, place.state


def _scopes(sq: SelfQuery, message: str, known_collections: list[str]) -> None:
    """The collections the message scopes itself to ("in the governance docs", "from the code collection"), of
    ``known_collections`` only, and the seal state it asks for ("authoritative", "sealed")."""
    for collection, pattern in SCOPE_RULES:
        m = pattern.search(message)
        if m and collection in known_collections and collection not in sq.collections:
            sq.collections.append(collection)
            sq.notes.append({"field": "collections", "value": collection, "from": m.group(0)})
    for m in COLLECTION_SCOPE.finditer(message):
        if m.group(1) in known_collections and m.group(1) not in sq.collections:
            sq.collections.append(m.group(1))
            sq.notes.append({"field": "collections", "value": m.group(1), "from": m.group(0)})
    m = SEAL_WORDS.search(message)
    if m:
        sq.seal_state = "SEALED"
        sq.notes.append({"field": "seal_state", "value": "SEALED", "from": m.group(0)})


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
        datasets = gis.datasets(caller.access)  # on the column codes, once per access set (not per row)
    registries = [REGISTRY_NAME] if load_registry_index(snap.path) is not None else []
    web = settings.web_roles is None or caller.role in settings.web_roles
    return Eligibility(visible, hidden, registries, datasets, web)


def home_scope(
    sq: SelfQuery, request: ContextRequest, caller: Caller, settings: ContextSettings, home: Home = WEST_VIRGINIA
) -> list[str]:
    """Why the message is scoped to the home states (empty: it is not). A West Virginia home words them as it
    always has ("WV county Fayette"); another names its states ("FL county Miami-Dade")."""
    reasons: list[str] = []
    label = home.label
    for county in sq.counties:
        if county_name(county, home):
            reasons.append(f"{label} county {county}")
    if sq.zip and home.covers(sq.zip_state):
        reasons.append(f"{label} ZIP {sq.zip}")
    if caller.role in settings.wv_roles:
        reasons.append(f"{label} role {caller.role}")
    state = str((request.profile or {}).get("state", "")).strip().lower()
    if state in {s.lower() for s in home.states} | {state_name(s).lower() for s in home.states}:
        reasons.append(f"profile state {label}")
    for place in sq.places:
        if home.covers(place.state) and place.kind in ("state", "town"):
            reasons.append(f"{label} place in the text: {place.corrected}")
    return list(dict.fromkeys(reasons))


wv_scope = home_scope  # the name it had when the home was always West Virginia


def out_of_state(sq: SelfQuery, home: Home = WEST_VIRGINIA) -> list[Place]:
    """The places outside the home states the message names, when it names no home place (then the message is
    about them, whatever the caller's role or profile says)."""
    elsewhere = [p for p in sq.places if p.state and not home.covers(p.state)]
    if sq.zip and sq.zip_state and not home.covers(sq.zip_state) and not any(p.kind == "zip" for p in elsewhere):
        elsewhere.append(Place("zip", sq.zip, None, sq.zip_state, home=home.states))
    named_wv = [p for p in sq.places if home.covers(p.state)]
    if not elsewhere or named_wv:
        return []
    # "Raleigh, North Carolina" is one place: the state qualifying it is not named again
    qualified = {p.qualified_by for p in elsewhere if p.qualified_by}
    return [p for p in elsewhere if not (p.kind == "state" and p.text in qualified)]


# --- 4. retrieval per source ------------------------------------------------------------------------------------------
