"""POST /gis/query and GET /entities/{id} on a version built by the chunk step and the GBIM export."""

from __future__ import annotations

import json
from functools import partial

import pyproj
import pytest
from fastapi.testclient import TestClient
from support.gbim_data import LIEAP, OAK_HILL, SOURCE, SPATIAL
from support.serving import API_KEYS, answered_while_trace_file_locked, build_and_publish, make_workspace

from livemem.gbim import entity_id, export_gbim
from livemem.geo.distance import haversine_km
from livemem.schemas import errors_for
from livemem.sources.config import load_sources
from livemem.usage.traces import trace_key
from livemem.version.store import IndexHome
from serving.app import create_app
from serving.settings import Settings

BECKLEY_BBOX = [-81.25, 37.7, -81.1, 37.85]


@pytest.fixture(scope="module")
def served(tmp_path_factory, embedder):
    root = tmp_path_factory.mktemp("gis")
    sources = make_workspace(root)
    sources.write_text(sources.read_text() + SPATIAL, encoding="utf-8")
    home = IndexHome(root / "rag_index")
    build_and_publish(sources, home, embedder)
    settings = Settings(index_dir=home.root, api_keys=API_KEYS, warm_up=False)
    with TestClient(create_app(settings, embedder)) as client:
        # a version without the spatial part says what to run
        missing = client.post("/gis/query", json={"query": "clinic"})
        assert missing.status_code == 503 and "export_gbim" in missing.json()["detail"]
        config = load_sources(sources)
        result = export_gbim(config, home, embedder)
        home.publish(result.version_id, result.base_version, config.retention)
        yield client, home, result.version_id


@pytest.fixture
def client(served) -> TestClient:
    return served[0]


def gis(client: TestClient, **body) -> dict:
    response = client.post("/gis/query", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_query_ranks_entities_by_description(client, served) -> None:
    data = gis(client, query="help paying the heating bill, LIEAP application", n_results=3)
    assert data["index_version"] == served[2]
    assert data["candidates"] == 10
    top = data["results"][0]
    assert top["entity_id"] == LIEAP and top["label"] == "Raleigh County LIEAP Intake Site"
    assert top["dataset"] == "wv_benefits"
    assert top["metadata"] == {"worldview_id": "wv-benefits", "county": "Raleigh", "gbim_entity": "facility"}
    assert top["srid"] == 26917 and top["centroid_x"] > 400_000 and top["centroid_y"] > 4_000_000
    assert top["lon"] == pytest.approx(-81.17, abs=1e-6) and top["lat"] == pytest.approx(37.799, abs=1e-6)
    scores = [r["score"] for r in data["results"]]
    assert scores == sorted(scores, reverse=True) and len(scores) == 3


def test_constraints_apply_before_ranking(client) -> None:
    raleigh = gis(client, query="food", county="raleigh county", n_results=50)
    assert raleigh["candidates"] == 4 and len(raleigh["results"]) == 4
    assert {r["metadata"]["county"] for r in raleigh["results"]} == {"Raleigh"}
    # a bbox around Beckley: every entity inside comes back, however poorly it matches
    boxed = gis(client, query="unrelated words about astronomy", bbox=BECKLEY_BBOX, n_results=50)
    assert boxed["candidates"] == len(boxed["results"]) == 4
    for r in boxed["results"]:
        assert BECKLEY_BBOX[0] <= r["lon"] <= BECKLEY_BBOX[2] and BECKLEY_BBOX[1] <= r["lat"] <= BECKLEY_BBOX[3]
    assert gis(client, query="food", dataset="other")["results"] == []
    both = gis(client, query="food pantry", dataset=["wv_benefits"], county=["Fayette", "Kanawha"], n_results=50)
    assert {r["metadata"]["county"] for r in both["results"]} == {"Fayette", "Kanawha"}


def test_near_is_a_great_circle_radius(client) -> None:
    near = {"lat": 37.9723, "lon": -81.1487, "radius_km": 9.2}  # Oak Hill; Mount Hope is 8.6 km away
    data = gis(client, query="benefits office", near=near, n_results=50)
    labels = {r["label"] for r in data["results"]}
    assert labels == {"Oak Hill Benefits Hub", "Mount Hope Food Pantry"}
    geod = pyproj.Geod(ellps="WGS84")
    everything = gis(client, query="benefits office", n_results=50)["results"]
    for r in everything:
        _, _, metres = geod.inv(-81.1487, 37.9723, r["lon"], r["lat"])
        assert (r["label"] in labels) == (metres < 9_200), r["label"]  # Fayetteville, 9.8 km, is out
    for r in data["results"]:
        expected = float(haversine_km(r["lat"], r["lon"], 37.9723, -81.1487))
        assert r["distance_km"] == pytest.approx(expected) and r["distance_km"] <= 9.2
    wider = gis(client, query="benefits office", near={"lat": 37.9723, "lon": -81.1487, "radius_km": 30}, n_results=50)
    assert wider["candidates"] > data["candidates"]


def test_geojson_format(client) -> None:
    body = {"query": "clinic", "n_results": 2, "county": "Fayette", "format": "geojson"}
    data = gis(client, **body)
    assert data["type"] == "FeatureCollection" and len(data["features"]) == 2
    feature = data["features"][0]
    assert feature["type"] == "Feature" and feature["geometry"]["type"] == "Point"
    lon, lat = feature["geometry"]["coordinates"]
    assert -81.5 < lon < -80.9 and 37.8 < lat < 38.3
    assert feature["properties"]["metadata"]["county"] == "Fayette" and "score" in feature["properties"]
    as_param = client.post("/gis/query?format=geojson", json={**body, "format": "json"}).json()
    assert as_param["type"] == "FeatureCollection"


def test_entity_with_relations(client, served) -> None:
    response = client.get(f"/entities/{OAK_HILL}")
    assert response.status_code == 200
    data = response.json()
    relations = {(r["predicate"], r["object"]) for r in data.pop("relations")}
    assert {("part_of", "wv-benefits"), ("located_in", "Fayette"), ("serves_zip", "25901")} <= relations
    # where the data carries them (livemem.gbim.linked_relations)
    assert {("operated_by", "New River Community Action"), ("serves_program", "SNAP")} <= relations
    assert data.pop("index_version") == served[2]
    assert errors_for("gbim_entity", data) == []
    assert data["label"] == "Oak Hill Benefits Hub" and data["attributes"]["phone"] == "555-0101"
    unknown = client.get("/entities/00000000-0000-4000-8000-000000000000")
    assert unknown.status_code == 404 and "no GBIM entity" in unknown.json()["detail"]
    assert client.get("/entities/not-a-uuid").status_code == 422


@pytest.mark.parametrize(
    "body, message",
    [
        ({"query": "x", "bbox": [-81, 37, -80]}, "bbox needs 4 numbers"),
        ({"query": "x", "bbox": [-80, 37, -81, 38]}, "min <= max"),
        ({"query": "x", "bbox": [-200, 37, -81, 38]}, "longitudes must lie in"),
        ({"query": "x", "near": {"lat": 95, "lon": -81, "radius_km": 5}}, "body.near.lat"),
        ({"query": "x", "near": {"lat": 38, "lon": -81, "radius_km": 0}}, "body.near.radius_km"),
        ({"query": "x", "near": {"lat": 38, "lon": -81}}, "body.near.radius_km: Field required"),
        ({"query": "  "}, "query must contain some text"),
        ({"query": "x", "n_results": 0}, "body.n_results"),
        ({"query": "x", "format": "kml"}, "body.format"),
        ({"query": "x", "radius": 3}, "body.radius: Extra inputs are not permitted"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(client, body, message) -> None:
    response = client.post("/gis/query", json=body)
    assert response.status_code == 422, response.text
    assert message in response.json()["message"]


def test_queries_are_traced(client, served) -> None:
    data = gis(client, query="Medicaid enrollment help", n_results=2)
    client.app.state.serving.traces.flush()  # queued (livemem.usage.traces.submit): on disk now
    home: IndexHome = served[1]
    events = [json.loads(line) for f in sorted(home.traces.glob("*.jsonl")) for line in f.read_text().splitlines()]
    mine = [e for e in events if e["trace_id"] == trace_key(data["trace_id"])]
    assert [e["chunk_id"] for e in mine] == [r["entity_id"] for r in data["results"]]
    assert all(e["context"]["kind"] == "gis" and errors_for("trace", e) == [] for e in mine)


def test_answers_do_not_wait_for_the_trace_file(client) -> None:
    """A trace file locked elsewhere (a stuck writer, a slow disk) delays the trace, not the answer: /gis/query and
    /query answer while it is locked, and their events are written once it is free, nothing lost; a /metrics
    scrape, which flushes the queue first, answers too."""
    traces = client.app.state.serving.traces
    for route, body in (("/gis/query", {"query": "benefits hub"}), ("/query", {"query": "Medicaid enrollment"})):
        response, held = answered_while_trace_file_locked([traces], partial(client.post, route, json=body))
        assert response.status_code == 200, response.text
        trace_id = response.json()["trace_id"]
        [(path, text)] = held.items()
        assert trace_id not in text
        assert traces.flush()
        written = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        assert any(e["trace_id"] == trace_key(trace_id) for e in written), route
    scrape, _ = answered_while_trace_file_locked([traces], partial(client.get, "/metrics"))  # flushes, bounded
    assert scrape.status_code == 200 and "livemem_trace_events_total" in scrape.text


def test_facts_match_triple_patterns(served) -> None:
    client = served[0]
    data = client.get("/facts", params={"subject": OAK_HILL}).json()
    predicates = {f["predicate"] for f in data["facts"]}
    assert {"part_of", "located_in"} <= predicates
    assert all(f["subject"] == OAK_HILL and f["provenance"] for f in data["facts"])
    fayette = client.get("/facts", params={"predicate": "located_in", "object": "fayette county"}).json()
    assert fayette["total"] >= 1 and OAK_HILL in {f["subject"] for f in fayette["facts"]}
    assert all(f["object"].lower().startswith("fayette") for f in fayette["facts"])
    assert client.get("/facts", params={"predicate": "located_in", "limit": 1}).json()["facts"].__len__() == 1
    assert client.get("/facts", params={"limit": 0}).status_code == 422


def test_every_negotiated_answer_varies_on_accept(served) -> None:
    """/facts answers JSON or RDF by Accept: every answer (JSON too, and the 406) says ``Vary: Accept``, so a shared
    cache never hands the JSON to an RDF client (the JSON answer had no Vary before issue 49)."""
    client = served[0]
    for accept in ("application/json", "text/turtle", None):
        answer = client.get("/facts", params={"subject": OAK_HILL}, headers={"Accept": accept} if accept else {})
        assert answer.status_code == 200 and answer.headers["Vary"] == "Accept", (accept, answer.headers)
    refused = client.get("/facts", params={"subject": OAK_HILL}, headers={"Accept": "image/png"})
    assert refused.status_code == 406 and refused.headers["Vary"] == "Accept"
    entity = client.get(f"/entities/{OAK_HILL}")
    assert entity.headers["Vary"] == "Accept"


def test_facts_find_entities_by_name(served) -> None:
    client = served[0]
    data = client.get("/facts", params={"name": "beckley dhhr office"}).json()
    assert data["matched"] == [{"entity_id": entity_id(SOURCE, "wvb-002"), "label": "Beckley DHHR Office"}]
    assert data["total"] == len(data["facts"]) and {f["subject_label"] for f in data["facts"]} == {
        "Beckley DHHR Office"
    }
    facts = {(f["predicate"], f["object_label"] or f["object"]) for f in data["facts"]}
    assert {("operated_by", "WV DHHR"), ("serves_program", "WV WORKS"), ("located_in", "Raleigh")} <= facts
    # each with its great-circle distance; Oak Hill is 23 km away, not near
    near = {f["object_label"]: f["provenance"]["distance_km"] for f in data["facts"] if f["predicate"] == "near"}
    assert min(near, key=near.get) == "Raleigh County Food Bank Pantry" and max(near.values()) <= 10
    assert "Oak Hill Benefits Hub" not in near
    # a word finds every label holding it, best match first; nothing matching is an empty answer, not an error
    beckley = client.get("/facts", params={"name": "Beckley", "predicate": "located_in"}).json()
    assert [m["label"] for m in beckley["matched"]] == ["Beckley Community Clinic", "Beckley DHHR Office"]
    none = client.get("/facts", params={"name": "Atlantis ferry terminal"}).json()
    assert none["matched"] == [] and none["facts"] == [] and none["total"] == 0
    operated = client.get("/facts", params={"predicate": "operated_by", "object": "wv dhhr"}).json()
    assert {f["subject_label"] for f in operated["facts"]} == {
        "Beckley DHHR Office", "Raleigh County LIEAP Intake Site", "Kanawha County DHHR Office"
    }  # fmt: skip
    assert client.get("/facts", params={"name": ""}).status_code == 422


def test_sparql_select_runs_read_only_with_limits(served) -> None:
    client = served[0]
    query = (
        "SELECT ?label WHERE { ?e gbim:located_in ?c . ?c rdfs:label ?county . ?e rdfs:label ?label . "
        'FILTER(CONTAINS(LCASE(STR(?county)), "raleigh")) } ORDER BY ?label'
    )
    data = client.post("/facts/sparql", json={"query": query}).json()
    assert data["variables"] == ["label"] and data["rows"]
    assert any("Beckley" in r["label"] for r in data["rows"])
    limited = client.post("/facts/sparql", json={"query": "SELECT ?s ?p ?o WHERE { ?s ?p ?o }", "limit": 2}).json()
    assert len(limited["rows"]) == 2 and limited["truncated"] is True
    ask = client.post("/facts/sparql", json={"query": "ASK { ?e gbim:serves_zip ?z }"}).json()
    assert ask["boolean"] is True
    update = client.post("/facts/sparql", json={"query": "INSERT DATA { <urn:a> <urn:b> <urn:c> }"})
    assert update.status_code == 400
    assert client.post("/facts/sparql", json={"query": "SELECT WHERE {"}).status_code == 400
