"""What people receive about their place (issue 32), through /chat on the bundled example: out-of-state look-alikes
are redirected, towns land in their county, the right program comes first, yes/no place questions are answered,
and a registry row and a map place about one program are linked instead of given twice."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from support.context import example_index, make_app


@pytest.fixture(scope="module")
def client(tmp_path_factory, embedder):
    with TestClient(make_app(example_index(tmp_path_factory), embedder)) as c:
        yield c


def chat(client, message: str, **extra) -> dict:
    r = client.post("/chat", json={"message": message, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def cited(body: dict) -> list[str]:
    return [c.get("id") or c.get("chunk_id") or "" for c in body["citations"]]


@pytest.mark.parametrize(
    ("message", "state", "place"),
    [
        ("SNAP office in Raleigh, North Carolina", "NC", "Raleigh, NC"),
        ("WIC in Fayette County, Pennsylvania", "PA", "Fayette County, PA"),
        ("heating bill help in Fayette County, Ohio", "OH", "Fayette County, OH"),
        ("Is there WIC in Raleigh, NC?", "NC", "Raleigh, NC"),
    ],
)
def test_out_of_state_look_alikes_are_redirected_and_say_why(client, message, state, place):
    body = chat(client, message)
    route = body["route"]
    assert route["response_class"] == "redirect"
    assert route["wv_reasons"] == [] and route["state"] == state
    assert place in route["reason"]
    assert not body["evidence"]["registry"]  # never the Raleigh County, WV office
    assert "Raleigh County DHHR" not in body["answer"]


def test_a_west_virginia_role_does_not_make_another_state_west_virginia(tmp_path_factory, embedder):
    app = make_app(example_index(tmp_path_factory), embedder, wv_roles=["public"])
    with TestClient(app) as c:
        body = chat(c, "SNAP office in Raleigh, North Carolina")
    assert body["route"]["response_class"] == "redirect"


def test_a_town_lands_in_its_county_and_its_own_pantry_comes_first(client):
    body = chat(client, "Is there a food pantry in Mount Hope?")
    route = body["route"]
    assert route["filters"]["county"] == ["Fayette"]  # not Raleigh, where ZIP 25880 is filed
    first = route["programs"][0]
    assert (first["kind"], first["name"], first["in_town"]) == ("place", "Mount Hope Food Pantry", True)
    assert body["answer"].split("\n")[1].startswith("- Yes: Mount Hope Food Pantry")  # a yes/no question: yes first
    assert "Sophia Area Food Pantry" not in body["answer"]


def test_yes_no_place_questions_are_answered_from_the_graph(client):
    no = chat(client, "Is Mount Hope Food Pantry part of Raleigh County?")
    assert no["route"]["graph"]["relationship"]["verdict"]["answer"] == "no"
    assert "No — Mount Hope Food Pantry is in Fayette County, not Raleigh County." in no["answer"]
    assert no["route"]["response_class"] == "answer"  # no "which county do you mean?"
    assert not no["evidence"]["registry"]  # no list of Raleigh pantries
    yes = chat(client, "Is Oak Hill in Fayette County?")
    assert "Yes — Oak Hill is in Fayette County." in yes["answer"]
    town = chat(client, "Is Mount Hope in Raleigh County?")
    assert "No — Mount Hope is in Fayette County, not Raleigh County." in town["answer"]


def test_yes_no_questions_about_a_registry_program(client):
    closed = chat(client, "Is the Old Beckley Soup Kitchen still open?")
    assert closed["answer"].split("\n")[1].startswith("- No — Old Beckley Soup Kitchen closed on 2026-09-30.")
    assert "Beckley Family Shelter" in closed["answer"]
    serves = chat(client, "Does the Fayetteville Community Food Pantry serve Oak Hill?")
    assert "Yes — Fayetteville Community Food Pantry serves Oak Hill" in serves["answer"]
    zip_no = chat(client, "Does the Sophia Area Food Pantry serve ZIP 25901?")
    assert "No — Sophia Area Food Pantry does not list ZIP 25901" in zip_no["answer"]


def test_programs_are_chosen_by_need(client):
    body = chat(client, "Oak Hill WV county benefits")
    types = [r["resource_type"] for r in body["evidence"]["registry"]]
    assert types[:4] == ["snap", "medicaid", "wic", "utility_assistance"]
    clinics = chat(client, "clinics near Oak Hill")
    assert clinics["route"]["filters"]["resource_type"] == ["healthcare"]
    assert clinics["route"]["programs"][0]["id"] == "fay-clinic-oakhill"
    stamps = chat(client, "where do I apply for food stamps in Beckley")
    assert stamps["route"]["programs"][0]["id"] == "ral-dhhr-snap"


def test_a_registry_row_and_a_map_place_about_one_program_are_one_answer(client):
    body = chat(client, "heating help in Raleigh County")
    (link,) = [x for x in body["route"]["links"] if x["local_resource_id"] == "ral-lieap-beckley"]
    assert {c["field"] for c in link["conflicts"]} == {"address", "phone"}
    place = next(e for e in body["evidence"]["spatial"] if e["entity_id"] in link["places"])
    assert place["same_as"] == "ral-lieap-beckley"
    row = next(r for r in body["evidence"]["registry"] if r["local_resource_id"] == "ral-lieap-beckley")
    assert row["conflicts"] == link["conflicts"]
    assert "200 Prince Street" in body["answer"]
    assert "1000 Stanaford Road, Beckley):" not in body["answer"]  # the map place is not a second answer


def test_a_zip_spanning_counties_and_a_zip_that_does_not_exist(client):
    spans = chat(client, "Is there a food pantry near me?", zip="25880")
    assert spans["route"]["filters"]["county"] == ["Fayette", "Raleigh"]
    assert spans["route"]["response_class"] != "negotiate"  # one place, not two counties to choose from
    missing = chat(client, "food pantry in ZIP 99999")
    assert missing["route"]["response_class"] == "clarify"
    assert "99999" in missing["route"]["reason"]


def test_a_misspelt_county_is_corrected_and_the_route_says_so(client):
    body = chat(client, "food pantry in Fayete County")
    assert body["route"]["filters"]["county"] == ["Fayette"]
    assert {"field": "place", "value": "Fayette County", "from": "corrected 'Fayete'"} in body["route"]["self_query"]


def test_a_pdf_passage_is_cited_with_its_page(client):
    message = "Emergency LIEAP when my heat is shut off in Fayette County, less than a week of fuel"
    body = client.post("/context", json={"message": message}).json()
    flyer = [p for p in body["unstructured"] if p["provenance"]["path"].endswith(".pdf")]
    assert flyer and all(p["page"] >= 1 for p in flyer)
    pages = {p["chunk_id"]: p["page"] for p in flyer}
    cited = [c for c in body["citations"] if c["kind"] == "chunk" and c["id"] in pages]
    assert cited and all(c["page"] == pages[c["id"]] for c in cited)  # the prompt's reference says the page
    assert f"winter-heating-flyer.pdf page {cited[0]['page']}" in body["prompt"]["context"]
