"""Evidence per source, kept apart: text passages (and their graph refinement), spatial entities, GBIM facts,
registry programs (with alternatives from other counties) and negotiation: what the retrieval steps of
``livemem.answer.steps`` (text, spatial, graph, verdict, registry, offers, rank) ask of each source.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import duckdb
import numpy as np

from livemem.answer import crisis, graph
from livemem.answer.gis_rank import rank_entities
from livemem.answer.results import chunk_result
from livemem.answer.routing import (
    RESOURCE_PATTERNS,
    ContextRequest,
    SelfQuery,
    serves_population,
)
from livemem.dates import passage_date
from livemem.engine.snapshot import Snapshot
from livemem.geo.gazetteer import distance_km, town_point
from livemem.geo.names import county_key
from livemem.geo.places import county_name
from livemem.geo.zips import county_point, town_zip_codes, zip_city, zip_data, zip_point
from livemem.query.fusion import normalized_score
from livemem.query.gis_index import GisIndex, cached_gis_index
from livemem.query.retrieval import Retriever
from livemem.query.types import Filters, Query
from livemem.registry import RegistryQueryError, load_registry_index, resolve
from livemem.registry.hours import AskedTime, asked_time, hours_text, open_during, row_slots, when_words


def gis_for(snap: Snapshot) -> GisIndex | None:
    return cached_gis_index(str(snap.path), snap.engine)  # where the snapshot's serving copies are


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
    base: dict[str, Any] = {
        "seal_state": sq.seal_state,
        "dated_after": sq.updated_after,
        "dated_before": sq.updated_before,
    }
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
            # the relevance part on the one scale, before recency and attention (they reorder, never move it)
            best = found.best_relevance if found.best_relevance is not None else found.chunks[0].relevant
            normalized = normalized_score(hit.relevant, retriever.fusion_for(snap), best)
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
        **{k: meta[k] for k in ("page", "page_end") if meta.get(k)},  # a PDF passage's page (docs/documents.md)
        **passage_date(meta, result["provenance"]["timestamp"]),
    }


def spatial_search(
    gis: GisIndex, access: frozenset[str], vector: np.ndarray, sq: SelfQuery, k: int, min_score: float
) -> list[dict[str, Any]]:
    """Entities of the counties (or, without one, similar enough), towns named in the message first; an entity in
    a named town is a candidate whatever county it is filed under (a town may span counties).

    Ranked by ``rank_entities`` for the top ``k`` only (the entities in a named town, then the others), and only
    those ``k`` records are built: a request costs what ``/gis/query`` does, not a walk over every entity."""
    if k <= 0:
        return []
    mask = gis.mask(access, counties=tuple(sq.counties))
    in_town = gis.town_mask(sq.towns) & gis.access_mask(access) if sq.towns else None
    picked: list[tuple[int, float, bool]] = []
    if in_town is not None:
        if sq.counties:
            mask |= in_town
        found = rank_entities(gis, vector, k, mask & in_town)
        picked += [(int(r), float(s), True) for r, s in zip(found.rows, found.scores, strict=True)]
        mask &= ~in_town
    if len(picked) < k:
        found = rank_entities(gis, vector, k - len(picked), mask)  # best first: those under min_score end it
        picked += [
            (int(r), float(s), False)
            for r, s in zip(found.rows, found.scores, strict=True)
            if sq.counties or s >= min_score
        ]
    return [spatial_item(gis.entities[row], score, in_town) for row, score, in_town in picked[:k]]


def spatial_item(e: dict[str, Any], score: float, in_town: bool) -> dict[str, Any]:
    """An entity as the ``spatial`` section shows it."""
    attributes = e["attributes"]
    return {
        "entity_id": e["entity_id"],
        "label": e["label"],
        "description": e["description"],
        "dataset": e["dataset"],
        "gbim_entity": e["gbim_entity"],
        "county": e["county"],
        "town": attributes.get("city"),
        "address": attributes.get("address"),
        "zip": attributes.get("zip"),
        "type": attributes.get("type"),
        "programs": attributes.get("programs"),
        "phone": attributes.get("phone"),
        "local_resource_id": attributes.get("local_resource_id") or None,
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
    "local_resource_id", "name", "resource_type", "county", "zip", "zip_coverage", "address", "contact_phone", "url",
    "hours", "eligibility", "description", "verification_status", "last_verified_at", "match",
)  # fmt: skip
# shown only where a row has them (imported rows: the provider, the marking of an undated row, other types, ...)
REGISTRY_EXTRA = (
    "organization", "verification_note", "listed_at", "resource_types", "phones", "languages", "fees",
    "service_area", "state", "schedules", "flagged_fields",
)  # fmt: skip


def registry_view(row: dict[str, Any]) -> dict[str, Any]:
    """A resolved registry row as the registry section shows it: REGISTRY_FIELDS, and REGISTRY_EXTRA where they say
    something (resource_types only beyond the primary type, phones only with a note or several numbers)."""
    view = {k: row.get(k) for k in REGISTRY_FIELDS}
    for k in REGISTRY_EXTRA:
        value = row.get(k)
        if k == "resource_types" and value == [row.get("resource_type")]:
            continue
        if k == "phones" and value and len(value) == 1 and not value[0].get("note"):
            continue
        if value:
            view[k] = value
    return view


LOOKUP_POOL = 20  # registry rows read per lookup, per row the answer shows (ranked, then cut to the limit)


def registry_lookup(
    snap: Snapshot, sq: SelfQuery, ids: list[str], limit: int, message: str = ""
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Verified registry rows for the place (each county named, at most three; rows in a named town whatever
    county they are filed under) and the program types (the message's, else its populations' or "benefits"'),
    ranked by need, town, ZIP coverage and distance (``rank_programs``; rows serving a named population first).
    Also the lookups made (audit)."""
    index = load_registry_index(snap.path)
    if index is None or limit <= 0:
        return [], []
    place_zip = sq.zip if sq.zip_state in (index.states or (index.state,)) else None
    counties: list[str | None] = list(sq.counties[:MAX_LOOKUP_COUNTIES]) or [None]
    types = sq.steered_types()
    rtypes: list[str | None] = [*types] or [None]  # the lookups' program types (None: any)
    if place_zip is None and counties == [None] and not types and not ids:
        return [], []
    steered = not sq.resource_types and bool(types)
    rows: dict[str, dict[str, Any]] = {}
    lookups: list[dict[str, Any]] = []
    args: dict[str, Any]  # one lookup's arguments
    for i, county in enumerate(counties):
        for rtype in rtypes:
            # the ZIP narrows the county it lies in (the first); other counties named are searched whole
            args = {"zip": place_zip if i == 0 else None, "county": county, "resource_type": rtype, "ids": ids}
            try:
                # a pool larger than the answer: a county of a real 211 export holds hundreds of programs, and the
                # registry's own order (its tiers) is not the need's: rank_programs below picks the best of the pool
                found = resolve(index, limit=max(limit * LOOKUP_POOL, limit), **args)
            except RegistryQueryError as exc:
                lookups.append({**args, "error": str(exc)})
                continue
            lookup = {**args, "total": found.total, "returned": [r["local_resource_id"] for r in found.rows]}
            if steered:
                lookup["steered_by"] = [p["population"] for p in sq.populations if rtype in p["resource_types"]] or [
                    "benefits in general"
                ]
            lookups.append(lookup)
            for row in found.rows:
                rows.setdefault(row["local_resource_id"], registry_view(row))
    by_town = _rows_by_town(str(snap.path))
    for town in sq.towns:  # a town's programs filed under another county (a town spanning counties)
        town_ids = by_town.get(town.casefold(), [])
        for rtype in rtypes if town_ids else []:
            try:
                found = resolve(index, ids=town_ids, resource_type=rtype, limit=limit * LOOKUP_POOL)
            except RegistryQueryError:
                continue
            in_town = [r for r in found.rows if r["local_resource_id"] in town_ids]
            for row in in_town:
                rows.setdefault(row["local_resource_id"], registry_view(row))
            if in_town:
                lookups.append({"town": town, "resource_type": rtype, "total": len(in_town),
                                "returned": [r["local_resource_id"] for r in in_town]})  # fmt: skip
    ordered = list(rows.values())
    if place_zip and not sq.named_counties and not sq.towns:  # "near me" with a ZIP: programs serving that ZIP
        covering = {r["resource_type"] for r in ordered if _covers(r, place_zip)}
        ordered = [r for r in ordered if _covers(r, place_zip) or r["resource_type"] not in covering]
    order = {p["id"]: p["rank"] for p in rank_programs({"registry": ordered, "spatial": []}, sq, message)}
    ordered.sort(key=lambda row: order[row["local_resource_id"]])
    return ordered[:limit], lookups


def registry_rows(snap: Snapshot, ids: list[str]) -> list[dict[str, Any]]:
    """The verified registry rows of these ids, as the registry section shows them."""
    index = load_registry_index(snap.path)
    if index is None:
        return []
    return [registry_view(r) for r in resolve(index, ids=ids).rows]


def _covers(row: dict[str, Any], code: str) -> bool:
    return code == str(row.get("zip")) or code in {str(z) for z in row.get("zip_coverage") or []}


@lru_cache(maxsize=4)
def _rows_by_town(version_dir: str) -> dict[str, list[str]]:
    """lower-case town → the ids of the registry rows in it, once per version (as the registry index itself)."""
    index = load_registry_index(version_dir)
    by_town: dict[str, list[str]] = {}
    for row in index.rows if index is not None else []:
        town = row_town(row)
        if town:
            by_town.setdefault(town.casefold(), []).append(row["local_resource_id"])
    return by_town


def negotiation(
    snap: Snapshot, sq: SelfQuery, sections: dict[str, list[dict[str, Any]]], lookups: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """What to agree on with the person when the evidence answers only part of the request (response class
    ``negotiate``): a program type they named with no verified program and no place offering it at their place
    (up to ``ALTERNATIVES`` programs of that type elsewhere are offered, nearest first), or several counties named
    as counties (which one do they mean?)."""
    offers: list[dict[str, Any]] = []
    if len(sq.named_counties) > 1:  # several counties named as such (a ZIP or town spanning counties is one place)
        offers.append({"kind": "choose_county", "counties": sq.named_counties,
                       "text": f"You named {' and '.join(sq.named_counties)} counties: evidence for each is below; "
                               "which one do you mean?"})  # fmt: skip
    index = load_registry_index(snap.path)
    place = (
        sq.towns[0] if sq.towns else f"{sq.counties[0]} County" if sq.counties else f"ZIP {sq.zip}" if sq.zip else None
    )
    if index is None or place is None or not sq.resource_types:
        return offers
    have = {row["resource_type"] for row in sections["registry"]}
    local = {t.casefold() for t in sq.towns} | {c.casefold() for c in sq.counties}
    for e in sections["spatial"]:  # a place at the person's town or county offering it answers the need too
        if {str(e.get("town") or "").casefold(), str(e.get("county") or "").casefold()} & local:
            have |= {t for t in sq.resource_types if place_matches_need(e, t)}
    origin = _origin(sq)
    for rtype in sq.resource_types:
        asked = [lk for lk in lookups if lk.get("resource_type") == rtype and "error" not in lk]
        if rtype in have or not asked or any(lk["total"] for lk in asked):
            continue
        rows = resolve(index, resource_type=rtype).rows
        elsewhere = [r for r in rows if r["county"] not in sq.counties]
        if origin is not None:  # nearest first
            elsewhere.sort(key=lambda r: distance_km(origin, _row_point(r, sq.home.states) or (0.0, 0.0)))
        elsewhere = elsewhere[:ALTERNATIVES]
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


# --- programs ranked by need, place and distance; registry rows, places and passages linked ---------------------------
ROW_TOWN = re.compile(
    r",\s*([A-Za-z][A-Za-z .'-]+?),\s*(?:WV|W\.\s?Va\.?|West Virginia|[A-Z]{2}(?=\s+\d{5}))\b"
)  # "100 Main Street, Oak Hill, WV 25901"; another state's "1401 W 49th St, Hialeah, FL 33012"
STREET_WORDS = {"street": "st", "avenue": "ave", "road": "rd", "drive": "dr", "lane": "ln", "boulevard": "blvd",
                "highway": "hwy", "court": "ct", "place": "pl", "way": "way", "south": "s", "north": "n",
                "east": "e", "west": "w"}  # fmt: skip


def row_town(row: dict[str, Any]) -> str | None:
    """The town of a registry row (from its address, else its ZIP's post office town) or a place (its city)."""
    if row.get("town"):
        return str(row["town"])
    m = ROW_TOWN.search(str(row.get("address") or ""))
    if m:
        return m.group(1).strip()
    return zip_city(str(row["zip"])) if row.get("zip") else None


def street(address: Any) -> str:
    """The street part of an address, compared without case, punctuation or the spelling of street words."""
    first = str(address or "").split(",")[0].casefold()
    return " ".join(STREET_WORDS.get(w, w) for w in re.findall(r"[a-z0-9]+", first))


def phone_digits(value: Any) -> str:
    """The last ten digits of a phone number (without an extension), for comparing two spellings of one."""
    digits = re.sub(r"\D", "", re.split(r";?\s*ext\.?|;ext=| x", str(value or ""), maxsplit=1)[0])
    return digits[-10:]


def place_matches_need(place: dict[str, Any], need: str) -> bool:
    """Whether a GBIM place serves a program type (its type, label, programs or description say so)."""
    text = " ".join(str(place.get(k) or "") for k in ("label", "type", "programs", "description"))
    return bool(RESOURCE_PATTERNS[need].search(text.replace("_", " ")))


def _town_point(town: str | None, states: tuple[str, ...] = ("WV",)) -> tuple[float, float] | None:
    """A town's point in the first home state that has it."""
    return next((p for s in states if (p := town_point(town, s))), None) if town else None


def _row_point(row: dict[str, Any], states: tuple[str, ...]) -> tuple[float, float] | None:
    """Where a registry row or place is: its town's point, else its ZIP's centroid (the ZIP data)."""
    return _town_point(row_town(row), states) or (zip_point(str(row["zip"])) if row.get("zip") else None)


def _origin(sq: SelfQuery) -> tuple[float, float] | None:
    """The point distances are measured from: the town the message names, else its ZIP's post office town or
    the ZIP's centroid, else the middle of the first county named (home counties: the ZIP data's points)."""
    states = sq.home.states
    origin = next((p for p in (_town_point(t, states) for t in sq.towns) if p), None)
    if origin is None and sq.zip:
        origin = _town_point(zip_city(sq.zip), states) or zip_point(sq.zip)
    if origin is None and sq.counties:
        origin = next((p for s in states if (p := county_point(s, sq.counties[0]))), None)
    return origin


# "Fayette County residents", "residents of Fayette County", "Fayette and Raleigh County residents"
_NAMES = r"(?:[A-Z][\w.'-]*(?: [A-Z][\w.'-]*)*)(?:(?:,| and| or) (?:[A-Z][\w.'-]*(?: [A-Z][\w.'-]*)*))*"
RESIDENTS = re.compile(rf"\b({_NAMES}) Count(?:y|ies) residents\b|\bresidents of ({_NAMES}) Count(?:y|ies)\b")


@lru_cache(maxsize=1)
def _county_keys() -> frozenset[str]:
    """Every US county's comparison key (the ZIP data's)."""
    return frozenset(county_key(county) for _, county, _ in zip_data().values() if county)


def _county_in(words: str) -> str | None:
    """The longest tail of ``words`` that is a US county ("Low-income Palm Beach" → palm beach; "South Palm Beach"
    → palm beach), None when no tail is one."""
    parts = words.split()
    for i in range(len(parts)):
        key = county_key(" ".join(parts[i:]))
        if key in _county_keys():
            return key
    return None


def eligible_counties(eligibility: str) -> set[str]:
    """The counties a program's eligibility limits it to (their keys; empty: none named, or none that is a
    county)."""
    out: set[str] = set()
    for m in RESIDENTS.finditer(eligibility or ""):
        names = m.group(1) or m.group(2)
        found = (_county_in(n) for n in re.split(r",\s*|\s+(?:and|or)\s+", names) if n.strip())
        out |= {key for key in found if key}
    return out


def excludes(row: dict[str, Any], counties: list[str]) -> bool:
    """Whether a registry row's eligibility limits it to counties none of which the person named (a program for
    "Fayette County residents", asked about from Kanawha County); False when either names no county."""
    limited = eligible_counties(str(row.get("eligibility") or ""))
    return bool(limited and counties) and not limited & {county_key(c) for c in counties}


def local_now(states: tuple[str, ...] | list[str], now: datetime | None = None) -> datetime:
    """Now (or ``now``) on the clock of the first home state (its first time zone in the ``us`` package; Eastern
    when it has none): the time "open now" and "tonight" mean."""
    import us

    found = us.states.lookup(states[0]) if states else None
    zone = ZoneInfo(found.time_zones[0] if found is not None and found.time_zones else "America/New_York")
    return (now or datetime.now(UTC)).astimezone(zone)


def rank_programs(
    sections: dict[str, list[dict[str, Any]]], sq: SelfQuery, message: str, now: datetime | None = None
) -> list[dict[str, Any]]:
    """Registry programs and places, the most useful first (``route.programs``; the answer lists them in this
    order): those serving a population the message names first, then by the need they answer (the message's program types in the order it names them, else the
    types its population or "benefits" steer to), then in the town the message names, then covering its ZIP,
    then nearest to the place asked about (gazetteer distance between towns), registry rows before places on a
    tie (the registry is verified), then by the words they share with the message. A place linked to a registry
    row (``same_as``) is not listed again. A program whose eligibility names counties none of which the person
    named comes after every other (``eligible: false``; the answer says so on its line). A message naming a time
    ("open on Saturday", "Tuesday evening", "open now": ``livemem.registry.hours``) puts the programs whose hours
    meet it first within their need, then those whose hours say nothing, then those closed then
    (``open_when_asked``)."""
    needs = sq.steered_types()
    asked = asked_time(message, local_now(sq.home.states, now))
    towns = {t.casefold() for t in sq.towns}
    origin = _origin(sq)
    words = {w for w in re.findall(r"[a-z]{4,}", message.casefold())}
    items: list[tuple[tuple, dict[str, Any]]] = []
    for kind, section in (("registry", "registry"), ("place", "spatial")):
        for n, item in enumerate(sections[section]):
            if kind == "place" and item.get("same_as"):
                continue
            items.append(_program_item(kind, n, item, sq, needs, asked, towns, origin, words))
    return _interleave_needs(items, needs)


def _program_item(
    kind: str,
    n: int,
    item: dict[str, Any],
    sq: SelfQuery,
    needs: list[str],
    asked: AskedTime | None,
    towns: set[str],
    origin: tuple[float, float] | None,
    words: set[str],
) -> tuple[tuple, dict[str, Any]]:
    """One registry row or place (the ``n``-th of its section) as ``rank_programs`` sorts it: its sort key and the
    entry the answer lists."""
    if kind == "registry":
        matched = [i for i, t in enumerate(needs) if item.get("resource_type") == t]
        covers = bool(sq.zip) and _covers(item, str(sq.zip))
        text = f"{item.get('name')} {item.get('description')}"
    else:
        matched = [i for i, t in enumerate(needs) if place_matches_need(item, t)]
        covers = bool(sq.zip) and sq.zip == str(item.get("zip"))
        text = f"{item.get('label')} {item.get('description')}"
    town = row_town(item)
    in_town = bool(town and town.casefold() in towns)
    point = _town_point(town, sq.home.states) or (
        zip_point(str(item["zip"])) if kind == "registry" and item.get("zip") else None
    )
    distance = round(distance_km(origin, point), 1) if origin and point else None
    shared = len(words & set(re.findall(r"[a-z]{4,}", text.casefold())))
    need_rank = min(matched) if matched else (len(needs) if needs else 0)
    serves = bool(sq.populations) and serves_population(
        {"eligibility": item.get("eligibility"), "description": item.get("description")}, sq.populations
    )
    excluded = kind == "registry" and excludes(item, sq.counties)
    is_open = open_during(row_slots(item), asked) if asked is not None and kind == "registry" else None
    open_rank = 0 if is_open else 1 if is_open is None else 2
    key = (excluded, not serves, need_rank, open_rank, not in_town, not covers,
           distance if distance is not None else 1e9, kind != "registry", -shared, n)  # fmt: skip
    return key, {
        "kind": kind,
        "id": item["local_resource_id"] if kind == "registry" else item["entity_id"],
        "name": item.get("name") if kind == "registry" else item.get("label"),
        "need": needs[min(matched)] if matched else None,
        "town": town,
        "in_town": in_town,
        "covers_zip": covers,
        "distance_km": distance,
        **({"eligible": False} if excluded else {}),
        **({"open_when_asked": is_open, "asked_time": asked.phrase} if asked and kind == "registry" else {}),
    }


def _interleave_needs(items: list[tuple[tuple, dict[str, Any]]], needs: list[str]) -> list[dict[str, Any]]:
    """The sorted programs numbered from 1, the best of each need first when several are asked for."""
    items.sort(key=lambda pair: pair[0])
    # several needs: the best of each first, then the second of each, ... ("SNAP and WIC": a SNAP office, a WIC
    # clinic, then the next SNAP office); a named population's programs stay ahead
    seen: dict[Any, int] = {}
    nth = []
    for _, item in items:
        nth.append(seen.get(item["need"], 0) + (0 if item["need"] else len(items)))  # those of no need last
        seen[item["need"]] = seen.get(item["need"], 0) + 1
    ranked = sorted(zip(nth, items, strict=True), key=lambda x: (x[1][0][0], x[0] if len(needs) > 1 else 0))
    return [{"rank": i + 1, **item} for i, (_, (_, item)) in enumerate(ranked)]


def link_programs(sections: dict[str, list[dict[str, Any]]], snap: Snapshot) -> list[dict[str, Any]]:
    """Registry rows, places and passages about the same program (``route.links``), each registry row in evidence
    with what is linked to it: a place whose ``local_resource_id`` names it, or at the same street address in the
    same town offering that program type; a passage whose metadata names it or whose text names the program.
    The registry is authoritative for contact facts: where a linked place gives another address or phone, the
    link records the conflict, the place is marked ``same_as`` the row (so it is not given as a second answer) and
    the row carries ``conflicts``."""
    index = load_registry_index(snap.path)
    rows = {r["local_resource_id"]: r for r in sections["registry"]}
    if index is not None:  # a place may name a program outside this answer's rows: it is still the same program
        for place in sections["spatial"]:
            rid = place.get("local_resource_id")
            if rid and rid not in rows and rid in index.by_id:
                rows[rid] = {k: index.rows[index.by_id[rid]].get(k) for k in REGISTRY_FIELDS}
    links: list[dict[str, Any]] = []
    for rid, row in rows.items():
        places, conflicts = [], []
        for place in sections["spatial"]:
            explicit = place.get("local_resource_id") == rid
            same_site = (
                street(place.get("address")) == street(row.get("address"))
                and (row_town(place) or "").casefold() == (row_town(row) or "").casefold()
                and place_matches_need(place, str(row.get("resource_type")))
            )
            if not (explicit or same_site):
                continue
            places.append(place["entity_id"])
            place["same_as"] = rid
            if street(place.get("address")) and street(place.get("address")) != street(row.get("address")):
                conflicts.append({"field": "address", "registry": row.get("address"), "other": place.get("address"),
                                  "source": f"place {place['entity_id']}"})  # fmt: skip
            if phone_digits(place.get("phone")) and phone_digits(place.get("phone")) != phone_digits(
                row.get("contact_phone")
            ):
                conflicts.append({"field": "phone", "registry": row.get("contact_phone"), "other": place.get("phone"),
                                  "source": f"place {place['entity_id']}"})  # fmt: skip
        name = _name_key(row.get("name"))
        passages = [
            p["chunk_id"]
            for p in sections["unstructured"]
            if p.get("local_resource_id") == rid or (name and name in _name_key(p.get("content")))
        ]
        if places or passages:
            link = {"local_resource_id": rid, "name": row.get("name"), "places": places, "passages": passages}
            if conflicts:
                link["conflicts"] = conflicts
                for r in sections["registry"]:
                    if r["local_resource_id"] == rid:
                        r["conflicts"] = conflicts
            links.append(link)
    return links


def _name_key(text: Any) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", str(text or "").casefold()))


# --- yes/no questions about a registry program ------------------------------------------------------------------------
OPEN_QUESTION = re.compile(
    r"^\s*(?:is|are)\s+(?P<a>.+?)\s+(?:still\s+)?(?P<state>open|closed|operating|running|in business)"
    r"(?P<rest>.*?)\s*[?.!]*\s*$",
    re.I,
)
YES_NO = re.compile(r"^\s*(?:is|are|does|do|can)\b", re.I)
YES_NO_ES = re.compile(  # "¿Está abierto ...?", "¿Sigue abierto ...?", "¿Puedo ...?", "¿Abre ...?"
    r"^\s*¿?\s*(?:est[aá]n?|sigue|siguen|puedo|puedes|se puede|hay|tiene|tienen|es|son|abre|abren)\b", re.I
)
NAME_STOPWORDS = {"the", "a", "an", "of", "in", "at", "for", "and", "program", "office"}


def _closed_programs(snap: Snapshot) -> list[dict[str, Any]]:
    """Programs the registry lists as closed (deprecated), from its history: their last data and closing date."""
    return _closed_in(str(snap.path))


@lru_cache(maxsize=4)
def _closed_in(version_dir: str) -> list[dict[str, Any]]:
    import json

    from livemem.version import connect

    rows: dict[str, dict[str, Any]] = {}
    con = connect(Path(version_dir))
    try:
        found = con.execute(
            "SELECT local_resource_id, deprecated_at, data FROM registry_history WHERE deprecated_at IS NOT NULL "
            "ORDER BY valid_from"
        ).fetchall()
    except duckdb.Error:  # a version without a registry history has no closed programs
        found = []
    finally:
        con.close()
    for rid, closed, data in found:
        rows[rid] = {**json.loads(data), "deprecated_at": str(closed)[:10]}
    return list(rows.values())


def find_program(rows: list[dict[str, Any]], term: str) -> dict[str, Any] | None:
    """The registry row a question names: every word of the term (bar a few) in the row's name, a name holding
    them in the term's order first ("the Oak Hill clinic": New River Health – Oak Hill Clinic, not Fayette WIC
    Clinic – Oak Hill), then the shortest."""
    said = [w for w in re.findall(r"[a-z0-9]+", term.casefold()) if w not in NAME_STOPWORDS]
    words = set(said)
    if not words:
        return None
    hits = [r for r in rows if words <= set(re.findall(r"[a-z0-9]+", str(r.get("name", "")).casefold()))]

    def in_order(row: dict[str, Any]) -> bool:
        return f" {' '.join(said)} " in f" {' '.join(re.findall(r'[a-z0-9]+', str(row['name']).casefold()))} "

    return min(hits, key=lambda r: (not in_order(r), len(str(r["name"])))) if hits else None


def named_in(rows: list[dict[str, Any]], message: str) -> list[dict[str, Any]]:
    """The rows a message names in full: every word of the row's name (bar a few, and at least two) is in the
    message ("Old Beckley Soup Kitchen hours" names Old Beckley Soup Kitchen; "soup kitchen in Beckley" does not)."""
    said = set(re.findall(r"[a-z0-9]+", message.casefold()))
    out = []
    for row in rows:
        words = set(re.findall(r"[a-z0-9]+", str(row.get("name", "")).casefold())) - NAME_STOPWORDS
        if len(words) >= 2 and words <= said:
            out.append(row)
    return out


def closed_named(
    snap: Snapshot, rows: list[dict[str, Any]], message: str, lang: str = "en"
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """A question that names a closed program ("Old Beckley Soup Kitchen hours", "where is the Old Beckley Soup
    Kitchen"): it closed, when, and where its service went (a listed program its closing note names, as
    ``moved_to``); None when it names none, or names a listed program at least as fully. In Spanish (``lang``
    "es") the sentence is Spanish: "… cerró el 2026-09-30. Su servicio pasó a …" (the closing note, in the
    registry's words, is quoted only when it names no listed program)."""
    closed = named_in(_closed_programs(snap), message)
    if not closed:
        return None, []
    gone = max(closed, key=lambda r: len(str(r["name"])))
    listed = named_in(rows, message)
    if listed and max(len(str(r["name"])) for r in listed) >= len(str(gone["name"])):
        return None, []
    note = str(gone.get("description") or "")
    moved = [r for r in named_in(rows, note) if r["local_resource_id"] != gone["local_resource_id"]]
    if lang == "es":
        said = f"{gone['name']} cerró el {gone['deprecated_at']}."
        if moved:
            hours = f" (horario: {hours_text(moved[0]['hours'], 'es')})" if moved[0].get("hours") else ""
            said += f" Su servicio pasó a {moved[0]['name']}{hours}."
        elif note:
            said += f" Nota del registro: «{note}»."
    else:
        said = f"{gone['name']} closed on {gone['deprecated_at']}."
        if note:
            said += f" {note}"
        if moved:
            said += f" {moved[0]['name']}" + (f": hours {moved[0]['hours']}." if moved[0].get("hours") else ".")
    facts = [_registry_fact(gone, "closed_on", gone["deprecated_at"], "date")]
    out = {"answer": "closed", "sentence": said, "local_resource_id": gone["local_resource_id"]}
    if moved:
        out["moved_to"] = moved[0]["local_resource_id"]
        facts.append(_registry_fact(gone, "moved_to", str(moved[0]["name"]), "program"))
    return out, facts


def _registry_fact(row: dict[str, Any], predicate: str, obj: str, kind: str) -> dict[str, Any]:
    return {
        "subject": row["local_resource_id"], "subject_label": row["name"], "predicate": predicate, "object": obj,
        "object_kind": kind, "object_label": None, "resolved_from": "question",
        "provenance": {"source": "local_resources registry", "local_resource_id": row["local_resource_id"]},
    }  # fmt: skip


def registry_verdict(snap: Snapshot, message: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The yes/no answer to a question about one registry program: "is X still open?" (a closed program from the
    registry's history says no, and why), "is X open 24 hours?" (its hours), "does X serve ZIP / town / county
    Y?" (its ZIP coverage, town or county). ``{"answer", "sentence", "local_resource_id"}`` and the registry facts
    it rests on; None when the question is no such question or names no program. A yes/no question of another
    shape that names a closed program ("can I still get lunch at the Old Beckley Soup Kitchen?") is answered no,
    it closed, and where its service went."""
    said, facts = _registry_verdict(snap, message)
    if said is None and YES_NO.match(message) and (index := load_registry_index(snap.path)) is not None:
        said, facts = closed_named(snap, index.rows, message)
        if said is not None:
            said = {**said, "answer": "no", "sentence": f"No — {said['sentence']}"}
    return said, facts


def _registry_verdict(snap: Snapshot, message: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    index = load_registry_index(snap.path)
    if index is None or len(message) > graph.MAX_RELATIONSHIP_CHARS:
        return None, []
    if not YES_NO.match(message):
        said, facts = closed_named(snap, index.rows, message, crisis.language(message))
        if said is not None and YES_NO_ES.match(message):  # "¿Está abierto el Old Beckley Soup Kitchen?": no
            said = {**said, "answer": "no", "sentence": f"No — {said['sentence']}"}
        return said, facts
    if m := OPEN_QUESTION.match(message):
        return _open_verdict(snap, index.rows, message, m)
    return _serves_verdict(snap, index.rows, message)


def _open_verdict(
    snap: Snapshot, rows: list[dict[str, Any]], message: str, m: re.Match[str]
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The answer to "is X open / closed / open on Sunday?" (``OPEN_QUESTION`` matched as ``m``): a closed program
    of the registry's history says no, and when; else the program's listed hours."""
    closed = find_program(_closed_programs(snap), m.group("a"))
    row = find_program(rows, m.group("a"))
    if closed and (row is None or len(str(closed["name"])) <= len(str(row["name"]))):
        said = f"No — {closed['name']} closed on {closed['deprecated_at']}."
        if closed.get("description"):
            said += f" {closed['description']}"
        fact = _registry_fact(closed, "closed_on", closed["deprecated_at"], "date")
        return {"answer": "no", "sentence": said, "local_resource_id": closed["local_resource_id"]}, [fact]
    if row is None:
        return None, []
    hours = str(row.get("hours") or "")
    asked = m.group("rest").strip(" ?.!").casefold()
    fact = _registry_fact(row, "hours", hours or "not listed", "hours")
    if m.group("state").casefold() == "closed":
        said = f"No — {row['name']} is listed as open (hours: {hours or 'not listed'})."
        return {"answer": "no", "sentence": said, "local_resource_id": row["local_resource_id"]}, [fact]
    when = asked_time(message, local_now(snap.home.states)) if asked and hours else None
    parsed = open_during(row_slots(row), when) if when is not None else None
    # a day or time asked ("open on Sunday"): its parsed hours say ("24 hours": every day)
    if parsed is not None and when is not None:
        said_when = when_words(when.phrase)  # "open now": "Yes, open now", not "Yes, open open now"
        lead = f"Yes, open {said_when}" if parsed else f"No, not open {said_when} by its listed hours"
        said = f"{lead} — {row['name']}: hours {hours}."
        return {"answer": "yes" if parsed else "no", "sentence": said,
                "local_resource_id": row["local_resource_id"]}, [fact]  # fmt: skip
    if asked and hours:
        wanted = [w for w in re.findall(r"[a-z0-9]+", asked) if w not in {"on", "at", "the", "a", "all", "day"}]
        yes = all(w in hours.casefold() or w.rstrip("s")[:3] in hours.casefold() for w in wanted)
        lead = "Yes" if yes else "No, not by its listed hours"
        said = f"{lead} — {row['name']}: hours {hours}."
        return {"answer": "yes" if yes else "no", "sentence": said,
                "local_resource_id": row["local_resource_id"]}, [fact]  # fmt: skip
    said = f"Yes — {row['name']} is listed as open" + (f" (hours: {hours})." if hours else ".")
    return {"answer": "yes", "sentence": said, "local_resource_id": row["local_resource_id"]}, [fact]


def _serves_verdict(
    snap: Snapshot, rows: list[dict[str, Any]], message: str
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The answer to "does X serve ZIP / county / town Y?": the program's ZIP coverage, county or town."""
    terms = graph.relationship_terms(message)
    if not terms or terms[1] is None:
        return None, []
    row = find_program(rows, terms[0])
    if row is None:
        return None, []
    b = terms[1].strip()
    covered = [str(z) for z in (row.get("zip") or "", *(row.get("zip_coverage") or [])) if z]
    code = re.fullmatch(r"(?:zip(?: code)?\s*)?(\d{5})", b, re.I)
    county = county_name(b, snap.home)
    town_zips = town_zip_codes().get(b.casefold(), ())
    if code:
        yes, target = code.group(1) in covered, f"ZIP {code.group(1)}"
        fact = _registry_fact(row, "serves_zip", ", ".join(covered), "zip")
    elif county:
        yes, target = county_key(str(row.get("county"))) == county_key(county), f"{county} County"
        fact = _registry_fact(row, "located_in", str(row.get("county")), "county")
    elif town_zips or (row_town(row) or "").casefold() == b.casefold():
        yes = (row_town(row) or "").casefold() == b.casefold() or bool(set(town_zips) & set(covered))
        target = b.title()
        fact = _registry_fact(row, "serves_zip", ", ".join(covered), "zip")
    else:
        return None, []
    if yes:
        said = f"Yes — {row['name']} serves {target} (it covers ZIP {', '.join(covered)})."
    else:
        said = (
            f"No — {row['name']} does not list {target}; it covers ZIP {', '.join(covered)} ({row['county']} County)."
        )
    return {"answer": "yes" if yes else "no", "sentence": said, "local_resource_id": row["local_resource_id"]}, [fact]
