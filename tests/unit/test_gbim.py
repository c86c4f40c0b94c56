"""GBIM entities from spatial features: reprojection accuracy, centroids, counties, repair/quarantine, relations."""

from __future__ import annotations

import json
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pyproj
import pytest
import shapely
from rdflib import Graph, URIRef

from livemem.errors import ConfigError
from livemem.gbim import (
    GBIM_IRI,
    CountyBoundaries,
    SpatialConfig,
    SpatialSource,
    county_of_points,
    entity_id,
    entity_record,
    features_to_entities,
    load_spatial,
    node_iri,
    rdf_graph,
    read_counties,
    read_features,
    relations_for,
    zip_codes,
)
from livemem.geo.distance import haversine_km
from livemem.schemas import errors_for
from livemem.sources.config import load_sources

PROJECT = Path(__file__).resolve().parents[2]
GEO = PROJECT.parent / "shared" / "data" / "geo"
EXAMPLE = PROJECT / "examples" / "spatial" / "wv_benefits_facilities.geojson"
needs_shared = pytest.mark.skipif(not GEO.is_dir(), reason="../shared/data/geo is not beside the project")
WV_REGION = "region: {bbox: [-82.65, 37.2, -77.7, 40.64], tolerance_km: 25}"


def source(**overrides) -> SpatialSource:
    values = dict(
        name="facilities", dataset="wv_benefits", worldview_id="wv", gbim_entity="facility", id_field="facility_id",
        crs="EPSG:26917", collection="gis_wv_benefits", path=EXAMPLE, label_field="name",
        description_field="description", county_field="county", zip_field="zip",
    )  # fmt: skip
    values.update(overrides)
    return SpatialSource(**values)


@pytest.fixture(scope="module")
def counties():
    frame, _ = read_counties(CountyBoundaries(GEO / "wv_counties.geojson", "NAME"))
    return frame


def spatial_config(tmp_path: Path, body: str) -> SpatialConfig | None:
    path = tmp_path / "sources.yaml"
    path.write_text(f"sources:\n  - {{name: docs, repo: ., collection: docs}}\n{body}", encoding="utf-8")
    return load_spatial(load_sources(path))


# --- reprojection ---------------------------------------------------------------------------------------------
@needs_shared
def test_reprojection_reproduces_the_published_utm17n_pairs() -> None:
    points = pd.read_csv(GEO / "utm17n_points.csv")
    assert len(points) >= 15
    forward = pyproj.Transformer.from_crs("EPSG:4269", "EPSG:26917", always_xy=True)
    inverse = pyproj.Transformer.from_crs("EPSG:26917", "EPSG:4326", always_xy=True)
    easting, northing = forward.transform(points["lon"].to_numpy(), points["lat"].to_numpy())
    assert np.max(np.abs(easting - points["easting"])) < 0.001  # within 1 mm
    assert np.max(np.abs(northing - points["northing"])) < 0.001
    inverse_rows = points.dropna(subset=["inverse_lat"])
    lon, lat = inverse.transform(inverse_rows["easting"].to_numpy(), inverse_rows["northing"].to_numpy())
    assert np.max(np.abs(lat - inverse_rows["inverse_lat"])) < 1e-8
    assert np.max(np.abs(lon - inverse_rows["inverse_lon"])) < 1e-8
    # the export's own path: a point feature in EPSG:26917 becomes the published lon/lat
    wv = points[points["in_wv_county"].notna()]
    frame = gpd.GeoDataFrame(
        {"facility_id": wv["point_id"], "name": "p", "description": "d", "county": None, "zip": None},
        geometry=gpd.points_from_xy(wv["easting"], wv["northing"]),
        crs="EPSG:26917",
    )
    entities, _ = features_to_entities(source(), frame, SpatialConfig(()))
    for entity, (_, row) in zip(entities, wv.iterrows(), strict=True):
        assert entity["srid"] == 26917
        assert entity["centroid_x"] == pytest.approx(row["easting"], abs=1e-6)
        assert entity["lat"] == pytest.approx(row["lat"], abs=1e-7)
        assert entity["lon"] == pytest.approx(row["lon"], abs=1e-7)


@needs_shared
def test_county_polygon_vertices_round_trip_within_1e9_degrees(counties) -> None:
    coords = shapely.get_coordinates(counties.geometry.to_numpy())
    to_utm = pyproj.Transformer.from_crs("EPSG:4326", "EPSG:26917", always_xy=True)
    back = pyproj.Transformer.from_crs("EPSG:26917", "EPSG:4326", always_xy=True)
    lon, lat = back.transform(*to_utm.transform(coords[:, 0], coords[:, 1]))
    assert np.max(np.abs(lon - coords[:, 0])) < 1e-9
    assert np.max(np.abs(lat - coords[:, 1])) < 1e-9


def test_a_source_in_another_crs_is_projected_before_its_centroid_is_taken() -> None:
    square = shapely.box(-81.16, 37.96, -81.14, 37.98)  # Oak Hill, in degrees
    frame = gpd.GeoDataFrame(
        {"facility_id": ["a"], "name": ["n"], "description": ["d"], "county": [None], "zip": [None]},
        geometry=[square],
        crs="EPSG:4326",
    )
    [entity], _ = features_to_entities(source(crs="EPSG:4326"), frame, SpatialConfig(()))
    expected = gpd.GeoSeries([square], crs="EPSG:4326").to_crs("EPSG:26917").centroid.iloc[0]
    assert (entity["centroid_x"], entity["centroid_y"]) == pytest.approx((expected.x, expected.y), abs=1e-6)
    assert entity["srid"] == 26917
    assert entity["lon"] == pytest.approx(-81.15, abs=1e-4) and entity["lat"] == pytest.approx(37.97, abs=1e-4)


# --- the bundled example: centroids, repair, quarantine --------------------------------------------------------
def test_bundled_example_becomes_schema_valid_entities() -> None:
    frame, content_hash = read_features(source())
    assert frame.crs.to_epsg() == 26917 and len(content_hash) == 64
    entities, quarantined = features_to_entities(source(), frame, SpatialConfig(()))
    assert [(q.source_pk, q.reason) for q in quarantined] == [("wvb-011", "empty geometry (Polygon EMPTY)")]
    by_pk = {e["source_pk"]: e for e in entities}
    assert len(by_pk) == 10
    for entity in entities:
        assert errors_for("gbim_entity", entity_record(entity)) == []
        assert entity["entity_id"] == entity_id("facilities", entity["source_pk"])
    hub = by_pk["wvb-001"]  # a 40 m square: its centroid is its centre
    polygon = frame.loc[frame["facility_id"] == "wvb-001"].geometry.iloc[0]
    assert (hub["centroid_x"], hub["centroid_y"]) == pytest.approx((polygon.centroid.x, polygon.centroid.y))
    assert hub["lon"] == pytest.approx(-81.1487, abs=1e-6) and hub["lat"] == pytest.approx(37.9723, abs=1e-6)
    assert hub["county"] == "Fayette" and hub["county_source"] == "attribute"
    beckley = by_pk["wvb-002"]
    assert beckley["label"] == "Beckley DHHR Office" and beckley["county"] == "Raleigh"
    assert beckley["attributes"]["phone"] == "555-0102"
    # the self-intersecting bow tie is repaired (two triangles), its centroid is the crossing point
    bowtie = by_pk["wvb-010"]
    assert bowtie["flags"]["geometry_repaired"] is True and bowtie["geometry_type"] == "MultiPolygon"
    raw = frame.loc[frame["facility_id"] == "wvb-010"].geometry.iloc[0]
    assert not raw.is_valid
    crossing = shapely.get_coordinates(raw)[:4].mean(axis=0)
    assert (bowtie["centroid_x"], bowtie["centroid_y"]) == pytest.approx(tuple(crossing), abs=1e-6)
    assert not any(e["flags"]["geometry_repaired"] for e in entities if e is not bowtie)


def test_null_duplicate_and_unrepairable_features_are_quarantined_with_reasons() -> None:
    frame = gpd.GeoDataFrame(
        {
            "facility_id": ["a", "a", None, "b", "c"],
            "name": ["A", "A again", "no id", "B", "C"],
            "description": ["d"] * 5,
        },
        geometry=[
            shapely.Point(480000, 4200000),
            shapely.Point(480001, 4200001),
            shapely.Point(1, 1),
            None,
            shapely.Point(480002, 4200002),
        ],
        crs="EPSG:26917",
    )
    entities, quarantined = features_to_entities(source(county_field=None, zip_field=None), frame, SpatialConfig(()))
    assert [e["source_pk"] for e in entities] == ["a", "c"]
    reasons = {(q.source_pk, q.reason) for q in quarantined}
    assert ("a", "duplicate id 'a' (the first feature is kept)") in reasons
    assert (None, "feature 2: no value in id field 'facility_id'") in reasons
    assert ("b", "null geometry") in reasons


# --- counties ---------------------------------------------------------------------------------------------------
@needs_shared
@pytest.mark.parametrize("table", ["wv_hospitals.csv", "wv_airports.csv"])
def test_point_in_polygon_finds_each_recorded_county(counties, table: str) -> None:
    rows = pd.read_csv(GEO / table)
    found = county_of_points(rows["lon"].to_numpy(), rows["lat"].to_numpy(), counties)
    assert found == rows["county_pip"].tolist()
    assert len(set(found)) > 10


@needs_shared
def test_county_is_assigned_by_polygon_when_missing_and_flagged_when_it_disagrees(counties) -> None:
    hospitals = pd.read_csv(GEO / "wv_hospitals.csv").head(6)
    to_utm = pyproj.Transformer.from_crs("EPSG:4326", "EPSG:26917", always_xy=True)
    x, y = to_utm.transform(hospitals["lon"].to_numpy(), hospitals["lat"].to_numpy())
    recorded = [None, "Harrison", "Kanawha County", None, "Mason", "marshall"]  # Cabell's says Kanawha: wrong
    frame = gpd.GeoDataFrame(
        {"facility_id": hospitals["provider_id"].astype(str), "name": hospitals["name"], "description": "hospital",
         "county": recorded, "zip": hospitals["zip"]},
        geometry=gpd.points_from_xy(x, y), crs="EPSG:26917",
    )  # fmt: skip
    entities, _ = features_to_entities(source(), frame, SpatialConfig(()), counties)
    got = [(e["county"], e["county_source"], e["county_spatial"], e["flags"]["county_disagreement"]) for e in entities]
    assert got == [
        ("Greenbrier", "point_in_polygon", "Greenbrier", False),
        ("Harrison", "attribute", "Harrison", False),
        ("Kanawha", "attribute", "Cabell", True),
        ("Berkeley", "point_in_polygon", "Berkeley", False),
        ("Mason", "attribute", "Mason", False),
        ("marshall", "attribute", "Marshall", False),  # same county, other spelling
    ]


@needs_shared
def test_bundled_example_against_real_county_polygons(counties) -> None:
    frame, _ = read_features(source())
    entities, _ = features_to_entities(source(), frame, SpatialConfig(()), counties)
    flagged = {e["source_pk"]: e["county_spatial"] for e in entities if e["flags"]["county_disagreement"]}
    # Montgomery straddles Fayette and Kanawha; the generalised 1:20M polygons put its centroid in Kanawha
    assert flagged == {"wvb-007": "Kanawha"}


def test_features_far_outside_the_region_are_flagged(tmp_path: Path) -> None:
    spatial = spatial_config(
        tmp_path,
        f"spatial:\n  {WV_REGION}\n  sources:\n    - {{name: f, path: {EXAMPLE}, crs: EPSG:26917, dataset: d, "
        "worldview_id: wv, gbim_entity: facility, id_field: facility_id, label_field: name}\n",
    )
    frame = gpd.GeoDataFrame(
        {"facility_id": ["beckley", "just-outside", "florida"], "name": ["a", "b", "c"], "description": ["d"] * 3},
        geometry=gpd.points_from_xy([-81.18, -82.8, -80.75], [37.78, 38.4, 28.0]),
        crs="EPSG:4326",
    )
    entities, _ = features_to_entities(source(crs="EPSG:4326", county_field=None, zip_field=None), frame, spatial)
    assert [e["flags"]["outside_region"] for e in entities] == [False, False, True]
    assert haversine_km(np.array([28.0]), np.array([-80.75]), 37.2, -80.75)[0] == pytest.approx(1023, abs=2)


# --- configuration ------------------------------------------------------------------------------------------------
def test_a_source_without_crs_is_an_error_naming_it(tmp_path: Path) -> None:
    body = (
        "spatial:\n  sources:\n    - {name: clinics, path: c.geojson, dataset: d, worldview_id: wv, "
        "gbim_entity: facility, id_field: id, label_field: name}\n"
    )
    with pytest.raises(ConfigError, match=r"spatial\.sources\[0\] \('clinics'\): no crs"):
        spatial_config(tmp_path, body)
    defaulted = spatial_config(tmp_path, body.replace("spatial:\n", "spatial:\n  crs: EPSG:4326\n"))
    assert defaulted.sources[0].crs == "EPSG:4326"
    assert defaulted.sources[0].path == (tmp_path / "c.geojson").resolve()
    assert defaulted.collections == ["gbim_spatial"]


def test_spatial_section_errors_carry_file_line_and_column(tmp_path: Path) -> None:
    body = "spatial:\n  sources:\n    - name: clinics\n      path: c.geojson\n      dataset: d\n      gbim_entity: f\n"
    with pytest.raises(ConfigError, match=r"sources\.yaml:5:7: spatial\.sources\[0\]: 'id_field' is a required"):
        spatial_config(tmp_path, body)
    with pytest.raises(ConfigError, match=r"\('clinics'\): give exactly one of label_field or label_template"):
        spatial_config(
            tmp_path, body.replace("gbim_entity: f", "gbim_entity: f\n      id_field: id\n      crs: EPSG:4326")
        )
    with pytest.raises(ConfigError, match=r"'EPSG:99999' is not a CRS"):
        spatial_config(
            tmp_path,
            "spatial:\n  crs: EPSG:99999\n  sources:\n    - {name: c, path: c.geojson, dataset: d, worldview_id: w, "
            "gbim_entity: f, id_field: id, label_field: name}\n",
        )


def test_a_field_the_features_lack_is_named() -> None:
    frame, _ = read_features(source())
    with pytest.raises(ConfigError, match=r"field\(s\) \['nickname'\] not found in wv_benefits_facilities\.geojson"):
        features_to_entities(source(label_field=None, label_template="{nickname} ({type})"), frame, SpatialConfig(()))
    entities, _ = features_to_entities(
        source(label_field=None, label_template="{name} ({type})"), frame, SpatialConfig(())
    )
    assert entities[0]["label"].endswith(")")


# --- relations and RDF -----------------------------------------------------------------------------------------------
def test_zip_codes_are_normalised() -> None:
    assert zip_codes("25901") == ["25901"]
    assert zip_codes(2590) == ["02590"]
    assert zip_codes("25801, 25802;25801-1234") == ["25801", "25802"]
    assert zip_codes(["25840", "x"]) == ["25840"]
    assert zip_codes(None) == [] and zip_codes("n/a") == []


def test_relations_and_n_triples() -> None:
    frame, _ = read_features(source())
    entities, _ = features_to_entities(source(), frame, SpatialConfig(()))
    hub = next(e for e in entities if e["source_pk"] == "wvb-001")
    triples = {(r["predicate"], r["object"], r["object_kind"]) for r in relations_for(hub, None)}
    assert triples == {
        ("part_of", "wv", "worldview"),
        ("located_in", "Fayette", "county"),
        ("serves_zip", "25901", "zip"),
    }
    located = next(r for r in relations_for(hub, None) if r["predicate"] == "located_in")
    assert located["provenance"] == {
        "source": "facilities", "source_table": "wv_benefits_facilities.geojson", "source_pk": "wvb-001",
        "method": "attribute", "field": "county",
    }  # fmt: skip

    tricky = {**hub, "label": 'The "Hub"\nline two \\ done', "county": "St. Mary's"}
    relations = [r for e in (hub, tricky) for r in relations_for(e, None)]
    text = rdf_graph([tricky], relations).serialize(format="nt")
    parsed = Graph().parse(data=text, format="nt")
    subject = URIRef(node_iri("entity", hub["entity_id"]))
    labels = {str(o) for o in parsed.objects(subject, URIRef("http://www.w3.org/2000/01/rdf-schema#label"))}
    assert labels == {tricky["label"]}
    located_in = set(parsed.objects(subject, URIRef(GBIM_IRI + "located_in")))
    assert located_in == {URIRef(node_iri("county", "Fayette")), URIRef(node_iri("county", "St. Mary's"))}
    assert URIRef(GBIM_IRI + "county/St.%20Mary%27s") in located_in
    lat = next(parsed.objects(subject, URIRef("http://www.w3.org/2003/01/geo/wgs84_pos#lat")))
    assert float(lat) == pytest.approx(hub["lat"])


def test_entity_attributes_are_plain_json() -> None:
    frame = gpd.GeoDataFrame(
        {"facility_id": [np.int64(7)], "name": ["n"], "description": ["d"], "beds": [np.float64("nan")],
         "opened": [pd.Timestamp("2020-01-02")]},
        geometry=[shapely.Point(480000, 4200000)], crs="EPSG:26917",
    )  # fmt: skip
    [entity], _ = features_to_entities(source(county_field=None, zip_field=None), frame, SpatialConfig(()))
    assert entity["source_pk"] == "7"
    assert json.loads(json.dumps(entity["attributes"])) == {
        "facility_id": 7, "name": "n", "description": "d", "beds": None, "opened": "2020-01-02T00:00:00",
    }  # fmt: skip
