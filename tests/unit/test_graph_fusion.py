"""Vector + graph fusion through /context on the bundled example: relationship questions go to the GBIM graph,
entities the passages name bring their facts, and a short summary sits beside the triples."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from support.context import example_index, make_app

from livemem.answer.graph import relationship_terms
from livemem.gbim import linked_relations


@pytest.fixture(scope="module")
def client(tmp_path_factory, embedder):
    with TestClient(make_app(example_index(tmp_path_factory), embedder)) as c:
        yield c


def context(client: TestClient, message: str) -> dict:
    response = client.post("/context", json={"message": message})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize(
    ("message", "terms"),
    [
        ("What is the relationship between Oak Hill Benefits Hub and the Beckley DHHR Office?",
         ("Oak Hill Benefits Hub", "Beckley DHHR Office")),
        ("How is the Beckley DHHR Office connected to Raleigh County Food Bank Pantry?",
         ("Beckley DHHR Office", "Raleigh County Food Bank Pantry")),
        ("does Mount Hope Food Pantry connect to Fayette County", ("Mount Hope Food Pantry", "Fayette County")),
        ("Is the Ansted Mobile Outreach Area part of wv-benefits?", ("Ansted Mobile Outreach Area", "wv-benefits")),
        ("What is the Oak Hill Benefits Hub part of?", ("Oak Hill Benefits Hub", None)),
        ("Where can I get SNAP in Beckley?", None),
    ],
)  # fmt: skip
def test_relationship_questions_are_recognised(message: str, terms: tuple[str, str | None] | None) -> None:
    assert relationship_terms(message) == terms


def test_a_relationship_question_is_answered_from_the_graph(client) -> None:
    data = context(client, "What is the relationship between Oak Hill Benefits Hub and the Beckley DHHR Office?")
    route = data["route"]
    assert "factual" in route["intents"] and "gbim" in route["sources_queried"]
    relationship = route["graph"]["relationship"]
    assert [[n["label"] for n in side] for side in relationship["resolved"]] == [
        ["Oak Hill Benefits Hub"],
        ["Beckley DHHR Office"],
    ]
    shared = {(c["predicate"], c["object"]) for c in relationship["connections"] if c["kind"] == "shared"}
    assert {("serves_program", "SNAP"), ("serves_program", "Medicaid"), ("part_of", "wv-benefits")} <= shared
    # 23 km apart, run by different organisations: neither near nor operated_by is claimed
    assert not {p for p, _ in shared} & {"near", "operated_by"}
    # both places are evidence, with their position, whatever the similarity search ranked
    assert {"Oak Hill Benefits Hub", "Beckley DHHR Office"} <= {e["label"] for e in data["spatial"]}
    answers = [f for f in data["structured_facts"] if f["resolved_from"] == "question"]
    assert {f["subject_label"] for f in answers} == {"Oak Hill Benefits Hub", "Beckley DHHR Office"}
    summary = data["facts_summary"]
    assert summary.startswith(
        "Oak Hill Benefits Hub and Beckley DHHR Office both offer Medicaid, SNAP, WV WORKS and are part of wv-benefits."
    )
    # then what each of the two is, and nothing about entities the question did not name
    assert "Beckley DHHR Office: located in Raleigh County; serves ZIP 25801;" in summary
    assert "Raleigh County Food Bank Pantry (0.72 km), Beckley Community Clinic" in summary
    assert "Beckley Community Clinic:" not in summary


def test_near_and_through_connections(client) -> None:
    near = context(client, "How is the Beckley DHHR Office connected to Raleigh County Food Bank Pantry?")
    direct = [c for c in near["route"]["graph"]["relationship"]["connections"] if c["kind"] == "direct"]
    assert [(c["from"], c["predicate"], c["to"]) for c in direct] == [
        ("Beckley DHHR Office", "near", "Raleigh County Food Bank Pantry")
    ]
    assert direct[0]["provenance"]["distance_km"] < 1.0
    assert "Beckley DHHR Office is near Raleigh County Food Bank Pantry." in near["facts_summary"]
    assert "Beckley DHHR Office near Raleigh County Food Bank Pantry (entity)" in near["prompt"]["context"]
    # two things that are not places: the entities that link them
    through = context(client, "What is the relationship between SNAP and Fayette County?")
    relationship = through["route"]["graph"]["relationship"]
    assert [n["kind"] for side in relationship["resolved"] for n in side] == ["program", "county"]
    assert {c["via"] for c in relationship["connections"]} == {"Oak Hill Benefits Hub", "Ansted Mobile Outreach Area"}
    assert "SNAP and Fayette County meet at " in through["facts_summary"]
    # a county is the county, not the first entity whose label starts with its name
    county = context(client, "What is the relationship between the Beckley DHHR Office and Raleigh County?")
    connections = county["route"]["graph"]["relationship"]["connections"]
    assert [(c["kind"], c["predicate"], c["to"]) for c in connections] == [("direct", "located_in", "Raleigh County")]


def test_chat_answers_a_relationship_question_from_the_graph(client) -> None:
    response = client.post(
        "/chat", json={"message": "How is the Beckley DHHR Office connected to the Raleigh County Food Bank Pantry?"}
    )
    assert response.status_code == 200, response.text
    data = response.json()
    first = data["answer"].splitlines()[1]
    assert first.startswith("- Beckley DHHR Office is near Raleigh County Food Bank Pantry.")
    cited = {c["n"]: c for c in data["citations"]}
    refs = [int(n) for n in re.findall(r"\[(\d+)\]", first)]
    assert refs and all(cited[n]["kind"] == "fact" for n in refs)


def test_entities_named_in_passages_bring_their_facts(client) -> None:
    data = context(client, "How do I apply for Medicaid in Raleigh County?")
    named = {n["label"]: n["chunk_id"] for n in data["route"]["graph"]["named_in_passages"]}
    assert "Beckley DHHR Office" in named  # the Raleigh guide says "Beckley DHHR office"
    assert named["Beckley DHHR Office"] in {p["chunk_id"] for p in data["unstructured"]}
    facts = {
        (f["predicate"], f["object_label"] or f["object"])
        for f in data["structured_facts"]
        if f["subject_label"] == "Beckley DHHR Office"
    }
    assert {("operated_by", "WV DHHR"), ("located_in", "Raleigh"), ("near", "Raleigh County Food Bank Pantry")} <= facts
    assert "Beckley DHHR Office: " in data["facts_summary"] and "operated by WV DHHR" in data["facts_summary"]
    # the summary and the triples come with the answer's evidence, not instead of it
    assert data["unstructured"] and data["route"]["response_class"] == "answer"


def test_a_question_without_graph_words_or_names_adds_nothing(client) -> None:
    data = context(client, "What does the constitution say about sealed decisions?")
    assert data["route"]["graph"] is None and data["structured_facts"] == [] and data["facts_summary"] is None


def test_near_never_links_entities_of_different_access() -> None:
    def entity(pk: str, access: str, lon: float) -> dict:
        return {"entity_id": pk, "source": "s", "source_table": "t", "source_pk": pk, "access": access,
                "lat": 37.78, "lon": lon, "attributes": {"operator": "WV DHHR", "programs": "SNAP; Medicaid"}}  # fmt: skip

    relations = linked_relations([entity("a", "public", -81.19), entity("b", "internal", -81.18),
                                  entity("c", "public", -81.17)])  # fmt: skip
    near = {(r["subject"], r["object"]) for r in relations if r["predicate"] == "near"}
    assert near == {("a", "c"), ("c", "a")}
    assert {r["object"] for r in relations if r["predicate"] == "serves_program"} == {"SNAP", "Medicaid"}


def test_iterative_refinement_searches_the_text_again_with_what_the_graph_found(client) -> None:
    """Unified retriever: after the first pass, the objects of the connections found (the programs both places
    offer) and the entities resolved become a second text search; passages it finds that the first did not take
    the last places (within top_k), and route.graph.refinement says which terms and passages."""
    message = "What is the relationship between Oak Hill Benefits Hub and the Beckley DHHR Office?"
    data = context(client, message)
    refinement = data["route"]["graph"]["refinement"]
    assert {"SNAP", "Medicaid"} <= set(refinement["terms"])
    assert not {t for t in refinement["terms"] if t.casefold() in message.casefold()}  # only what it did not say
    ids = [p["chunk_id"] for p in data["unstructured"]]
    assert refinement["added"] and set(refinement["added"]) <= set(ids)
    assert ids[-len(refinement["added"]) :] == refinement["added"]  # after the first search's passages
    assert len(ids) <= 6 and len(set(ids)) == len(ids)  # still within top_k (6 by default), each passage once
    added = [p for p in data["unstructured"] if p["chunk_id"] in refinement["added"]]
    assert any(re.search(r"SNAP|Medicaid|WV WORKS", p["content"]) for p in added)
    # a question without graph words or names refines nothing
    assert "refinement" not in (context(client, "How do I reset a forgotten password?")["route"].get("graph") or {})
