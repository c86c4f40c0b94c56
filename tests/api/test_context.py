"""/context on the bundled example: routes, filters and sources of real-shaped messages; roles; WV-first; web;
the prompt budget; audit records."""

from __future__ import annotations

import json
import random

import pytest
from fastapi.testclient import TestClient
from support.context import INTERNAL_KEY, example_index, make_app
from support.serving import answered_while_trace_file_locked, build_and_publish, make_workspace

from livemem.answer.routing import ContextRequest, route_intents, self_query, time_filters
from livemem.answer.web import LocalProvider, WebGateway, WebPolicy
from livemem.settings import ContextSettings
from livemem.usage.traces import trace_key
from livemem.version.store import IndexHome

PLAYBOOK_WORDS = "Do not copy passages from this document into public guides"


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder):
    return example_index(tmp_path_factory)


@pytest.fixture(scope="module")
def client(home, embedder):
    with TestClient(make_app(home, embedder)) as c:
        yield c


# message, request extras, expected: intents ⊇, response_class, filters ⊇, wv, registry ids ⊇, entity labels ⊇,
# collections every passage belongs to
CASES = [
    ("Oak Hill WV county benefits", {"county": "Fayette"}, {"resource"}, "answer", {"county": ["Fayette"]}, True,
     {"fay-dhhr-snap", "fay-dhhr-medicaid"}, {"Oak Hill Benefits Hub"}, {"wv_benefits"}),
    ("Where can a grandmother in ZIP 25840 get utility assistance?", {}, {"resource", "spatial"}, "answer",
     {"county": ["Fayette"], "zip": "25840", "resource_type": ["utility_assistance"]}, True, {"fay-lieap-cap"},
     set(), {"wv_benefits"}),
    ("help paying the heating bill in Beckley", {}, {"resource"}, "answer",
     {"county": ["Raleigh"], "resource_type": ["utility_assistance"]}, True, {"ral-lieap-beckley"}, set(),
     {"wv_benefits"}),
    ("Medicaid renewal documents", {"zip": "25801"}, {"resource"}, "answer",
     {"county": ["Raleigh"], "resource_type": ["medicaid"]}, True, {"ral-dhhr-medicaid"}, set(), None),
    ("What does the constitution say about sealed decisions?", {}, {"governance"}, "answer",
     {"seal_state": "SEALED"}, False, set(), set(), {"governance"}),
    ("What did the council decide in the council minutes since 2026?", {}, {"governance"}, "answer",
     {"collections": ["governance"], "updated_after": "2026-01-01T00:00:00Z"}, False, set(), set(), {"governance"}),
    ("Which county is the Oak Hill Benefits Hub located in?", {}, {"factual"}, "answer", {"county": ["Fayette"]},
     True, set(), {"Oak Hill Benefits Hub"}, None),
    ("hello there!", {}, {"greeting"}, "answer", {}, False, set(), set(), set()),
    ("thanks so much", {}, {"greeting"}, "answer", {}, False, set(), set(), set()),
    ("purple elephants dancing on the moon", {}, {"general"}, "clarify", {}, False, set(), set(), set()),
    ("SNAP office in Columbus, Ohio", {}, {"resource"}, "redirect", {"resource_type": ["snap"]}, False, set(),
     set(), set()),
    ("my neighbour took an overdose", {}, set(), "redirect", {}, False, set(), set(), set()),
    # a collection the role may not read is ignored like one that does not exist (tests/api/test_security_visibility.py)
    ("shutoff notice steps in the caseworker playbook", {}, {"resource"}, "answer", {}, False, set(), set(),
     {"wv_benefits", "governance", "code"}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("message", "extra", "intents", "response_class", "filters", "wv", "registry", "entities", "collections"),
    CASES,
    ids=[c[0][:40] for c in CASES],
)
def test_routing_table(client, message, extra, intents, response_class, filters, wv, registry, entities, collections):
    r = client.post("/context", json={"message": message, **extra})
    assert r.status_code == 200, r.text
    body = r.json()
    route = body["route"]
    assert intents <= set(route["intents"]), route["rules"]
    assert route["response_class"] == response_class, route["reason"]
    for key, value in filters.items():
        assert route["filters"].get(key) == value, (key, route["filters"])
    assert route["wv_scoped"] is wv, route["wv_reasons"]
    assert registry <= {row["local_resource_id"] for row in body["registry"]}
    assert entities <= {e["label"] for e in body["spatial"]}
    if collections is not None:
        assert {p["collection"] for p in body["unstructured"]} <= collections
    if wv:
        assert body["web"] == [] and route["web"]["admitted"] is False
        assert "West Virginia" in body["prompt"]["system"] and "do not use web" in body["prompt"]["system"]
        assert all(p["county"] in (None, *route["filters"]["county"]) for p in body["unstructured"])
    if "greeting" in route["intents"]:
        assert route["sources_queried"] == [] and body["unstructured"] == []
    for citation in body["citations"]:
        assert citation["kind"] in ("chunk", "fact", "entity", "registry", "web")
    assert body["prompt"]["chars"] <= body["prompt"]["budget_chars"]


def test_oak_hill_evidence_kept_apart_with_facts_and_citations(client):
    body = client.post("/context", json={"message": "Oak Hill WV county benefits", "county": "Fayette"}).json()
    hub = next(e for e in body["spatial"] if e["label"] == "Oak Hill Benefits Hub")
    assert hub["matched_town"] and hub["county"] == "Fayette" and -82 < hub["lon"] < -80 and 37 < hub["lat"] < 39
    facts = {(f["subject"], f["predicate"], f["object"]) for f in body["structured_facts"]}
    assert (hub["entity_id"], "located_in", "Fayette") in facts
    assert all(row["county"] == "Fayette" and row["verification_status"] == "verified" for row in body["registry"])
    refs = {c["n"]: c for c in body["citations"]}
    for section, id_key in (("unstructured", "chunk_id"), ("spatial", "entity_id"), ("registry", "local_resource_id")):
        for item in body[section]:
            if item["ref"] is not None:
                assert refs[item["ref"]]["id"] == item[id_key]
                assert f"[{item['ref']}]" in body["prompt"]["context"]
    assert body["prompt"]["context"].index("Places") < body["prompt"]["context"].index("Verified programs")


def test_context_does_not_wait_for_the_trace_or_audit_file(client):
    """/context (and /chat, which answers through it) queues its usage events and its audit record: trace and audit
    files locked elsewhere delay them, not the answer, and both land once the files are free."""
    from serving.services.context import context_service

    state = client.app.state.serving
    writers = [state.traces, context_service(state).audit]
    message = {"message": "heating bill help in Fayette County"}
    response, held = answered_while_trace_file_locked(writers, lambda: client.post("/context", json=message))
    assert response.status_code == 200, response.text
    body = response.json()
    key = trace_key(body["trace_id"])  # events name a trace by its uuid (issue 33: bounded traces)
    assert body["unstructured"] and not any(key in text for text in held.values())
    assert all(writer.flush() for writer in writers)
    trace_file, audit_file = held
    written = [json.loads(line) for line in trace_file.read_text(encoding="utf-8").splitlines()]
    mine = [e for e in written if e.get("trace_id") == key]
    assert sorted(e["chunk_id"] for e in mine) == sorted(p["chunk_id"] for p in body["unstructured"])
    audited = [json.loads(line) for line in audit_file.read_text(encoding="utf-8").splitlines()]
    assert [r["event"] for r in audited if r["trace_id"] == body["trace_id"]] == ["context"]


def test_role_leakage_over_generated_messages(client):
    """internal_playbooks never reaches a public caller's evidence, prompt or answer; an internal caller sees it."""
    rng = random.Random(7)
    subjects = ["shutoff notice", "intake checklist", "escalation", "referral steps", "eviction notice", "food",
                "caseworker notes", "urgent risks", "health coverage", "supervisor"]  # fmt: skip
    frames = ["What are the {} steps?", "{} in Fayette County", "caseworker playbook {}", "internal guidance on {}",
              "Tell me about {} near Beckley", "{} for a family in ZIP 25901"]  # fmt: skip
    messages = [rng.choice(frames).format(rng.choice(subjects)) for _ in range(40)]
    for message in messages:
        for path in ("/context", "/chat"):
            body = client.post(path, json={"message": message}).json()
            evidence = body if path == "/context" else body["evidence"]
            assert all(p["collection"] != "internal_playbooks" for p in evidence["unstructured"]), message
            text = json.dumps(body)
            assert PLAYBOOK_WORDS not in text and "internal_playbooks" not in text, message
    internal = client.post(
        "/context", json={"message": "caseworker playbook intake checklist"}, headers={"X-API-Key": INTERNAL_KEY}
    ).json()
    assert "internal_playbooks" in {p["collection"] for p in internal["unstructured"]}


def test_web_admitted_only_outside_wv_scope_and_by_policy(home, embedder):
    docs = [
        {"title": "SNAP rules explained", "snippet": "How SNAP food assistance eligibility works", "url": "https://www.usda.gov/snap"},
        {"title": "SNAP scam", "snippet": "SNAP food assistance giveaway", "url": "https://spam.example.com/snap"},
        {"title": "SNAP blog", "snippet": "SNAP food assistance tips", "url": "https://blog.other.org/snap"},
    ]  # fmt: skip
    gateway = WebGateway(LocalProvider(docs), WebPolicy(allowed_domains=["usda.gov"], denied_domains=["example.com"]))
    with TestClient(make_app(home, embedder, web=gateway)) as c:
        open_q = c.post("/context", json={"message": "How does SNAP food assistance eligibility work?"}).json()
        assert open_q["route"]["web"]["admitted"] is True
        assert [w["url"] for w in open_q["web"]] == ["https://www.usda.gov/snap"]
        assert open_q["web"][0]["source"] == "www.usda.gov"
        excluded = {e["url"]: e["reason"] for e in open_q["route"]["web"]["calls"][0]["excluded"]}
        assert excluded["https://spam.example.com/snap"].startswith("denied domain")
        assert "allowed list" in excluded["https://blog.other.org/snap"]
        wv = c.post("/context", json={"message": "How does SNAP food assistance eligibility work in Fayette County?"})
        assert wv.json()["web"] == [] and "West-Virginia-scoped" in wv.json()["route"]["web"]["reason"]
        assert gateway.calls == 1


def test_prompt_budget_is_kept(home, embedder):
    with TestClient(make_app(home, embedder, prompt_budget_chars=1500)) as c:
        body = c.post("/context", json={"message": "Oak Hill WV county benefits", "top_k": 10}).json()
    assert body["prompt"]["chars"] <= 1500
    assert body["prompt"]["items_left_out"] > 0
    assert any(item["ref"] is None for item in body["unstructured"] + body["registry"] + body["structured_facts"])


def test_audit_records_and_cache(home, embedder, tmp_path):
    with TestClient(make_app(home, embedder, audit_dir=tmp_path)) as c:
        first = c.post("/context", json={"message": "food pantry near Beckley WV"}).json()
        second = c.post("/context", json={"message": "  Food pantry near BECKLEY wv "}).json()
        other_role = c.post(
            "/context", json={"message": "food pantry near Beckley WV"}, headers={"X-API-Key": INTERNAL_KEY}
        ).json()
        metrics = c.get("/metrics").text
    assert (first["cached"], second["cached"], other_role["cached"]) == (False, True, False)
    records = [json.loads(line) for f in sorted(tmp_path.glob("audit-*.jsonl")) for line in f.read_text().splitlines()]
    assert len(records) == 3
    record = records[0]
    assert record["event"] == "context" and record["trace_id"] == first["trace_id"]
    assert record["collections_queried"] and record["registry_lookups"] and record["scores"]
    assert record["web"]["reason"].startswith("excluded") and record["latency_ms"]["total"] > 0
    assert "encode" in record["latency_ms"] and [r["cache_hit"] for r in records] == [False, True, False]
    assert 'livemem_answer_cache_hits_total{kind="context"} 1.0' in metrics


def test_role_in_body_must_match_caller(client):
    r = client.post("/context", json={"message": "SNAP", "role": "internal"})
    assert r.status_code == 403
    assert client.post("/context", json={"message": "   "}).status_code == 422


def test_self_query_rules_units():
    from datetime import UTC, datetime

    now = datetime(2026, 11, 22, tzinfo=UTC)
    times, _ = time_filters("what changed last month", now)
    assert times == {
        "updated_after": datetime(2026, 10, 1, tzinfo=UTC),
        "updated_before": datetime(2026, 11, 1, tzinfo=UTC),
    }
    times, _ = time_filters("decisions in March 2026", now)
    assert times == {
        "updated_after": datetime(2026, 3, 1, tzinfo=UTC),
        "updated_before": datetime(2026, 4, 1, tzinfo=UTC),
    }
    sq = self_query(
        ContextRequest("authoritative rules in the governance docs for Raleigh County"), ["governance"], now
    )
    assert sq.seal_state == "SEALED" and sq.collections == ["governance"] and sq.counties == ["Raleigh"]
    assert route_intents("good morning")[0] == ["greeting"]
    assert "governance" in route_intents("what did the council vote on")[0]
    assert ContextSettings(guardrail="refuse").guardrail == "refuse"


# --- the decision overlay: negotiate, budgets, population hints, one score scale, recency -----------------------------
def test_negotiate_offers_programs_elsewhere_and_the_answer_says_so(client):
    """WIC asked for in a county with no verified WIC clinic: the clinics listed elsewhere are offered."""
    body = client.post("/context", json={"message": "WIC clinic in Kanawha County"}).json()
    route = body["route"]
    assert route["response_class"] == "negotiate", route["reason"]
    offer = next(o for o in route["negotiation"] if o["resource_type"] == "wic")
    assert offer["kind"] == "elsewhere" and offer["missing_in"] == "Kanawha County"
    assert {a["local_resource_id"] for a in offer["alternatives"]} == {"fay-wic-oakhill", "ral-wic-beckley"}
    assert {"fay-wic-oakhill", "ral-wic-beckley"} <= {r["local_resource_id"] for r in body["registry"]}
    assert route["budget"]["hedging"] == "none" and "offer the listed alternatives" in body["prompt"]["system"]
    chat = client.post("/chat", json={"message": "WIC clinic in Kanawha County"}).json()
    assert "No verified WIC program is listed for Kanawha County" in chat["answer"]
    assert "Would one of those work?" in chat["answer"] and chat["guardrail"]["action"] == "none"
    assert "fay-wic-oakhill" in {c["id"] for c in chat["citations"]}


def test_negotiate_when_two_counties_are_named(client):
    body = client.post("/context", json={"message": "food pantry in Fayette or Raleigh County"}).json()
    assert body["route"]["response_class"] == "negotiate"
    assert body["route"]["negotiation"][0]["kind"] == "choose_county"
    assert {r["county"] for r in body["registry"]} == {"Fayette", "Raleigh"}  # both counties were looked up


@pytest.mark.parametrize(
    "message", ["food pantry in Charleston", "food pantry near Beckley WV", "What is the breath phase?"]
)
def test_the_budget_holds_for_the_whole_answer_offers_included(client, message):
    body = client.post("/chat", json={"message": message, "max_words": 40}).json()
    assert len(body["answer"].split()) <= 40, body["answer"]
    assert all(f"[{c['n']}]" in body["answer"] for c in body["citations"])  # a shortened line keeps its citation
    for offer in body["route"]["negotiation"]:  # what is not here is said, whatever the budget
        assert offer["text"] in body["answer"]


def test_response_budgets_length_and_hedging(client):
    verified = client.post("/chat", json={"message": "food pantry near Beckley WV"}).json()
    assert verified["route"]["budget"] == {
        "max_words": 200, "hedging": "none", "reasons": ["2 verified program(s)"],
    }  # fmt: skip
    short = client.post("/chat", json={"message": "food pantry near Beckley WV", "max_words": 20}).json()
    assert short["route"]["budget"]["max_words"] == 20
    assert len(short["answer"].split()) < len(verified["answer"].split())
    assert all(f"[{c['n']}]" in short["answer"] for c in short["citations"])  # whole items only: no cut citation
    community = client.post("/context", json={"message": "food pantry near Beckley WV", "role": "community"}).json()
    assert community["route"]["budget"]["max_words"] == 120
    assert "Answer in at most 120 words." in community["prompt"]["system"]
    sealed = client.post("/context", json={"message": "What does the constitution say about sealed decisions?"})
    assert sealed.json()["route"]["budget"]["hedging"] == "none"
    documents = client.post("/chat", json={"message": "What is the breath phase?"}).json()
    assert documents["route"]["budget"]["hedging"] == "light"
    assert documents["answer"].endswith("(Quoted from documents, not from a verified program listing: confirm the "
                                        "details before relying on them.)")  # fmt: skip
    clarify = client.post("/context", json={"message": "purple elephants dancing on the moon"}).json()
    assert clarify["route"]["budget"]["hedging"] == "none" and "Answer in at most" not in clarify["prompt"]["system"]


def test_population_hints_steer_program_types(client):
    grandmother = client.post("/context", json={"message": "help for my grandmother in Fayette County"}).json()
    hint = grandmother["route"]["population"][0]
    assert (hint["population"], hint["matched"]) == ("senior", "grandmother")
    lookups = grandmother["route"]["registry_lookups"]
    assert {lk["resource_type"] for lk in lookups} == set(hint["resource_types"])
    assert all(lk["steered_by"] == ["senior"] for lk in lookups)
    types = {r["resource_type"] for r in grandmother["registry"]}
    assert types and types <= set(hint["resource_types"]) and "wic" not in types
    family = client.post("/context", json={"message": "help for a family with kids in Raleigh County"}).json()
    assert family["route"]["population"][0]["population"] == "family_with_children"
    ids = [r["local_resource_id"] for r in family["registry"]]
    assert {"ral-wic-beckley", "ral-holiday-beckley"} <= set(ids)
    # rows naming the population (children, families) come first
    assert ids.index("ral-holiday-beckley") < ids.index("ral-dhhr-snap")
    veteran = client.post("/context", json={"message": "services for a veteran in Raleigh County"}).json()
    assert veteran["route"]["population"][0]["population"] == "veteran"
    assert {r["resource_type"] for r in veteran["registry"]} <= {"healthcare", "behavioral_health", "housing",
                                                                 "employment", "disability_services"}  # fmt: skip
    plain = client.post("/context", json={"message": "help in Raleigh County"}).json()
    assert plain["route"]["population"] == [] and plain["route"]["registry_lookups"][0]["resource_type"] is None


def test_min_score_on_the_normalised_scale(client):
    """min_score 0.3 used to drop every hybrid passage (raw scores ≈ 0.03); on the normalised scale it keeps
    the good ones, and a threshold near 1 keeps only passages ranked first by both rankings."""
    message = {"message": "food pantry near Beckley WV"}
    every = client.post("/context", json=message).json()["unstructured"]
    assert every and all(0 <= p["score_normalized"] <= 1 and p["score"] <= 2 for p in every)  # min-max: 0-2
    kept = client.post("/context", json={**message, "min_score": 0.3}).json()
    assert kept["unstructured"] and kept["route"]["min_score"] == 0.3
    assert all(p["score_normalized"] >= 0.3 for p in kept["unstructured"])
    strict = client.post("/context", json={**message, "min_score": 0.99}).json()["unstructured"]
    assert len(strict) < len(every) and all(p["score_normalized"] >= 0.99 for p in strict)
    assert client.post("/context", json={**message, "min_score": 3}).status_code == 422


def test_recency_bias_on_context_and_chat(tmp_path, embedder):
    """The serving workspace: benefits/raleigh-county.md changed recently, the rest in 2020."""
    home = IndexHome(tmp_path / "rag_index")
    build_and_publish(make_workspace(tmp_path), home, embedder)
    message = {"message": "apply for assistance at the office"}
    with TestClient(make_app(home, embedder)) as c:
        plain = c.post("/context", json=message).json()
        recent = c.post("/context", json={**message, "recency_bias": 2}).json()
        chat = c.post("/chat", json={**message, "recency_bias": 2, "recency_half_life_days": 30}).json()
    assert plain["unstructured"][0]["provenance"]["path"] != "benefits/raleigh-county.md"
    assert recent["unstructured"][0]["provenance"]["path"] == "benefits/raleigh-county.md"
    assert recent["route"]["recency"] == {"bias": 2.0, "half_life_days": 90.0} and plain["route"]["recency"] is None
    assert chat["evidence"]["unstructured"][0]["provenance"]["path"] == "benefits/raleigh-county.md"
    assert chat["route"]["recency"]["half_life_days"] == 30


def test_normalised_score_is_one_scale_for_every_fusion_method():
    from livemem.query.fusion import FusionSettings, normalized_score

    rrf = FusionSettings(method="rrf", k=60.0)
    assert normalized_score(2 / 61, rrf, 0.0) == 1.0 and normalized_score(1 / 61, rrf, 0.0) == 0.5
    assert normalized_score(3 / 61, rrf, 0.0) == 1.0  # attention / recency lift past the best: capped
    assert normalized_score(1.5, FusionSettings(method="minmax"), 0.0) == 0.75
    assert normalized_score(1.0, FusionSettings(method="zscore"), 4.0) == 0.25  # no fixed maximum: the query's best
    linear = FusionSettings(method="linear")  # the default: a cosine + 0.5 x BM25 / the list's best
    assert normalized_score(0.6 + 0.5, linear, 1.1) == pytest.approx(1.1 / 1.5)
    assert normalized_score(0.42, linear, 9.0, mode="dense") == 0.42  # dense: the cosine itself
    assert normalized_score(-0.1, linear, 9.0, mode="dense") == 0.0
    assert normalized_score(3.0, linear, 12.0, mode="sparse") == 0.25  # BM25: relative to the query's best


@pytest.mark.parametrize(
    "message",
    ["Old Beckley Soup Kitchen hours", "where is the Old Beckley Soup Kitchen?", "old beckley soup kitchen phone"],
)
def test_a_closed_program_asked_for_by_name_says_it_closed_and_where_it_went(client, message):
    body = client.post("/chat", json={"message": message}).json()
    first = body["answer"].split("\n")[1]  # the line after the heading
    assert "Old Beckley Soup Kitchen closed on 2026-09-30" in first, body["answer"]
    assert "Beckley Family Shelter" in first
    assert "ral-shelter-beckley" in [r["local_resource_id"] for r in body["evidence"]["registry"]]


def test_a_need_near_a_closed_program_is_not_answered_with_its_closing(client):
    body = client.post("/chat", json={"message": "soup kitchen in Beckley"}).json()
    assert "closed on" not in body["answer"]


def test_none_here_comes_first_and_a_program_for_other_counties_residents_is_marked_and_last(client):
    body = client.post("/chat", json={"message": "food pantry in Charleston"}).json()
    lines = body["answer"].split("\n")
    assert lines[1].startswith("No verified food pantry program is listed for Charleston"), body["answer"]
    programs = [p for p in body["route"]["programs"] if p["kind"] == "registry"]
    limited = [i for i, p in enumerate(programs) if p.get("eligible") is False]
    assert limited and all(i > j for i in limited for j, p in enumerate(programs) if p.get("eligible") is not False)
    marked = [line for line in lines if "it may not serve where you asked" in line]
    assert marked and all("County residents" in line or "residents of" in line for line in marked)


def test_a_time_in_the_question_puts_programs_open_then_first(client):
    body = client.post("/chat", json={"message": "Where can I get food on a Tuesday evening in Raleigh County?"}).json()
    registry = [p for p in body["route"]["programs"] if p["kind"] == "registry"]
    assert registry[0]["need"] == "food_pantry" and registry[0]["open_when_asked"] is True, registry
    assert registry[0]["id"] == "ral-pantry-shadyspring"  # Tue 4:00-7:00: the one open on a Tuesday evening
    assert "(Open Tuesday evening.)" in body["answer"]
