"""The orchestrator: one message → an auditable evidence set and the prompt built from it.

An answer is a list of named steps (``livemem.answer.steps.STEPS``; docs/context.md has the rules as tables).
``build_context`` makes the ``Question`` once (``understand``), runs the steps in order on one ``Evidence``
(``run_steps``: a step runs when its condition holds; a timed one's milliseconds go to ``route.steps_ms`` under its
name), then shapes the route and the result (``route_of``, ``result_of``). The steps call ``livemem.answer.routing``
(what the message asks), ``livemem.answer.evidence`` (each source), ``livemem.answer.graph``,
``livemem.answer.prompt`` and ``livemem.answer.crisis``:

1. ``understand`` (timed as ``intent`` and ``self_query``): explicit rules (regular expressions) decide the intents
   (greeting: small talk, answered without retrieval; governance, spatial, resource: referral; factual: relations of
   named entities; general); ``eligibility``: what the caller's role may use (collections, registry, spatial
   datasets, web); ``self_query``: structured filters from the message and the request (counties from county, town
   and ZIP names; ``updated_after`` / ``updated_before`` from date expressions, a range on each document's own
   date, else its commit time: ``livemem.dates``; collections from scope phrases; ``seal_state`` from
   "authoritative" / "sealed"); home-first: a message scoped to the deployment's home states (``Snapshot.home``:
   West Virginia unless the sources file names another, docs/home.md) makes home text, spatial and registry
   evidence mandatory and authoritative and excludes web context.
2. ``route`` (untimed): small talk is answered, a ZIP that is none asks to clarify, a message naming only places
   outside the home is redirected, all three without retrieval; any other message is retrieved.
3. ``encode``: the message's vector, once.
4. ``crisis``: the crisis detector on that vector; a crisis steers the registry to its programs.
5. ``text``: the person's own memory takes its share of ``top_k`` (``personal``), then the corpus (``unstructured``).
6. ``spatial``: the places nearest the message and their facts (``spatial``, ``structured_facts``).
7. ``graph``: the GBIM graph answers relationship questions and adds the facts of entities the passages name; the
   text is searched again with what it found (``livemem.answer.graph``).
8. ``verdict`` (untimed): a yes/no question the registry answers ("is X still open?") asks for no program list.
9. ``registry``: the programs for the need, place and population (population hints steer the program types).
10. ``web_gate`` (untimed): why the message is not sent to the web (a crisis, home-scoped, no gateway, the role).
11. ``web``: the web gateway's results, when nothing excluded them.
12. ``thresholds``: no eligible evidence: ``clarify``.
13. ``offers`` (untimed): what the registry cannot answer in full, and the programs elsewhere.
14. ``negotiate``: only part of the request is answered: the alternatives become evidence.
15. ``rank`` (untimed): the programs in the order offered, and their links.
16. ``prompt``: the response ``budget`` (answer length, hedging) and ``assemble_prompt`` within a size budget.
17. ``crisis``: a message not retrieved is checked for a crisis too (the lexicon, else one encoding).
18. ``crisis_route`` (untimed): a crisis makes the response a ``redirect``, the crisis lines first.

The ``response_class`` is one of answer, negotiate, clarify, refuse, redirect. Passage scores are also given on one
documented scale, ``score_normalized`` in [0, 1] (``normalized_score``); the request's ``min_score`` applies to it.
What a conversation carries into a message (place, persona, topic) is decided before, in
``livemem.answer.conversation``.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any, cast

from livemem.answer import graph
from livemem.answer.evidence import gis_for
from livemem.answer.routing import Caller, ContextRequest, SelfQuery, iso
from livemem.answer.steps import STEPS, Clock, Evidence, Means, run_steps, understand
from livemem.engine.snapshot import Snapshot
from livemem.query.retrieval import Retriever
from livemem.settings import ContextSettings


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
    clock = Clock()
    means = Means(snap, retriever, settings, web, gis_for(snap))
    question = understand(means, caller, request, now, clock)
    return result_of(run_steps(Evidence(question, means, clock), STEPS))


def result_of(ev: Evidence) -> dict[str, Any]:
    """What ``build_context`` answers: the message, its route, each section, the prompt and its citations."""
    sections = ev.sections
    return {
        "message": ev.q.message,
        "route": route_of(ev),
        **sections,
        "facts_summary": graph.summarize(sections["structured_facts"], ev.graph_route),
        "prompt": ev.prompt,
        "citations": ev.citations,
        "index_version": ev.means.snap.version_id,
        "thread_id": ev.q.request.thread_id,
        "hidden_collections": ev.q.elig.hidden,  # for the guardrail and the audit only; never sent to the caller
    }


def route_of(ev: Evidence) -> dict[str, Any]:
    """``route``: every step's decision and why, what each source was asked, and ``steps_ms``."""
    q, request, sq, home = ev.q, ev.q.request, ev.q.sq, ev.q.home
    return {
        "intents": q.intents,
        "rules": q.rules,
        "response_class": ev.response_class,
        "reason": ev.reason,
        "crisis": ev.crisis_route,
        "filters": sq.filters(),
        "self_query": sq.notes,
        "wv_scoped": q.home_scoped,  # the names of when the home was always West Virginia: home_scoped, home_reasons
        "wv_reasons": q.home_reasons,
        "home_scoped": q.home_scoped,
        "home": home.route(),
        "state": q.elsewhere[0].state if q.elsewhere else home_state(sq, home) if q.home_scoped else None,
        "places": [place_route(p) for p in sq.places],
        "programs": ev.programs,
        "links": ev.links,
        "eligibility": {"role": q.caller.role, **q.elig.public()},
        "persona": request.persona,
        "population": sq.populations,
        "negotiation": ev.offers,  # offers are only made by a negotiate response
        "budget": ev.budget,
        "recency": recency_route(request, ev.means.retriever),
        "min_score": request.min_score,
        "dates": date_route(sq, ev.sections["unstructured"]),
        "graph": ev.graph_route,
        "conversation": request.conversation,
        "personal": request.personal.route(ev.sections["personal"], ev.sections["unstructured"])
        if request.personal
        else None,
        "sources_queried": ev.queried,
        "registry_lookups": ev.registry_lookups,
        "web": ev.web_info,
        "candidates": ev.candidates,
        "steps_ms": ev.clock.steps_ms,
    }


def recency_route(request: ContextRequest, retriever: Retriever) -> dict[str, Any] | None:
    """``route.recency``: the bias applied and its half-life (None: no bias)."""
    if not request.recency_bias:
        return None
    return {
        "bias": request.recency_bias,
        "half_life_days": request.recency_half_life_days or retriever.recency_half_life_days,
    }


def home_state(sq: SelfQuery, home: Any) -> str:
    """The home state a home-scoped message is about: that of the first home place it names, else the main one."""
    zip_state = cast(str, sq.zip_state)  # counted only when covered: then a state
    named = [p.state for p in sq.places if home.covers(p.state)] + [zip_state] * home.covers(zip_state)
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
