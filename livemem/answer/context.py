"""The orchestrator: one message → an auditable evidence set and the prompt built from it.

Plain functions, each a visible step of ``route`` (docs/context.md has the rules as tables); steps 1–4 live in
``livemem.answer.routing``, step 5 in ``livemem.answer.evidence``, the prompt and the response budget in
``livemem.answer.prompt``; this module runs them in order (``build_context``):

1. ``route_intents``: explicit rules (regular expressions) decide the intents: greeting (small talk, answered
   without retrieval), governance, spatial, resource (referral), factual (relations of named entities), general.
2. ``self_query``: structured filters from the message and the request: counties from county, town and ZIP
   names; ``updated_after`` / ``updated_before`` from date expressions (a range on each document's own date, else
   its commit time: ``livemem.dates``); collections from scope phrases; ``seal_state`` from "authoritative" /
   "sealed".
3. ``eligibility``: what the caller's role may use (collections, registry, spatial datasets, web).
4. Home-first: a message scoped to the deployment's home states (``Snapshot.home``: West Virginia unless the
   sources file names another, docs/home.md) makes home text, spatial and registry evidence mandatory and
   authoritative and excludes web context; a message naming only places outside them is redirected.
5. Retrieval per source, kept apart (``unstructured``, ``structured_facts``, ``spatial``, ``registry``, ``web``;
   population hints steer the registry's program types; the GBIM graph answers relationship questions and adds the
   facts of entities the passages name, ``livemem.answer.graph``), then ``response_class`` (answer, negotiate, clarify,
   refuse, redirect), the response ``budget`` (answer length, hedging) and ``assemble_prompt`` within a size budget.

Passage scores are also given on one documented scale, ``score_normalized`` in [0, 1] (``normalized_score``);
the request's ``min_score`` applies to it. What a conversation carries into a message (place, persona, topic) is
decided before, in ``livemem.answer.conversation``.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from livemem.answer import crisis, graph
from livemem.answer.evidence import (
    gis_for,
    link_programs,
    merge_facts,
    negotiation,
    passage,
    rank_programs,
    refine_passages,
    registry_lookup,
    registry_rows,
    registry_verdict,
    spatial_item,
    spatial_search,
    structured_facts,
    text_search,
)
from livemem.answer.prompt import (
    SECTIONS,
    assemble_prompt,
    budget_instruction,
    response_budget,
)
from livemem.answer.routing import (
    REGISTRY_NAME,
    Caller,
    ContextRequest,
    SelfQuery,
    eligibility,
    home_scope,
    iso,
    out_of_state,
    route_intents,
    self_query,
)
from livemem.query.retrieval import Retriever
from livemem.settings import ContextSettings
from livemem.version.reader import Snapshot


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
    home = snap.home  # the state(s) this version covers (livemem.geo.home; West Virginia by default)
    sq = self_query(request, elig.collections, now, home)
    tick("self_query")
    wv_reasons = home_scope(sq, request, caller, settings, home)
    wv_scoped = bool(wv_reasons)
    sections: dict[str, list[dict[str, Any]]] = {s: [] for s in SECTIONS}
    queried: list[str] = []
    registry_lookups: list[dict[str, Any]] = []
    candidates = 0
    offers: list[dict[str, Any]] = []
    graph_route: dict[str, Any] | None = None
    response_class, reason = "answer", "evidence found"
    web_info: dict[str, Any] = {"admitted": False, "reason": "", "calls": []}
    elsewhere = out_of_state(sq, home)
    top_k = request.top_k or settings.top_k
    found_crisis: crisis.Crisis | None = None

    if intents == ["greeting"]:
        response_class, reason = "answer", "small talk: answered without retrieval"
    elif sq.invalid_zips and not sq.counties:
        response_class = "clarify"
        reason = f"ZIP {', '.join(sq.invalid_zips)} is not a ZIP code: which town, county or ZIP is meant?"
    elif elsewhere:  # named outside the home states, and no home place named: never answered with home programs
        response_class = "redirect"
        where = "; ".join(p.name for p in elsewhere)
        reason = f"place outside {home.state_names} ({where}): this memory covers {home.label}"
    else:
        collections = sq.collections or elig.collections
        vector = retriever.encode(request.message)
        tick("encode")
        found_crisis = crisis.detect(request.message, vector, retriever.embedder)  # the same vector: no second encoding
        tick("crisis")
        if found_crisis is not None:  # its programs are looked up too (crisis lines first, then local help)
            sq.populations.append(crisis.steering(found_crisis))
        mine = request.personal  # the mix: the person's own memory takes its share of top_k first
        sections["personal"] = mine.search(vector, top_k, settings.min_dense) if mine else []
        corpus_k = top_k - len(sections["personal"])
        pool = mine.corpus_pool(corpus_k) if mine else corpus_k
        found, candidates = [], 0
        if pool:
            found, candidates = text_search(snap, retriever, request, vector, collections, sq, pool, settings.min_dense)
        if mine:
            found = mine.nudge(found, sq.counties, corpus_k)  # this user's feedback, bounded (livemem.personal)
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
            graph_facts, graph_route = graph.fuse(gis, caller.access, request.message, sections["unstructured"], home)
            if graph_facts:
                sections["structured_facts"] = merge_facts(graph_facts, sections["structured_facts"])
                queried.extend([] if "gbim" in queried else ["gbim"])
            refine = graph.refinement_terms(graph_route, request.message) if pool else []
            if refine:  # iterative refinement: search the text again with what the graph found
                added = refine_passages(snap, retriever, request, refine, collections, sq, pool, settings, sections)
                graph_route["refinement"] = {"terms": refine, "added": [p["chunk_id"] for p in added]}
                more_facts, _ = graph.fuse(gis, caller.access, "", added, home)  # the facts of what they name
                if more_facts:
                    sections["structured_facts"] = merge_facts(sections["structured_facts"], more_facts)
            shown = {e["entity_id"] for e in sections["spatial"]}
            for entity_id in graph.asked_entities(graph_route):  # the places the question names are evidence too
                if entity_id not in shown:
                    row = gis.row_of[entity_id]
                    sections["spatial"].append(spatial_item(gis.entities[row], float(gis.dense[row] @ vector), False))
            tick("graph")
        # a yes/no question the graph or the registry answers ("is X in Raleigh County?", "is X still open?") asks
        # for no program list: the verdict, and the program it is about
        answered = bool(((graph_route or {}).get("relationship") or {}).get("verdict"))
        if not answered and elig.registries and not sq.collections:
            said, rests_on = registry_verdict(snap, request.message)
            if said:
                answered = True
                graph_route = graph_route or {}
                graph_route.setdefault("relationship", {"terms": [], "resolved": [], "connections": []})
                graph_route["relationship"]["verdict"] = {**said, "from": "registry"}
                sections["structured_facts"] = merge_facts(rests_on, sections["structured_facts"])
                moved = [said["moved_to"]] if said.get("moved_to") else []
                sections["registry"] = registry_rows(snap, [said["local_resource_id"], *moved])
                queried.append(REGISTRY_NAME)
        wants_registry = ("resource" in intents or (wv_scoped and sq.counties) or found_crisis) and not answered
        if elig.registries and wants_registry and not sq.collections:
            ids = [p["local_resource_id"] for p in sections["unstructured"] if p.get("local_resource_id")]
            sections["registry"], registry_lookups = registry_lookup(
                snap, sq, ids, settings.registry_limit, request.message
            )
            queried.append(REGISTRY_NAME)
            tick("registry")
        if found_crisis is not None:
            web_info["reason"] = "excluded: a crisis message is never sent to the web"
        elif wv_scoped:
            scope = "West-Virginia" if home.states == ("WV",) else home.label
            web_info["reason"] = f"excluded: {scope}-scoped (" + "; ".join(wv_reasons) + ")"
        elif web is None:
            web_info["reason"] = "excluded: the web gateway is disabled"
        elif not elig.web:
            web_info["reason"] = f"excluded: role {caller.role} may not use web context"
        else:
            results, calls = web.search(request.message)
            sections["web"] = results
            web_info.update(admitted=bool(results), calls=calls)
            failed = [c["error"] for c in calls if c.get("error")]
            web_info["reason"] = f"admitted: not {home.label}-scoped" if results else (
                f"no web results: {failed[0]}" if failed else "no web result passed the policy")  # fmt: skip
            queried.append("web")
            tick("web")
        if not any(sections[s] for s in ("unstructured", "spatial", "registry", "web")):
            response_class, reason = "clarify", "no eligible evidence passed the thresholds"
            tick("thresholds")
        elif offers := negotiation(snap, sq, sections, registry_lookups) if elig.registries and not answered else []:
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
    links = link_programs(sections, snap) if sections["registry"] or sections["spatial"] else []
    programs = rank_programs(sections, sq, request.message, now) if sections["registry"] or sections["spatial"] else []
    order = {(p["kind"], p["id"]): p["rank"] for p in programs}
    sections["registry"].sort(key=lambda r: order.get(("registry", r["local_resource_id"]), 1e9))
    sections["spatial"].sort(key=lambda e: order.get(("place", e["entity_id"]), 1e9))
    if not web_info["reason"]:
        web_info["reason"] = f"excluded: no retrieval ({response_class})"
    budget = response_budget(response_class, intents, sections, request, settings)
    extra = [request.framing] if request.framing else []
    if response_class in ("answer", "negotiate") and intents != ["greeting"]:
        extra.append(budget_instruction(budget, response_class))
    prompt, citations = assemble_prompt(request.message, sections, wv_scoped, settings, extra, home.state_names)
    tick("prompt")
    if found_crisis is None and intents != ["greeting"] and "crisis" not in steps:
        # not retrieved (a ZIP to clarify, a place elsewhere): the lexicon, else one encoding for the similarity
        found_crisis = crisis.detect(request.message) or crisis.detect(
            request.message, retriever.encode(request.message), retriever.embedder
        )
        tick("crisis")
    offered = offers if response_class == "negotiate" else []
    crisis_route = None
    if found_crisis is not None:  # the crisis lines come first in every answer (livemem.answer.chat.guard)
        lines = crisis.lines_for(found_crisis.kinds, found_crisis.language, home.states, home.crisis_lines)
        crisis_route = crisis.route_crisis(found_crisis, lines, response_class)
        reason = (
            f"crisis ({found_crisis.kind}, by {found_crisis.matched_by}): the crisis lines first, then the "
            f"{response_class} of the evidence ({reason})"
        )
        response_class = "redirect"
    filters = sq.filters()
    notes = sq.notes
    route = {
        "intents": intents,
        "rules": rules,
        "response_class": response_class,
        "reason": reason,
        "crisis": crisis_route,
        "filters": filters,
        "self_query": notes,
        "wv_scoped": wv_scoped,  # the names of when the home was always West Virginia: home_scoped, home_reasons
        "wv_reasons": wv_reasons,
        "home_scoped": wv_scoped,
        "home": home.route(),
        "state": elsewhere[0].state if elsewhere else home_state(sq, home) if wv_scoped else None,
        "places": [place_route(p) for p in sq.places],
        "programs": programs,
        "links": links,
        "eligibility": {"role": caller.role, **elig.public()},
        "persona": request.persona,
        "population": sq.populations,
        "negotiation": offered,
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


def home_state(sq: SelfQuery, home: Any) -> str:
    """The home state a home-scoped message is about: that of the first home place it names, else the main one."""
    named = [p.state for p in sq.places if home.covers(p.state)] + [sq.zip_state] * home.covers(sq.zip_state)
    return named[0] if named else home.state


def place_route(place: Any) -> dict[str, Any]:
    """A place the message named, as ``route.places`` shows it."""
    out = {"kind": place.kind, "text": place.text, "name": place.name, "state": place.state}
    if place.counties:
        out["counties"] = list(place.counties)
    if place.corrected_from:
        out["corrected_from"] = place.corrected_from
    if place.qualified_by:
        out["qualified_by"] = place.qualified_by
    return out


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
