"""The seed design's requests byte for byte (POST /chat/sync, /chat/light, /gis_rag) and `role` as a persona:
it chooses collections and framing, and narrows the key's access, never widens it."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from support.context import INTERNAL_KEY, example_index, make_app

SEED_BODY = b'{"message":"Oak Hill WV county benefits","county":"Fayette","role":"community","profile":"auto"}'
JSON = {"content-type": "application/json"}
INTERNAL = {**JSON, "X-API-Key": INTERNAL_KEY}


@pytest.fixture(scope="module")
def client(tmp_path_factory, embedder):
    with TestClient(make_app(example_index(tmp_path_factory), embedder)) as c:
        yield c


def test_seed_requests_as_written(client):
    sync = client.post("/chat/sync", content=SEED_BODY, headers=JSON)
    assert sync.status_code == 200, sync.text
    body = sync.json()
    assert body["route"]["persona"] == "community" and body["route"]["filters"]["county"] == ["Fayette"]
    assert body["citations"] and "Fayette" in body["answer"]
    assert body["answer"].startswith("Here is what Living Memory has for you:")  # the community framing
    collections = body["route"]["eligibility"]["collections"]
    assert "wv_benefits" in collections and "code" not in collections and "governance" not in collections

    light = client.post("/chat/light", content=SEED_BODY, headers=JSON)
    assert light.status_code == 200
    assert set(light.json()) == {
        "answer",
        "citations",
        "backend",
        "model",
        "persona",
        "index_version",
        "trace_id",
        "answered_from",
    }  # answered_from: null unless the request named a version (docs/versions.md)
    assert light.json()["answer"] == body["answer"] and light.json()["persona"] == "community"

    gis = client.post("/gis_rag", content=SEED_BODY, headers=JSON)
    assert gis.status_code == 200
    features = gis.json()["geojson"]["features"]
    assert gis.json()["geojson"]["type"] == "FeatureCollection" and features
    for feature in features:
        lon, lat = feature["geometry"]["coordinates"]
        assert -82.65 <= lon <= -77.7 and 37.2 <= lat <= 40.64  # West Virginia, EPSG:4326
        assert feature["properties"]["county"] == "Fayette"

    wrong = client.post("/chat/sync", json={"message": "SNAP", "profile": "detailed"})
    assert wrong.status_code == 422 and "auto" in wrong.json()["message"]
    explicit = client.post("/chat/light", json={"message": "SNAP office", "profile": {"county": "Raleigh"}})
    assert explicit.status_code == 200


def test_persona_narrows_and_never_widens(client):
    ask = {"message": "SNAP caseworker escalation", "county": "Fayette"}
    own = client.post("/chat/sync", json=ask, headers=INTERNAL).json()["route"]["eligibility"]["collections"]
    assert "internal_playbooks" in own
    # An internal key asking as a community member: public collections only, and not the cached internal answer.
    community = client.post("/chat/sync", json={**ask, "role": "community"}, headers=INTERNAL).json()
    assert "internal_playbooks" not in community["route"]["eligibility"]["collections"]
    assert all(p["collection"] != "internal_playbooks" for p in community["evidence"]["unstructured"])
    engineer = client.post("/chat/sync", json={**ask, "role": "Governance Engineer"}, headers=INTERNAL).json()
    assert engineer["route"]["persona"] == "governance_engineer"
    assert set(engineer["route"]["eligibility"]["collections"]) == {"governance", "internal_playbooks", "code"}
    as_public = client.post("/chat/sync", json={**ask, "role": "public"}, headers=INTERNAL).json()
    assert "internal_playbooks" not in as_public["route"]["eligibility"]["collections"]

    # Without a key (public role): a persona needing internal access is refused, saying why.
    for route in ("/chat/sync", "/chat/light", "/gis_rag", "/chat", "/context"):
        refused = client.post(route, json={**ask, "role": "governance engineer"})
        assert refused.status_code == 403, route
        assert "needs access internal" in refused.json()["detail"]
    assert client.post("/context", json={"message": "SNAP", "role": "internal"}).status_code == 403
    unknown = client.post("/chat/sync", json={**ask, "role": "astronaut"})
    assert unknown.status_code == 422 and "community" in unknown.json()["detail"]
    researcher = client.post("/chat/sync", json={**ask, "role": "researcher"})
    assert researcher.status_code == 200 and "code" in researcher.json()["route"]["eligibility"]["collections"]


def test_persona_frames_the_prompt(client):
    ask = {"message": "Medicaid renewal documents in Raleigh County"}
    framed = client.post("/context", json={**ask, "role": "researcher"}).json()["prompt"]["system"]
    plain = client.post("/context", json=ask).json()["prompt"]["system"]
    assert "The reader is a researcher" in framed and "The reader is" not in plain


@pytest.mark.parametrize("message", ["\r", "   ", "\n\t"])
def test_a_blank_seed_message_is_a_422_like_on_chat(client, message):
    """A body /chat refuses is refused by the seed's routes too, as a 422 naming the field (the API fuzzer found
    `{"message": "\\r"}` answered with a 500 on /chat/light: the seed body accepted it, /chat's did not)."""
    for route in ("/chat/sync", "/chat/light", "/gis_rag", "/chat"):
        refused = client.post(route, json={"message": message})
        assert refused.status_code == 422, (route, refused.text)
        assert "message must contain some text" in refused.text


def test_the_seed_parameters_as_the_seed_sends_them(client):
    """``n_results`` (the seed's name for top_k), ``recency_bias``, ``min_score`` and ``max_words`` are accepted on
    every seed route, as /chat accepts them, and do what they do there."""
    body = {"message": "food pantry near Beckley WV", "n_results": 3, "recency_bias": 0.5, "min_score": 0.05}
    for route in ("/chat/sync", "/chat/light", "/gis_rag"):
        response = client.post(route, json=body)
        assert response.status_code == 200, (route, response.text)
    full = client.post("/gis_rag", json={**body, "max_words": 40}).json()
    assert len(full["evidence"]["unstructured"]) <= 3
    assert full["route"]["recency"]["bias"] == 0.5 and full["route"]["min_score"] == 0.05
    assert len(full["answer"].split()) <= 40
    differ = client.post("/chat/sync", json={**body, "top_k": 5})
    assert differ.status_code == 422 and "n_results" in differ.text


def test_gis_query_takes_min_score_and_recency_bias_and_names_a_misspelt_county(client):
    base = {"query": "food pantry", "n_results": 5}
    plain = client.post("/gis/query", json=base, headers={"Accept": "application/json"}).json()
    assert plain["results"] and plain["notes"] == []
    floor = sorted(h["score"] for h in plain["results"])[len(plain["results"]) // 2]
    kept = client.post("/gis/query", json={**base, "min_score": floor}).json()
    assert kept["results"] and all(h["score"] >= floor for h in kept["results"])
    biased = client.post("/gis/query", json={**base, "recency_bias": 1.0}).json()
    assert [h["entity_id"] for h in biased["results"]] == [h["entity_id"] for h in plain["results"]]
    assert biased["notes"] and "recency_bias" in biased["notes"][0]
    typo = client.post("/gis/query", json={**base, "county": "Fayete"})
    assert typo.status_code == 422 and "did you mean Fayette" in typo.text
    narnia = client.post("/gis/query", json={**base, "county": "Narnia"})
    assert narnia.status_code == 422 and "not a county" in narnia.text
    real = client.post("/gis/query", json={**base, "county": "Fayette County"})
    assert real.status_code == 200 and all(h["metadata"]["county"] == "Fayette" for h in real.json()["results"])
