"""GeoJSON is served as ``application/geo+json`` (RFC 7946) and reads back with GIS readers (geopandas, shapely)."""

from __future__ import annotations

import io

import geopandas
import pytest
from fastapi.testclient import TestClient
from shapely.geometry import Point, shape
from support.gbim_data import SPATIAL
from support.serving import publish_with_gbim

from serving.app import create_app
from serving.settings import Settings

QUERY = {"query": "help with food assistance and Medicaid", "n_results": 5}


@pytest.fixture(scope="module")
def client(tmp_path_factory, embedder):
    root = tmp_path_factory.mktemp("geojson")
    home = publish_with_gbim(root, embedder, SPATIAL)
    with TestClient(create_app(Settings(index_dir=home.root, warm_up=False), embedder)) as client:
        yield client


def test_geojson_is_geo_json_and_reads_back_with_geopandas(client) -> None:
    plain = client.post("/gis/query", json=QUERY)
    assert plain.headers["content-type"] == "application/json"
    hits = plain.json()["results"]
    for response in (
        client.post("/gis/query", json={**QUERY, "format": "geojson"}),
        client.post("/gis/query?format=geojson", json=QUERY),
    ):
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/geo+json"
        frame = geopandas.read_file(io.BytesIO(response.content))
        assert frame.crs.to_epsg() == 4326  # RFC 7946: WGS 84 longitude, latitude
        assert list(frame["label"]) == [h["label"] for h in hits]
        assert list(frame.geometry) == [Point(h["lon"], h["lat"]) for h in hits]
        for feature in response.json()["features"]:
            assert shape(feature["geometry"]).is_valid


def test_openapi_names_the_geojson_media_type(client) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/gis/query"]["post"]
    assert "application/geo+json" in operation["responses"]["200"]["content"]
