"""GeoJSON is served as ``application/geo+json`` (RFC 7946), chosen by ``format`` or by the ``Accept`` header, and
reads back with GIS readers (geopandas, shapely, geojson-pydantic's RFC 7946 models) as docs/gis.md describes."""

from __future__ import annotations

import inspect
import io
import json
import re

import geojson_pydantic
import geopandas
import pyproj
import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator
from pydantic import BaseModel
from shapely.geometry import Point, shape
from support.gbim_data import SPATIAL
from support.serving import publish_with_gbim

import serving.models.gis as gis_models
from serving.app import create_app
from serving.settings import Settings

QUERY = {"query": "help with food assistance and Medicaid", "n_results": 5}
GEOJSON = "application/geo+json"
DOCUMENTED_PROPERTIES = {"label", "description", "dataset", "county", "score"}  # docs/gis.md
GEOD = pyproj.Geod(ellps="WGS84")


@pytest.fixture(scope="module")
def client(tmp_path_factory, embedder):
    root = tmp_path_factory.mktemp("geojson")
    home = publish_with_gbim(root, embedder, SPATIAL)
    with TestClient(create_app(Settings(index_dir=home.root, warm_up=False), embedder)) as client:
        yield client


@pytest.fixture(scope="module")
def hits(client) -> list[dict]:
    plain = client.post("/gis/query", json=QUERY)
    assert plain.status_code == 200 and plain.headers["content-type"] == "application/json"
    return plain.json()["results"]


def geojson_of(response, model: type[BaseModel]) -> dict:
    """The answer, checked as RFC 7946 GeoJSON: the media type, geojson-pydantic's model, WGS 84 ranges."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == GEOJSON
    assert response.headers["vary"] == "Accept"
    body = response.json()
    model.model_validate(body)
    features = body["features"] if body["type"] == "FeatureCollection" else [body]
    for feature in features:
        lon, lat = feature["geometry"]["coordinates"]
        assert -180 <= lon <= 180 and -90 <= lat <= 90
        assert shape(feature["geometry"]).is_valid
    return body


def test_geojson_is_geo_json_and_reads_back_with_geopandas(client, hits) -> None:
    for response in (
        client.post("/gis/query", json={**QUERY, "format": "geojson"}),
        client.post("/gis/query?format=geojson", json=QUERY),
        client.post("/gis/query", json=QUERY, headers={"accept": GEOJSON}),
    ):
        geojson_of(response, geojson_pydantic.FeatureCollection)
        frame = geopandas.read_file(io.BytesIO(response.content))
        assert frame.crs.to_epsg() == 4326  # RFC 7946: WGS 84 longitude, latitude
        assert list(frame["label"]) == [h["label"] for h in hits]
        for point, hit in zip(frame.geometry, hits, strict=True):
            assert point.distance(Point(hit["lon"], hit["lat"])) < 1e-6


def test_features_carry_the_properties_docs_gis_md_names(client, hits) -> None:
    """county (and worldview_id, gbim_entity) are top-level properties a GIS client can filter on; metadata stays."""
    response = client.post("/gis/query?format=geojson", json=QUERY)
    frame = geopandas.read_file(io.BytesIO(response.content))
    assert set(frame.columns) >= DOCUMENTED_PROPERTIES
    assert list(frame["county"]) == [h["metadata"]["county"] for h in hits]
    assert "Fayette" in set(frame["county"])
    assert list(frame["gbim_entity"]) == [h["metadata"]["gbim_entity"] for h in hits]
    for feature, hit in zip(response.json()["features"], hits, strict=True):
        assert feature["id"] == hit["entity_id"]
        assert feature["properties"]["metadata"] == hit["metadata"]
        assert feature["properties"]["score"] == hit["score"]
    near = {**QUERY, "near": {"lat": 37.9723, "lon": -81.1487, "radius_km": 30}}
    located = client.post("/gis/query?format=geojson", json=near)
    frame = geopandas.read_file(io.BytesIO(located.content))
    assert len(frame) and frame["distance_km"].between(0, 30).all()


def test_geojson_coordinates_are_rounded_to_six_decimals(client, hits) -> None:
    """RFC 7946 §11.2: 6 decimals (about 0.1 m); the JSON answer keeps lon/lat as stored."""
    response = client.post("/gis/query?format=geojson", json=QUERY)
    for text in re.findall(r'"coordinates":\[([^\]]*)\]', response.text):
        for number in text.split(","):
            assert len(number.partition(".")[2]) <= 6, number
    assert any(len(repr(h["lon"]).partition(".")[2]) > 6 for h in hits)  # stored finer than that
    for feature, hit in zip(response.json()["features"], hits, strict=True):
        lon, lat = feature["geometry"]["coordinates"]
        _, _, metres = GEOD.inv(lon, lat, hit["lon"], hit["lat"])
        assert metres < 0.1


def test_gis_rag_map_is_rounded_geojson_too(client) -> None:
    """The seed's /gis_rag carries its places as a FeatureCollection inside its JSON answer: rounded the same way."""
    answer = client.post("/gis_rag", json={"message": "food pantry in Fayette County", "county": "Fayette"})
    assert answer.status_code == 200, answer.text
    collection = answer.json()["geojson"]
    geojson_pydantic.FeatureCollection.model_validate(collection)
    assert collection["features"]
    for feature in collection["features"]:
        for number in feature["geometry"]["coordinates"]:
            assert round(number, 6) == number, number


def test_entity_answers_geojson_by_format_or_accept(client, hits) -> None:
    entity_id = hits[0]["entity_id"]
    plain = client.get(f"/entities/{entity_id}")
    assert plain.headers["content-type"] == "application/json" and plain.headers["vary"] == "Accept"
    record = plain.json()
    for response in (
        client.get(f"/entities/{entity_id}?format=geojson"),
        client.get(f"/entities/{entity_id}", headers={"accept": GEOJSON}),
        client.get(f"/entities/{entity_id}", headers={"accept": f"{GEOJSON}, application/json;q=0.5"}),
    ):
        feature = geojson_of(response, geojson_pydantic.Feature)
        assert feature["id"] == entity_id and feature["index_version"] == record["index_version"]
        frame = geopandas.read_file(io.BytesIO(response.content))
        assert frame.crs.to_epsg() == 4326 and len(frame) == 1
        assert frame.loc[0, "label"] == record["label"] and frame.loc[0, "county"] == record["county"]
        assert frame.geometry[0].distance(Point(record["lon"], record["lat"])) < 1e-6
        properties = feature["properties"]
        assert properties["relations"] == record["relations"] and properties["attributes"] == record["attributes"]
        assert {"entity_id", "lon", "lat"}.isdisjoint(properties)
    unknown = client.get("/entities/00000000-0000-4000-8000-000000000000", headers={"accept": GEOJSON})
    assert unknown.status_code == 404 and "no GBIM entity" in unknown.json()["detail"]  # as for JSON


def test_accept_the_route_cannot_satisfy_is_406(client, hits) -> None:
    entity = f"/entities/{hits[0]['entity_id']}"
    for response in (
        client.post("/gis/query", json=QUERY, headers={"accept": "text/csv"}),
        client.get(entity, headers={"accept": "text/html"}),
        client.get(f"{entity}?format=json", headers={"accept": GEOJSON}),  # asked for JSON, accepts only GeoJSON
        client.post("/gis/query", json={**QUERY, "format": "json"}, headers={"accept": GEOJSON}),
    ):
        assert response.status_code == 406, response.text
        assert response.headers["vary"] == "Accept"
        detail = response.json()["detail"]
        assert "Accept header" in detail and "application/json" in detail
    hostile = client.get(entity, headers={"accept": "x/" + "y" * 8000})
    assert hostile.status_code == 406 and len(hostile.content) < 1000  # the header is not echoed whole
    # What clients commonly send still works: */*, a browser's Accept, and the glassbox page (application/json
    # with ?format=geojson: GeoJSON is JSON).
    browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    assert client.get(entity, headers={"accept": browser}).headers["content-type"] == "application/json"
    assert client.post("/gis/query", json=QUERY, headers={"accept": "*/*"}).headers["content-type"].endswith("/json")
    glassbox = client.post("/gis/query?format=geojson", json=QUERY, headers={"accept": "application/json"})
    geojson_of(glassbox, geojson_pydantic.FeatureCollection)


def test_openapi_names_the_geojson_media_type_and_describes_every_property(client) -> None:
    document = client.get("/openapi.json").json()
    for path, method in (("/gis/query", "post"), ("/entities/{entity_id}", "get")):
        responses = document["paths"][path][method]["responses"]
        assert GEOJSON in responses["200"]["content"] and "406" in responses
    names = {
        name
        for name, model in inspect.getmembers(gis_models, inspect.isclass)
        if issubclass(model, BaseModel) and model.__module__ == gis_models.__name__
    }
    schemas = document["components"]["schemas"]
    undescribed = [
        f"{name}.{field}"
        for name in sorted(names & set(schemas))
        for field, spec in schemas[name].get("properties", {}).items()
        if not spec.get("description")
    ]
    assert undescribed == []
    assert {"GisFeatureCollection", "EntityFeature", "EntityResponse", "GisQueryRequest"} <= set(schemas)
    properties = schemas["GisFeatureProperties"]["properties"]
    assert set(properties) >= DOCUMENTED_PROPERTIES, json.dumps(properties)


def test_openapi_examples_are_valid_and_answered(client) -> None:
    """Each example of the GIS models validates against its schema (jsonschema, OpenAPI 3.1's JSON Schema
    2020-12), the FeatureCollection's as RFC 7946 too, and each request example is answered by the app."""
    document = client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    for name in ("GisQueryRequest", "GisFeatureCollection"):
        validator = Draft202012Validator({**document, "$ref": f"#/components/schemas/{name}"})
        examples = schemas[name]["examples"]
        assert examples and all(validator.is_valid(e) for e in examples), name
        assert not validator.is_valid({**examples[0], "type": "Feature", "n_results": 0})  # it does catch one
    geojson_pydantic.FeatureCollection.model_validate(schemas["GisFeatureCollection"]["examples"][0])
    for example in schemas["GisQueryRequest"]["examples"]:
        answer = client.post("/gis/query", json=example)
        assert answer.status_code == 200 and answer.json()["candidates"] > 0, (example, answer.text)
