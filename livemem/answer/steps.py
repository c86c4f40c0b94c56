"""The steps of an answer, in order (``STEPS``), each a plain function of one ``Evidence``: it reads the
``Question`` (made once, by ``understand``) and what the steps before it found, and adds what it finds.

``livemem.answer.context.build_context`` makes the question, runs the steps (``run_steps``) and shapes the result;
its docstring lists the steps and what each does. A step runs when its ``when`` says so (a greeting is answered
without retrieval, the graph needs the GIS index, …); a timed step's milliseconds since the step timed before it go
to ``route.steps_ms`` under its name (``Clock``), so an untimed step's time falls into the next timed one and a step
that does not run is not there. ``Evidence.ran`` lists every step that ran, timed or not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from livemem.answer import crisis, graph
from livemem.answer.evidence import (
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
from livemem.answer.prompt import SECTIONS, assemble_prompt, budget_instruction, response_budget
from livemem.answer.routing import (
    REGISTRY_NAME,
    Caller,
    ContextRequest,
    Eligibility,
    SelfQuery,
    eligibility,
    home_scope,
    out_of_state,
    route_intents,
    self_query,
)
from livemem.engine.snapshot import Snapshot
from livemem.geo.home import Home
from livemem.geo.places import Place
from livemem.query.gis_index import GisIndex
from livemem.query.retrieval import Retriever
from livemem.settings import ContextSettings

EVIDENCE_SECTIONS = ("unstructured", "spatial", "registry", "web")  # what counts as evidence for the thresholds


class Clock:
    """``steps_ms``: each lap's milliseconds since the lap before (the first: since the clock was made)."""

    def __init__(self) -> None:
        self.steps_ms: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.steps_ms[name] = round((now - self._t) * 1000, 3)
        self._t = now


@dataclass(frozen=True)
class Means:
    """What the steps ask and never change: the index version, the encoder, the settings, the web gateway."""

    snap: Snapshot
    retriever: Retriever
    settings: ContextSettings
    web: Any | None = None  # livemem.answer.web.WebGateway (None: off)
    gis: GisIndex | None = None  # the version's GIS index (livemem.answer.evidence.gis_for)


@dataclass(frozen=True)
class Question:
    """The message understood, once: intents, structured filters, what the caller may use, the home scope."""

    request: ContextRequest
    caller: Caller
    now: datetime
    intents: list[str]
    rules: list[dict[str, str]]
    elig: Eligibility
    sq: SelfQuery  # its ``populations`` grow by the crisis step's steering (the crisis programs are looked up too)
    home: Home  # the state(s) this version covers (livemem.geo.home; West Virginia by default)
    home_reasons: list[str]  # why the message is home-scoped (empty: it is not)
    elsewhere: list[Place]  # the places outside the home it names, when it names no home place
    top_k: int

    @property
    def message(self) -> str:
        return self.request.message

    @property
    def greeting(self) -> bool:
        return self.intents == ["greeting"]

    @property
    def home_scoped(self) -> bool:
        return bool(self.home_reasons)

    @property
    def collections(self) -> list[str]:
        """The collections the text is searched in: those the message scopes to, else every eligible one."""
        return self.sq.collections or self.elig.collections


@dataclass
class Evidence:
    """What the steps found so far: the sections, what was asked of each source, the response class and why."""

    q: Question
    means: Means
    clock: Clock = field(default_factory=Clock)
    sections: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {s: [] for s in SECTIONS})
    queried: list[str] = field(default_factory=list)
    registry_lookups: list[dict[str, Any]] = field(default_factory=list)
    candidates: int = 0
    offers: list[dict[str, Any]] = field(default_factory=list)
    graph_route: dict[str, Any] | None = None
    response_class: str = "answer"
    reason: str = "evidence found"
    web_info: dict[str, Any] = field(default_factory=lambda: {"admitted": False, "reason": "", "calls": []})
    found_crisis: crisis.Crisis | None = None
    crisis_route: dict[str, Any] | None = None
    retrieving: bool = False  # the route step sends the message to retrieval
    vector: Any = None  # the message's encoding (the encode step), reused by every later step
    pool: int = 0  # how many passages the corpus is asked for (top_k less the person's own)
    links: list[dict[str, Any]] = field(default_factory=list)
    programs: list[dict[str, Any]] = field(default_factory=list)
    budget: dict[str, Any] = field(default_factory=dict)
    prompt: dict[str, Any] | str = ""  # the prompt step's system text and context block (assemble_prompt)
    citations: list[dict[str, Any]] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)  # every step that ran, in order

    @property
    def answered(self) -> bool:
        """A yes/no question the graph or the registry answered: the verdict, and no program list."""
        return bool(((self.graph_route or {}).get("relationship") or {}).get("verdict"))

    @property
    def has_evidence(self) -> bool:
        return any(self.sections[s] for s in EVIDENCE_SECTIONS)


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[Evidence], None]
    when: Callable[[Evidence], bool] = lambda ev: True
    timed: bool = True  # its time goes to steps_ms under ``name``


def run_steps(ev: Evidence, steps: tuple[Step, ...]) -> Evidence:
    """Run each step whose ``when`` holds, in order; a timed one laps the clock under its name."""
    for step in steps:
        if step.when(ev):
            step.run(ev)
            ev.ran.append(step.name)
            if step.timed:
                ev.clock.lap(step.name)
    return ev


# --- understand: the Question -----------------------------------------------------------------------------------------
def understand(means: Means, caller: Caller, request: ContextRequest, now: datetime, clock: Clock) -> Question:
    """Intents (timed ``intent``), eligibility and the self-query (``self_query``), then the home scope."""
    intents, rules = route_intents(request.message)
    clock.lap("intent")
    elig = eligibility(means.snap, means.gis, caller, means.settings)
    if request.collections:  # narrows only: a collection the caller may not read never comes back
        elig.collections = [c for c in elig.collections if c in request.collections]
    # A collection the role may not read is treated as one that does not exist: same answer, same notes.
    home = means.snap.home
    sq = self_query(request, elig.collections, now, home)
    clock.lap("self_query")
    reasons = home_scope(sq, request, caller, means.settings, home)
    top_k = request.top_k or means.settings.top_k
    return Question(request, caller, now, intents, rules, elig, sq, home, reasons, out_of_state(sq, home), top_k)


# --- route: answered without retrieval, or retrieved ------------------------------------------------------------------
def route(ev: Evidence) -> None:
    """Small talk, a ZIP that is none, a place outside the home: answered without retrieval; else retrieve."""
    q, sq = ev.q, ev.q.sq
    if q.greeting:
        ev.response_class, ev.reason = "answer", "small talk: answered without retrieval"
    elif sq.invalid_zips and not sq.counties:
        ev.response_class = "clarify"
        ev.reason = f"ZIP {', '.join(sq.invalid_zips)} is not a ZIP code: which town, county or ZIP is meant?"
    elif q.elsewhere:  # named outside the home states, and no home place named: never answered with home programs
        ev.response_class = "redirect"
        where = "; ".join(p.name for p in q.elsewhere)
        ev.reason = f"place outside {q.home.state_names} ({where}): this memory covers {q.home.label}"
    else:
        ev.retrieving = True
        return
    ev.web_info["reason"] = f"excluded: no retrieval ({ev.response_class})"


# --- retrieve: the message's vector, the crisis check, the text, the places -------------------------------------------
def encode(ev: Evidence) -> None:
    ev.vector = ev.means.retriever.encode(ev.q.message)


def detect_crisis(ev: Evidence) -> None:
    """The crisis detector on the same vector (no second encoding); its programs are looked up too."""
    retriever = ev.means.retriever
    ev.found_crisis = crisis.detect(ev.q.message, ev.vector, retriever.embedder)
    if ev.found_crisis is not None:  # crisis lines first, then local help
        ev.q.sq.populations.append(crisis.steering(ev.found_crisis))


def text(ev: Evidence) -> None:
    """The person's own memory takes its share of top_k first, then the corpus's passages (``unstructured``)."""
    q, m, s = ev.q, ev.means, ev.sections
    mine = q.request.personal
    s["personal"] = mine.search(ev.vector, q.top_k, m.settings.min_dense) if mine else []
    corpus_k = q.top_k - len(s["personal"])
    ev.pool = mine.corpus_pool(corpus_k) if mine else corpus_k
    found: list[dict[str, Any]] = []
    if ev.pool:
        found, ev.candidates = text_search(
            m.snap, m.retriever, q.request, ev.vector, q.collections, q.sq, ev.pool, m.settings.min_dense
        )
    if mine:
        found = mine.nudge(found, q.sq.counties, corpus_k)  # this user's feedback, bounded (livemem.personal)
    s["unstructured"] = [passage(r) for r in found]
    ev.queried.extend(q.collections)


def on_gis(ev: Evidence) -> bool:
    """The GIS index serves this message: there is one, the caller may read a dataset, no collection is named."""
    return ev.means.gis is not None and bool(ev.q.elig.spatial_datasets) and not ev.q.sq.collections


def wants_places(ev: Evidence) -> bool:
    q = ev.q
    wanted = bool({"spatial", "resource", "factual"} & set(q.intents)) or q.home_scoped
    return ev.retrieving and wanted and on_gis(ev)


def _gis(ev: Evidence) -> GisIndex:
    """The GIS index, for a step that runs only ``on_gis``."""
    if ev.means.gis is None:
        raise RuntimeError("a GIS step ran without a GIS index")
    return ev.means.gis


def spatial(ev: Evidence) -> None:
    """The places nearest the message (``spatial``) and their facts (``structured_facts``)."""
    m, s, gis = ev.means, ev.sections, _gis(ev)
    s["spatial"] = spatial_search(
        gis, ev.q.caller.access, ev.vector, ev.q.sq, m.settings.spatial_k, m.settings.min_spatial
    )
    s["structured_facts"] = structured_facts(gis, s["spatial"])
    ev.queried.append("gbim")


# --- graph: relationship questions and the facts of what the passages name ------------------------------------------
def graph_step(ev: Evidence) -> None:
    """The GBIM graph beside the passages (livemem.answer.graph), the text searched again with what it found, and
    the places the question names as evidence too."""
    q, gis, s = ev.q, _gis(ev), ev.sections
    graph_facts, ev.graph_route = graph.fuse(gis, q.caller.access, q.message, s["unstructured"], q.home)
    if graph_facts:
        s["structured_facts"] = merge_facts(graph_facts, s["structured_facts"])
        ev.queried.extend([] if "gbim" in ev.queried else ["gbim"])
    refine = graph.refinement_terms(ev.graph_route, q.message) if ev.pool else []
    if refine:
        refine_text(ev, refine)
    shown = {e["entity_id"] for e in s["spatial"]}
    for entity_id in graph.asked_entities(ev.graph_route):
        if entity_id not in shown:
            row = gis.row_of[entity_id]
            s["spatial"].append(spatial_item(gis.entities[row], float(gis.dense[row] @ ev.vector), False))


def refine_text(ev: Evidence, terms: list[str]) -> None:
    """Iterative refinement: the text searched again with the graph's ``terms``, and the facts of what they name."""
    q, m, s = ev.q, ev.means, ev.sections
    if ev.graph_route is None:  # the terms are the route's (refinement_terms)
        raise RuntimeError("text refinement without a graph route")
    added = refine_passages(m.snap, m.retriever, q.request, terms, q.collections, q.sq, ev.pool, m.settings, s)
    ev.graph_route["refinement"] = {"terms": terms, "added": [p["chunk_id"] for p in added]}
    more_facts, _ = graph.fuse(_gis(ev), q.caller.access, "", added, q.home)
    if more_facts:
        s["structured_facts"] = merge_facts(s["structured_facts"], more_facts)


# --- registry: a yes/no verdict, else the programs --------------------------------------------------------------------
def on_registry(ev: Evidence) -> bool:
    return ev.retrieving and bool(ev.q.elig.registries) and not ev.q.sq.collections


def verdict(ev: Evidence) -> None:
    """A yes/no question the registry answers ("is X still open?"): the verdict, and the program it is about."""
    said, rests_on = registry_verdict(ev.means.snap, ev.q.message)
    if not said:
        return
    ev.graph_route = ev.graph_route or {}
    ev.graph_route.setdefault("relationship", {"terms": [], "resolved": [], "connections": []})
    ev.graph_route["relationship"]["verdict"] = {**said, "from": "registry"}
    ev.sections["structured_facts"] = merge_facts(rests_on, ev.sections["structured_facts"])
    moved = [said["moved_to"]] if said.get("moved_to") else []
    ev.sections["registry"] = registry_rows(ev.means.snap, [said["local_resource_id"], *moved])
    ev.queried.append(REGISTRY_NAME)


def wants_registry(ev: Evidence) -> bool:
    q = ev.q
    wanted = "resource" in q.intents or (q.home_scoped and q.sq.counties) or ev.found_crisis
    return on_registry(ev) and bool(wanted) and not ev.answered


def registry(ev: Evidence) -> None:
    """The registry's programs for the need, place and population, and the ones the passages name."""
    ids = [p["local_resource_id"] for p in ev.sections["unstructured"] if p.get("local_resource_id")]
    ev.sections["registry"], ev.registry_lookups = registry_lookup(
        ev.means.snap, ev.q.sq, ids, ev.means.settings.registry_limit, ev.q.message
    )
    ev.queried.append(REGISTRY_NAME)


# --- web: excluded and why, else asked --------------------------------------------------------------------------------
def web_gate(ev: Evidence) -> None:
    """Why the message is not sent to the web (left empty when it may be)."""
    q, info = ev.q, ev.web_info
    if ev.found_crisis is not None:
        info["reason"] = "excluded: a crisis message is never sent to the web"
    elif q.home_scoped:
        scope = "West-Virginia" if q.home.states == ("WV",) else q.home.label
        info["reason"] = f"excluded: {scope}-scoped (" + "; ".join(q.home_reasons) + ")"
    elif ev.means.web is None:
        info["reason"] = "excluded: the web gateway is disabled"
    elif not q.elig.web:
        info["reason"] = f"excluded: role {q.caller.role} may not use web context"


def web(ev: Evidence) -> None:
    """The web gateway's policy-filtered results (``web``) and its call records."""
    if ev.means.web is None:  # web_gate excludes the web without a gateway
        raise RuntimeError("the web step ran without a web gateway")
    results, calls = ev.means.web.search(ev.q.message)
    ev.sections["web"] = results
    ev.web_info.update(admitted=bool(results), calls=calls)
    failed = [c["error"] for c in calls if c.get("error")]
    ev.web_info["reason"] = f"admitted: not {ev.q.home.label}-scoped" if results else (
        f"no web results: {failed[0]}" if failed else "no web result passed the policy")  # fmt: skip
    ev.queried.append("web")


# --- thresholds and negotiation ---------------------------------------------------------------------------------------
def thresholds(ev: Evidence) -> None:
    ev.response_class, ev.reason = "clarify", "no eligible evidence passed the thresholds"


def offers(ev: Evidence) -> None:
    """What the registry cannot answer in full (a need with no program in the county asked: programs elsewhere)."""
    ev.offers = negotiation(ev.means.snap, ev.q.sq, ev.sections, ev.registry_lookups)


def wants_offers(ev: Evidence) -> bool:
    return bool(ev.q.elig.registries) and not ev.answered  # a collection named does not stop it


def negotiate(ev: Evidence) -> None:
    """Only part of the request is answered: the alternatives become evidence, so the answer can cite them."""
    ev.response_class = "negotiate"
    ev.reason = "only part of the request is answered: " + "; ".join(o["kind"] for o in ev.offers)
    known = {r["local_resource_id"] for r in ev.sections["registry"]}
    for offer in ev.offers:
        for row in offer.get("alternatives", []):
            if row["local_resource_id"] not in known:
                known.add(row["local_resource_id"])
                ev.sections["registry"].append({**row, "match": f"elsewhere: no {offer['resource_type']} "
                                                f"program in {offer['missing_in']}"})  # fmt: skip


# --- rank, prompt, crisis route ---------------------------------------------------------------------------------------
def rank(ev: Evidence) -> None:
    """The programs in the order offered (registry rows and places), their links, and both sections in that order."""
    s, q = ev.sections, ev.q
    ev.links = link_programs(s, ev.means.snap) if s["registry"] or s["spatial"] else []
    ev.programs = rank_programs(s, q.sq, q.message, q.now) if s["registry"] or s["spatial"] else []
    order = {(p["kind"], p["id"]): p["rank"] for p in ev.programs}
    s["registry"].sort(key=lambda r: order.get(("registry", r["local_resource_id"]), 1e9))
    s["spatial"].sort(key=lambda e: order.get(("place", e["entity_id"]), 1e9))


def prompt(ev: Evidence) -> None:
    """The response budget (answer length, hedging) and the prompt within its size budget, with its citations."""
    q, settings = ev.q, ev.means.settings
    ev.budget = response_budget(ev.response_class, q.intents, ev.sections, q.request, settings)
    extra = [q.request.framing] if q.request.framing else []
    if ev.response_class in ("answer", "negotiate") and not q.greeting:
        extra.append(budget_instruction(ev.budget, ev.response_class))
    ev.prompt, ev.citations = assemble_prompt(
        q.message, ev.sections, q.home_scoped, settings, extra, q.home.state_names
    )


def late_crisis(ev: Evidence) -> None:
    """A message not retrieved (a ZIP to clarify, a place elsewhere): the lexicon, else one encoding."""
    message, retriever = ev.q.message, ev.means.retriever
    ev.found_crisis = crisis.detect(message) or crisis.detect(message, retriever.encode(message), retriever.embedder)


def crisis_route(ev: Evidence) -> None:
    """The crisis lines come first in every answer (livemem.answer.chat.guard): the response is a redirect."""
    found, home = ev.found_crisis, ev.q.home
    if found is None:  # the step runs only on a crisis found
        raise RuntimeError("the crisis route step ran without a crisis")
    lines = crisis.lines_for(found.kinds, found.language, home.states, home.crisis_lines)
    ev.crisis_route = crisis.route_crisis(found, lines, ev.response_class)
    ev.reason = (
        f"crisis ({found.kind}, by {found.matched_by}): the crisis lines first, then the "
        f"{ev.response_class} of the evidence ({ev.reason})"
    )
    ev.response_class = "redirect"


def retrieving(ev: Evidence) -> bool:
    return ev.retrieving


STEPS: tuple[Step, ...] = (
    Step("route", route, timed=False),
    Step("encode", encode, retrieving),
    Step("crisis", detect_crisis, retrieving),
    Step("text", text, retrieving),
    Step("spatial", spatial, wants_places),
    Step("graph", graph_step, lambda ev: ev.retrieving and on_gis(ev)),
    Step("verdict", verdict, lambda ev: on_registry(ev) and not ev.answered, timed=False),
    Step("registry", registry, wants_registry),
    Step("web_gate", web_gate, retrieving, timed=False),
    Step("web", web, lambda ev: ev.retrieving and not ev.web_info["reason"]),
    Step("thresholds", thresholds, lambda ev: ev.retrieving and not ev.has_evidence),
    Step("offers", offers, lambda ev: ev.retrieving and ev.has_evidence and wants_offers(ev), timed=False),
    Step("negotiate", negotiate, lambda ev: ev.retrieving and bool(ev.offers)),
    Step("rank", rank, timed=False),
    Step("prompt", prompt),
    Step("crisis", late_crisis, lambda ev: ev.found_crisis is None and not ev.q.greeting and "crisis" not in ev.ran),
    Step("crisis_route", crisis_route, lambda ev: ev.found_crisis is not None, timed=False),
)
