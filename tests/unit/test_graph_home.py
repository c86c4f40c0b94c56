"""The graph's towns and counties follow the deployment's home (``Snapshot.home``; issue 46, goal 6): for a Florida
home "Miami-Dade County", "Dade" and "Hialeah" are a county and a town of the home, and "is Hialeah in Miami-Dade
County?" is answered from the gazetteer; West Virginia (the default) reads them as it always has."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from livemem.answer import graph
from livemem.gbim.export import _write_gis_snapshot, _write_tables
from livemem.geo.home import WEST_VIRGINIA, Home
from livemem.query.gis_index import load_gis_index
from livemem.version.store import IndexHome, write_manifest

FLORIDA = Home(("FL",), "South Florida 211")
PUBLIC = frozenset({"public"})


def _entity(i: int, label: str, county: str, city: str, zip5: str) -> dict:
    return {
        "entity_id": f"gbim:s:{i:05d}", "source": "s", "worldview_id": "wv", "dataset": "a",
        "county": f"{county} County", "gbim_entity": "facility", "label": label, "description": label,
        "centroid_x": float(i), "centroid_y": float(-i), "srid": 26917, "lon": -80.28, "lat": 25.86,
        "source_table": "s", "source_pk": str(i), "attributes": {"city": city, "zip": zip5}, "access": "public",
        "collection": "gis_s", "geometry_type": "Point", "county_source": county, "county_spatial": county,
        "flags": {"geometry_repaired": False, "outside_region": False, "county_disagreement": False},
    }  # fmt: skip


@pytest.fixture(scope="module")
def gis(tmp_path_factory):
    home = IndexHome(tmp_path_factory.mktemp("graph-home") / "rag_index").ensure()
    staged = home.version_dir("v1")
    staged.mkdir(parents=True)
    entities = [
        _entity(0, "Hialeah Community Pantry", "Miami-Dade", "Hialeah", "33010"),
        _entity(1, "Fayette Food Bank", "Fayette", "Oak Hill", "25901"),
    ]
    relations = [
        {"subject": "gbim:s:00000", "predicate": "located_in", "object": "Miami-Dade", "object_kind": "county",
         "provenance": {}},
        {"subject": "gbim:s:00001", "predicate": "located_in", "object": "Fayette", "object_kind": "county",
         "provenance": {}},
    ]  # fmt: skip
    vectors = np.eye(2, 16, dtype=np.float32)
    _write_tables(staged, entities, relations)
    _write_gis_snapshot(staged, entities, vectors)
    write_manifest(staged, {"version_id": "v1", "gbim": {"input_hash": "x", "exported_at": "now"}})
    return load_gis_index(Path(staged))


def test_florida_counties_and_towns_resolve_for_a_florida_home(gis) -> None:
    assert graph.resolve(gis, PUBLIC, "Miami-Dade County", FLORIDA)[0] == {
        "kind": "county", "value": "Miami-Dade", "label": "Miami-Dade County"
    }  # fmt: skip
    assert graph.resolve(gis, PUBLIC, "Dade", FLORIDA)[0]["value"] == "Miami-Dade"  # its old name
    (town,) = graph.resolve(gis, PUBLIC, "hialeah", FLORIDA)
    assert (town["kind"], town["counties"]) == ("town", ["Miami-Dade"])
    # West Virginia (the default home) knows neither
    assert all(n["kind"] != "county" for n in graph.resolve(gis, PUBLIC, "Miami-Dade County"))
    assert all(n["kind"] != "town" for n in graph.resolve(gis, PUBLIC, "Hialeah"))
    assert graph.resolve(gis, PUBLIC, "Fayette County", WEST_VIRGINIA)[0]["value"] == "Fayette"


def test_which_county_a_florida_town_is_in_follows_the_home(gis) -> None:
    facts, route = graph.fuse(gis, PUBLIC, "Is Hialeah in Miami-Dade County?", [], FLORIDA)
    verdict = route["relationship"]["verdict"]
    assert verdict == {"answer": "yes", "sentence": "Yes — Hialeah is in Miami-Dade County."}
    assert facts[0]["object"] == "Miami-Dade" and facts[0]["provenance"]["source"] == "gazetteer"
    _, route = graph.fuse(gis, PUBLIC, "Is Hialeah in Broward County?", [], FLORIDA)
    assert route["relationship"]["verdict"]["sentence"] == "No — Hialeah is in Miami-Dade County, not Broward County."
    # an entity of the graph, by its county of the home
    _, route = graph.fuse(gis, PUBLIC, "Is Hialeah Community Pantry in Dade County?", [], FLORIDA)
    assert route["relationship"]["verdict"]["answer"] == "yes"


def test_a_west_virginia_home_answers_as_before(gis) -> None:
    _, route = graph.fuse(gis, PUBLIC, "Is Oak Hill in Fayette County?", [])
    assert route["relationship"]["verdict"]["answer"] == "yes"
    _, route = graph.fuse(gis, PUBLIC, "Is Hialeah in Miami-Dade County?", [])
    assert "verdict" not in route["relationship"]  # neither is a West Virginia place
