"""The steps of an answer (livemem.answer.steps), one at a time on hand-made evidence: each does what it says, runs
when its condition holds, and the runner times the steps that ran, in order. No model, no index: the sources a
step asks (text search, the registry, the graph) are stand-ins; build_context itself runs on an empty version."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from types import SimpleNamespace

import numpy as np
import pytest

from livemem.answer import context, graph, steps
from livemem.answer.crisis import Crisis
from livemem.answer.routing import (
    Caller,
    ContextRequest,
    Eligibility,
    home_scope,
    out_of_state,
    route_intents,
    self_query,
)
from livemem.answer.steps import STEPS, Clock, Evidence, Means, Question, Step, run_steps
from livemem.answer.web import LocalProvider, WebGateway
from livemem.geo.home import WEST_VIRGINIA
from livemem.settings import ContextSettings, EngineConfig

NOW = datetime(2026, 11, 26, 15, 0, tzinfo=UTC)
SETTINGS = ContextSettings(warm_up=False, audit=False)
PUBLIC = Caller("public", frozenset({"public"}))
SUICIDE = Crisis("suicide_self_harm", ("suicide_self_harm",), "en", "lexicon", 1.0)


class FakeRetriever:
    embedder = None
    recency_half_life_days = 30.0

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def encode(self, message: str) -> np.ndarray:
        self.encoded.append(message)
        return np.ones(4, dtype=np.float32)


def question(message: str, caller=PUBLIC, registries=("local_resources",), datasets=(), web_role=True, **req):
    request = ContextRequest(message, **req)
    elig = Eligibility(["wv_benefits", "governance"], ["code"], list(registries), list(datasets), web_role)
    sq = self_query(request, elig.collections, NOW, WEST_VIRGINIA)
    reasons = home_scope(sq, request, caller, SETTINGS, WEST_VIRGINIA)
    return Question(request, caller, NOW, *route_intents(message), elig, sq, WEST_VIRGINIA, reasons,
                    out_of_state(sq, WEST_VIRGINIA), request.top_k or SETTINGS.top_k)  # fmt: skip


def evidence(message: str, web=None, gis=None, retrieving=True, **kw) -> Evidence:
    snap = SimpleNamespace(version_id="v-test", home=WEST_VIRGINIA)
    ev = Evidence(question(message, **kw), Means(snap, FakeRetriever(), SETTINGS, web, gis))
    ev.retrieving = retrieving
    return ev


def fact(name: str) -> dict[str, str]:
    return {"subject": name, "predicate": "is", "object": "known"}


def step(name: str, nth: int = 0) -> Step:
    return [s for s in STEPS if s.name == name][nth]


# --- the runner and the list ----------------------------------------------------------------------------------------
def test_the_runner_runs_the_steps_whose_condition_holds_in_order_and_times_only_the_timed_ones():
    seen: list[str] = []
    listed = (
        Step("a", lambda ev: seen.append("a")),
        Step("b", lambda ev: seen.append("b"), timed=False),
        Step("c", lambda ev: seen.append("c"), lambda ev: False),
        Step("d", lambda ev: seen.append("d")),
    )
    ev = run_steps(evidence("hello", retrieving=False), listed)
    assert seen == ["a", "b", "d"]
    assert ev.ran == ["a", "b", "d"]
    assert list(ev.clock.steps_ms) == ["a", "d"]  # the untimed step's time falls into the next timed one
    assert all(ms >= 0 for ms in ev.clock.steps_ms.values())


def test_the_clock_laps_since_the_lap_before():
    clock = Clock()
    clock.lap("first")
    clock.lap("second")
    assert list(clock.steps_ms) == ["first", "second"]


def test_the_timed_step_names_are_those_steps_ms_always_had():
    timed = {s.name for s in STEPS if s.timed} | {"intent", "self_query"}  # the last two: understand's
    assert timed == {"intent", "self_query", "encode", "crisis", "text", "spatial", "graph", "registry", "web",
                     "thresholds", "negotiate", "prompt"}  # fmt: skip


def test_the_steps_listed_in_the_context_docstring_are_the_steps_run():
    listed = re.findall(r"^\d+\. ``(\w+)``", context.__doc__, re.MULTILINE)
    assert listed == ["understand", *(s.name for s in STEPS)]


# --- understand --------------------------------------------------------------------------------------------------------
def test_understand_makes_the_question_once_and_times_intent_and_self_query(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({}), encoding="utf-8")
    snap = SimpleNamespace(
        path=tmp_path, home=WEST_VIRGINIA, access_of={"wv_benefits": "public", "governance": "public", "code": "x"},
        collections_for=lambda access: ["wv_benefits", "governance"],
    )  # fmt: skip
    clock = Clock()
    request = ContextRequest("food pantry in Oak Hill", collections=("wv_benefits",))
    q = steps.understand(Means(snap, FakeRetriever(), SETTINGS), PUBLIC, request, NOW, clock)
    assert list(clock.steps_ms) == ["intent", "self_query"]
    assert "resource" in q.intents and q.rules
    assert q.elig.collections == ["wv_benefits"]  # the request narrows what the role may read
    assert q.elig.hidden == ["code"] and q.elig.registries == []  # no registry in this version
    assert (
        q.sq.counties == ["Fayette"]
        and q.home_scoped
        and q.home_reasons == ["WV county Fayette", "WV place in the text: Oak Hill"]
    )
    assert q.top_k == SETTINGS.top_k and q.elsewhere == [] and q.collections == ["wv_benefits"]


# --- route -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("message", "response_class", "reason"),
    [
        ("hello there!", "answer", "small talk: answered without retrieval"),
        ("food pantry in ZIP 00000", "clarify", "ZIP 00000 is not a ZIP code: which town, county or ZIP is meant?"),
        ("SNAP office in Columbus, Ohio", "redirect",
         "place outside West Virginia (Columbus, OH; Ohio): this memory covers WV"),
    ],
)  # fmt: skip
def test_route_answers_without_retrieval_small_talk_a_zip_that_is_none_and_a_place_elsewhere(
    message, response_class, reason
):
    ev = evidence(message, retrieving=False)
    steps.route(ev)
    assert (ev.retrieving, ev.response_class, ev.reason) == (False, response_class, reason)
    assert ev.web_info["reason"] == f"excluded: no retrieval ({response_class})"


def test_route_sends_any_other_message_to_retrieval():
    ev = evidence("food pantry in Oak Hill", retrieving=False)
    steps.route(ev)
    assert ev.retrieving and ev.web_info["reason"] == "" and ev.response_class == "answer"


# --- retrieve ----------------------------------------------------------------------------------------------------------
def test_encode_encodes_the_message_once():
    ev = evidence("food pantry in Oak Hill")
    steps.encode(ev)
    assert ev.means.retriever.encoded == ["food pantry in Oak Hill"] and ev.vector.shape == (4,)


def test_the_crisis_step_finds_a_crisis_and_steers_the_registry_to_its_programs():
    ev = evidence("I want to kill myself tonight")
    steps.detect_crisis(ev)
    assert ev.found_crisis is not None and ev.found_crisis.kind == "suicide_self_harm"
    assert ev.q.sq.populations[-1]["population"] == "crisis"
    calm = evidence("food pantry in Oak Hill")
    steps.detect_crisis(calm)
    assert calm.found_crisis is None and all(p["population"] != "crisis" for p in calm.q.sq.populations)


def test_the_text_step_searches_the_eligible_collections_for_top_k_passages(monkeypatch):
    asked = {}

    def fake_search(snap, retriever, request, vector, collections, sq, pool, min_dense):
        asked.update(collections=collections, pool=pool)
        return [{"chunk_id": "c1"}, {"chunk_id": "c2"}], 9

    monkeypatch.setattr(steps, "text_search", fake_search)
    monkeypatch.setattr(steps, "passage", lambda r: {**r, "shaped": True})
    ev = evidence("food pantry in Oak Hill", top_k=4)
    steps.text(ev)
    assert asked == {"collections": ["wv_benefits", "governance"], "pool": 4}
    assert ev.sections["unstructured"] == [{"chunk_id": "c1", "shaped": True}, {"chunk_id": "c2", "shaped": True}]
    assert ev.sections["personal"] == [] and ev.candidates == 9 and ev.pool == 4
    assert ev.queried == ["wv_benefits", "governance"]


def test_the_spatial_step_runs_for_a_place_question_with_the_gis_index_and_adds_places_and_facts(monkeypatch):
    monkeypatch.setattr(steps, "spatial_search", lambda gis, access, vector, sq, k, min_score: [{"entity_id": "e1"}])
    monkeypatch.setattr(steps, "structured_facts", lambda gis, entities: [{"fact": e["entity_id"]} for e in entities])
    ev = evidence("food pantry in Oak Hill", gis=object(), datasets=["gbim"])
    assert step("spatial").when(ev)
    steps.spatial(ev)
    assert ev.sections["spatial"] == [{"entity_id": "e1"}] and ev.sections["structured_facts"] == [{"fact": "e1"}]
    assert ev.queried == ["gbim"]
    assert not step("spatial").when(evidence("food pantry in Oak Hill", datasets=["gbim"]))  # no GIS index
    assert not step("spatial").when(evidence("food pantry in Oak Hill", gis=object()))  # no dataset the role reads


def test_the_graph_step_merges_the_graph_facts_and_adds_the_places_the_question_names(monkeypatch):
    gis = SimpleNamespace(row_of={"e9": 0}, entities=[{"entity_id": "e9"}], dense=np.ones((1, 4), dtype=np.float32))
    route = {"relationship": None}
    monkeypatch.setattr(graph, "fuse", lambda gis, access, message, passages, home: ([fact("g")], route))
    monkeypatch.setattr(graph, "refinement_terms", lambda route, message: [])
    monkeypatch.setattr(graph, "asked_entities", lambda route: ["e9"])
    monkeypatch.setattr(steps, "spatial_item", lambda e, score, in_town: {"entity_id": e["entity_id"], "s": score})
    ev = evidence("Which county is the Oak Hill Benefits Hub located in?", gis=gis, datasets=["gbim"])
    ev.vector = np.ones(4, dtype=np.float32)
    ev.sections["structured_facts"] = [fact("spatial")]
    steps.graph_step(ev)
    assert ev.graph_route is route and ev.queried == ["gbim"]
    assert ev.sections["structured_facts"] == [fact("g"), fact("spatial")]
    assert ev.sections["spatial"] == [{"entity_id": "e9", "s": 4.0}]


def test_refinement_searches_the_text_again_with_the_graph_terms_and_records_what_it_added(monkeypatch):
    added = [{"chunk_id": "c7"}]
    monkeypatch.setattr(steps, "refine_passages", lambda snap, ret, req, terms, cols, sq, pool, settings, s: added)
    monkeypatch.setattr(graph, "fuse", lambda gis, access, message, passages, home: ([fact("of c7")], {}))
    ev = evidence("Which county is the Oak Hill Benefits Hub located in?", gis=object())
    ev.graph_route, ev.pool = {}, 6
    steps.refine_text(ev, ["Oak Hill Benefits Hub"])
    assert ev.graph_route["refinement"] == {"terms": ["Oak Hill Benefits Hub"], "added": ["c7"]}
    assert ev.sections["structured_facts"] == [fact("of c7")]


# --- registry ----------------------------------------------------------------------------------------------------------
def test_a_registry_verdict_answers_a_yes_no_question_and_then_no_program_list_is_looked_up(monkeypatch):
    said = {"local_resource_id": "r1", "moved_to": "r2", "answer": "no"}
    monkeypatch.setattr(steps, "registry_verdict", lambda snap, message: (said, [fact("closed")]))
    monkeypatch.setattr(steps, "registry_rows", lambda snap, ids: [{"local_resource_id": i} for i in ids])
    ev = evidence("Is the Oak Hill pantry still open?")
    assert step("verdict").when(ev)
    steps.verdict(ev)
    assert ev.answered and ev.graph_route["relationship"]["verdict"] == {**said, "from": "registry"}
    assert [r["local_resource_id"] for r in ev.sections["registry"]] == ["r1", "r2"]
    assert ev.sections["structured_facts"] == [fact("closed")] and ev.queried == ["local_resources"]
    assert not step("registry").when(ev) and not step("verdict").when(ev)


def test_the_registry_step_looks_up_the_programs_and_those_the_passages_name(monkeypatch):
    asked = {}

    def fake_lookup(snap, sq, ids, limit, message):
        asked["ids"] = ids
        return [{"local_resource_id": "r1"}], [{"lookup": 1}]

    monkeypatch.setattr(steps, "registry_lookup", fake_lookup)
    ev = evidence("food pantry in Oak Hill")
    ev.sections["unstructured"] = [{"chunk_id": "c1", "local_resource_id": "r5"}, {"chunk_id": "c2"}]
    assert step("registry").when(ev)
    steps.registry(ev)
    assert asked["ids"] == ["r5"] and ev.sections["registry"] == [{"local_resource_id": "r1"}]
    assert ev.registry_lookups == [{"lookup": 1}] and ev.queried == ["local_resources"]
    assert not step("registry").when(evidence("food pantry in Oak Hill", registries=()))  # no registry
    assert not step("registry").when(evidence("what does the constitution say?"))  # no need, no home county


# --- web ---------------------------------------------------------------------------------------------------------------
GATEWAY = WebGateway(LocalProvider([{"title": "Council votes", "snippet": "council votes", "url": "https://e.org/a"}]))


def test_the_web_gate_never_sends_a_crisis_message_to_the_web():
    ev = evidence("what did the council vote on", web=GATEWAY)
    ev.found_crisis = SUICIDE
    steps.web_gate(ev)
    assert ev.web_info["reason"] == "excluded: a crisis message is never sent to the web"
    assert not step("web").when(ev)


@pytest.mark.parametrize(
    ("message", "web", "kw", "reason"),
    [
        ("food pantry", GATEWAY, {"county": "Fayette"}, "excluded: West-Virginia-scoped (WV county Fayette)"),
        ("what did the council vote on", None, {}, "excluded: the web gateway is disabled"),
        ("what did the council vote on", GATEWAY, {"web_role": False}, "excluded: role public may not use web context"),
        ("what did the council vote on", GATEWAY, {}, ""),
    ],
)
def test_the_web_gate_excludes_a_home_scoped_message_no_gateway_and_a_role_without_the_web(message, web, kw, reason):
    ev = evidence(message, web=web, **kw)
    steps.web_gate(ev)
    assert ev.web_info["reason"] == reason
    assert step("web").when(ev) is (reason == "")


def test_the_web_step_admits_the_gateway_results_and_records_its_calls():
    ev = evidence("what did the council vote on", web=GATEWAY)
    steps.web(ev)
    assert [r["url"] for r in ev.sections["web"]] == ["https://e.org/a"] and ev.web_info["admitted"] is True
    assert ev.web_info["reason"] == "admitted: not WV-scoped" and len(ev.web_info["calls"]) == 1
    assert ev.queried == ["web"]


# --- thresholds and negotiation ------------------------------------------------------------------------------------------
def test_the_thresholds_step_turns_an_empty_evidence_set_into_clarify():
    ev = evidence("purple elephants dancing on the moon")
    assert step("thresholds").when(ev) and not step("offers").when(ev)
    steps.thresholds(ev)
    assert (ev.response_class, ev.reason) == ("clarify", "no eligible evidence passed the thresholds")
    found = evidence("purple elephants dancing on the moon")
    found.sections["unstructured"] = [{"chunk_id": "c1"}]
    assert not step("thresholds").when(found) and step("offers").when(found)


def test_offers_and_negotiate_make_the_alternatives_evidence_once(monkeypatch):
    alternatives = [{"local_resource_id": "r1"}, {"local_resource_id": "r9"}]
    offer = {"kind": "no wic program in Fayette", "resource_type": "wic", "missing_in": "Fayette",
             "alternatives": alternatives}  # fmt: skip
    monkeypatch.setattr(steps, "negotiation", lambda snap, sq, sections, lookups: [offer])
    ev = evidence("WIC office in Oak Hill")
    ev.sections["registry"] = [{"local_resource_id": "r1"}]
    assert step("offers").when(ev) and not step("negotiate").when(ev)
    steps.offers(ev)
    assert step("negotiate").when(ev)
    steps.negotiate(ev)
    assert ev.response_class == "negotiate"
    assert ev.reason == "only part of the request is answered: no wic program in Fayette"
    assert ev.sections["registry"] == [
        {"local_resource_id": "r1"}, {"local_resource_id": "r9", "match": "elsewhere: no wic program in Fayette"}
    ]  # fmt: skip


# --- rank, prompt, crisis ------------------------------------------------------------------------------------------------
def test_rank_orders_the_registry_and_the_places_as_the_programs_are_offered(monkeypatch):
    programs = [{"kind": "place", "id": "e2", "rank": 1}, {"kind": "registry", "id": "r2", "rank": 2},
                {"kind": "registry", "id": "r1", "rank": 3}]  # fmt: skip
    monkeypatch.setattr(steps, "rank_programs", lambda sections, sq, message, now: programs)
    monkeypatch.setattr(steps, "link_programs", lambda sections, snap: [{"link": 1}])
    ev = evidence("food pantry in Oak Hill")
    ev.sections["registry"] = [{"local_resource_id": "r1"}, {"local_resource_id": "r3"}, {"local_resource_id": "r2"}]
    ev.sections["spatial"] = [{"entity_id": "e1"}, {"entity_id": "e2"}]
    steps.rank(ev)
    assert [r["local_resource_id"] for r in ev.sections["registry"]] == ["r2", "r1", "r3"]
    assert [e["entity_id"] for e in ev.sections["spatial"]] == ["e2", "e1"]
    assert ev.programs == programs and ev.links == [{"link": 1}]
    empty = evidence("food pantry in Oak Hill")
    steps.rank(empty)
    assert empty.programs == [] and empty.links == []


@pytest.mark.parametrize(("response_class", "instructed"), [("answer", True), ("negotiate", True), ("clarify", False)])
def test_the_prompt_step_adds_the_framing_and_the_budget_instruction_to_an_answer(
    monkeypatch, response_class, instructed
):
    asked = {}

    def fake_assemble(message, sections, home_scoped, settings, extra, state_names):
        asked.update(extra=extra, home_scoped=home_scoped, state_names=state_names)
        return "the prompt", [{"kind": "passage"}]

    monkeypatch.setattr(steps, "assemble_prompt", fake_assemble)
    ev = evidence("food pantry in Oak Hill", framing="Answer as a caseworker.")
    ev.response_class = response_class
    steps.prompt(ev)
    assert ev.prompt == "the prompt" and ev.citations == [{"kind": "passage"}] and ev.budget
    assert asked["extra"][0] == "Answer as a caseworker." and (len(asked["extra"]) == 2) is instructed
    assert asked["home_scoped"] is True and asked["state_names"] == "West Virginia"


def test_a_message_not_retrieved_is_checked_for_a_crisis_after_the_prompt_but_small_talk_is_not():
    late = step("crisis", 1)
    ev = evidence("I want to kill myself in Columbus, Ohio", retrieving=False)
    assert late.when(ev)
    steps.late_crisis(ev)
    assert ev.found_crisis is not None and ev.found_crisis.matched_by == "lexicon"
    assert ev.means.retriever.encoded == []  # the lexicon found it: no encoding
    assert not late.when(evidence("hello there!", retrieving=False))
    checked = evidence("food pantry in Oak Hill")
    checked.ran.append("crisis")
    assert not late.when(checked)


def test_the_crisis_route_makes_the_response_a_redirect_with_the_crisis_lines_first():
    ev = evidence("I want to kill myself")
    assert not step("crisis_route").when(ev)
    ev.found_crisis, ev.response_class, ev.reason = SUICIDE, "answer", "evidence found"
    steps.crisis_route(ev)
    assert ev.response_class == "redirect" and ev.crisis_route["evidence_class"] == "answer"
    assert ev.crisis_route["lines"] and ev.crisis_route["kind"] == "suicide_self_harm"
    assert ev.reason == (
        "crisis (suicide_self_harm, by lexicon): the crisis lines first, then the answer of the evidence "
        "(evidence found)"
    )


# --- build_context on a version with nothing in it ------------------------------------------------------------------------
@pytest.fixture
def empty_version(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({}), encoding="utf-8")
    return SimpleNamespace(
        path=tmp_path, home=WEST_VIRGINIA, version_id="v-empty", access_of={},
        collections_for=lambda access: [], engine=EngineConfig.defaults(),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("message", "timed", "response_class"),
    [
        ("hello there!", ["intent", "self_query", "prompt"], "answer"),
        ("food pantry in ZIP 00000", ["intent", "self_query", "prompt", "crisis"], "clarify"),
        ("what did the council decide", ["intent", "self_query", "encode", "crisis", "text", "thresholds", "prompt"],
         "clarify"),
    ],
)  # fmt: skip
def test_build_context_times_the_steps_it_ran_in_order(empty_version, monkeypatch, message, timed, response_class):
    monkeypatch.setattr(steps, "text_search", lambda *a: ([], 0))
    retriever = FakeRetriever()
    out = context.build_context(empty_version, retriever, PUBLIC, ContextRequest(message), SETTINGS, now=NOW)
    route = out["route"]
    assert list(route["steps_ms"]) == timed
    assert route["response_class"] == response_class and out["index_version"] == "v-empty"
    assert out["hidden_collections"] == [] and route["negotiation"] == [] and route["recency"] is None
    assert route["web"]["reason"].startswith("excluded: ")


def test_the_question_is_handed_down_not_recomputed(empty_version, monkeypatch):
    made = []
    real = steps.understand

    def counted(*args):
        made.append(real(*args))
        return made[-1]

    monkeypatch.setattr(context, "understand", counted)
    monkeypatch.setattr(steps, "text_search", lambda *a: ([], 0))
    request = ContextRequest("what did the council decide", top_k=3)
    out = context.build_context(empty_version, FakeRetriever(), PUBLIC, request, SETTINGS, now=NOW)
    assert len(made) == 1 and made[0].top_k == 3 and out["route"]["intents"] == made[0].intents
    assert made[0].request is request
