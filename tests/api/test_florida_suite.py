"""The second bundled deployment (``examples/florida``: a South Florida 211 whose home is Florida) end to end: its
index built once per session, its answer suite asked through POST /chat (every case must pass), and the home read
back from the published version drives the redirect, the heading and the route (docs/home.md)."""

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from support.context import INTERNAL_KEY, florida_index, make_app

from livemem.answer.evaluation import HttpAsker, load_suite, run_suite
from livemem.engine.snapshot import load_snapshot
from livemem.geo.home import Home

PROJECT = Path(__file__).resolve().parents[2]
SUITE = PROJECT / "examples" / "florida" / "eval" / "suite.yaml"


@pytest.fixture(scope="module")
def home(tmp_path_factory, embedder):
    return florida_index(tmp_path_factory)


@pytest.fixture(scope="module")
def client(home, embedder):
    with TestClient(make_app(home, embedder, cache_size=0)) as c:
        yield c


def ask(client: TestClient, message: str, **fields) -> dict:
    response = client.post("/chat", json={"message": message, **fields})
    assert response.status_code == 200, response.text
    return response.json()


def test_the_florida_suite_loads_with_30_questions_or_more() -> None:
    suite = load_suite(SUITE)
    assert len(suite.cases) >= 30
    assert {"zip", "county", "typo", "town_county", "out_of_state"} <= set(suite.categories)


def test_every_case_of_the_florida_suite_passes(client, home) -> None:
    report = run_suite(load_suite(SUITE), HttpAsker(client, {"internal": INTERNAL_KEY}), home.current())
    assert [(c.id, c.failures) for c in report.failed] == []
    assert report.passed == len(report.cases)


def test_the_published_version_records_its_home(home) -> None:
    assert home.manifest(home.current())["home"] == {"states": ["FL"], "name": "South Florida 211"}
    snap = load_snapshot(home, home.current())
    try:
        assert snap.home == Home(("FL",), "South Florida 211")
    finally:
        snap.close()


def test_a_florida_zip_is_home_and_answered_with_the_home_heading(client) -> None:
    body = ask(client, "food pantry near 33125")
    route = body["route"]
    assert route["response_class"] == "answer"
    assert route["home_scoped"] is route["wv_scoped"] is True
    assert route["home"] == {"states": ["FL"], "name": "South Florida 211", "state_names": "Florida"}
    assert route["state"] == "FL" and route["filters"]["county"] == ["Miami-Dade"]
    assert route["wv_reasons"] == ["FL county Miami-Dade", "FL ZIP 33125"]
    assert body["answer"].startswith("From the Florida evidence in South Florida 211:")
    assert "West Virginia" not in body["answer"]


def test_places_outside_the_home_are_redirected_naming_florida(client) -> None:
    atlanta = ask(client, "food bank in Atlanta GA")
    assert atlanta["route"]["response_class"] == "redirect" and atlanta["route"]["state"] == "GA"
    assert atlanta["answer"] == (
        "Atlanta, GA is outside Florida. South Florida 211 covers Florida programs only. For other states, call 211 "
        "or the state's own benefits agency."
    )
    beckley = ask(client, "food pantry in Beckley, WV")
    assert beckley["answer"].startswith("Beckley, WV is outside Florida. South Florida 211 covers Florida")
    assert ask(client, "SNAP office near 30303")["answer"].startswith("ZIP 30303 is outside Florida.")
    assert "place outside Florida" in beckley["route"]["reason"]


def test_a_lower_case_misspelt_town_is_looked_up_locally(client) -> None:
    body = ask(client, "wic ofice in miami beach")
    route = body["route"]
    assert route["filters"]["county"] == ["Miami-Dade"]
    registry = [p for p in route["programs"] if p["kind"] == "registry"]
    assert registry[0]["id"] == "mdc-wic-miami-beach" and registry[0]["in_town"]
    assert all(p["id"].startswith("mdc-") for p in registry)  # never WIC sites in other counties
    distances = [p["distance_km"] for p in registry[1:]]
    assert distances == sorted(distances)  # the rest nearest first


def test_a_conversation_keeps_its_florida_place(client) -> None:
    body = ask(client, "where can I get WIC?", history=["I live in Hialeah"])
    assert body["route"]["filters"]["county"] == ["Miami-Dade"]
    assert body["route"]["conversation"]["carried"]["place"]["from"] == "Hialeah"
    away = ask(client, "what about food stamps?", history=["I'm in Atlanta, GA now"])
    assert away["route"]["response_class"] == "redirect" and "outside Florida" in away["answer"]


def test_the_greeting_names_the_home(client) -> None:
    assert "programs in Florida" in ask(client, "hello")["answer"]


def test_nothing_local_offers_the_nearest_programs_elsewhere_first(client) -> None:
    body = ask(client, "dental clinic in Boca Raton")
    route = body["route"]
    assert route["filters"]["county"] == ["Palm Beach"] and route["response_class"] == "negotiate"
    (offer,) = [o for o in route["negotiation"] if o["kind"] == "elsewhere"]
    # Palm Beach lists no clinic: Coral Springs (Broward, ~20 km) before North Miami (Miami-Dade, ~50 km)
    assert [r["local_resource_id"] for r in offer["alternatives"]] == [
        "bro-clinic-coral-springs",
        "mdc-clinic-north-miami",
    ]
