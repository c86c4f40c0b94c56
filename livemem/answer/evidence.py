"""Evidence per source, kept apart: text passages (and their graph refinement), spatial entities, GBIM facts,
registry programs (with alternatives from other counties) and negotiation. Step 5 of ``livemem.answer.context``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from livemem.answer import graph
from livemem.answer.routing import (
    ContextRequest,
    SelfQuery,
    serves_population,
)
from livemem.dates import passage_date
from livemem.query.fusion import normalized_score
from livemem.query.gis_index import GisIndex, cached_gis_index
from livemem.query.retrieval import Filters, Query, Retriever, chunk_result, top_order
from livemem.registry import RegistryQueryError, load_registry_index, resolve
from livemem.version.reader import Snapshot


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
            normalized = normalized_score(hit.score, retriever.fusion_for(snap), found.chunks[0].score)
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
