"""The GIS part served at scale (issue 38): entities by column in a mapped serving copy, masks on codes and a
longitude prefilter, and the exact two-stage top-k (int8 first stage, float32 rescoring) giving today's ranking."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from livemem.answer.gis_rank import rank_entities
from livemem.errors import LivingMemoryError
from livemem.gbim.export import _write_gis_snapshot, _write_tables
from livemem.geo.distance import haversine_km
from livemem.geo.names import tidy_county_key
from livemem.index.dense import top_order
from livemem.query import gis_index
from livemem.query.gis_index import cached_gis_index, load_gis_index, read_entities, read_relations
from livemem.version import connect, mapped, parts_dir
from livemem.version.store import IndexHome, write_manifest

N = 3000
COUNTIES = ["Fayette", "Kanawha", "Raleigh", "McDowell", None]
ACCESS = {"public": frozenset({"public"}), "internal": frozenset({"public", "internal"})}


def make_entities(n: int, seed: int = 1) -> tuple[list[dict], list[dict], np.ndarray]:
    rng = np.random.default_rng(seed)
    entities, relations = [], []
    for i in range(n):
        no_position = i % 97 == 0
        lon, lat = (None, None) if no_position else (float(rng.uniform(-82.6, -77.7)), float(rng.uniform(37.2, 40.6)))
        county = COUNTIES[i % len(COUNTIES)]
        eid = f"gbim:t:{i:05d}"
        entities.append({
            "entity_id": eid, "source": "t", "worldview_id": "wv", "dataset": "a" if i % 3 else "b",
            "county": (f"{county} County" if i % 2 else county) if county else None, "gbim_entity": "facility",
            "label": f"Place {i}", "description": f"Place number {i} ünïcode", "centroid_x": None if no_position else
            float(i), "centroid_y": None if no_position else float(-i), "srid": 26917, "lon": lon, "lat": lat,
            "source_table": "t.geojson", "source_pk": str(i), "attributes": {"city": f"Town {i % 7}", "n": i},
            "access": "internal" if i % 4 == 0 else "public", "collection": "gis_t", "geometry_type": "Point",
            "county_source": county, "county_spatial": county, "flags": {"geometry_repaired": i % 5 == 0,
            "outside_region": False, "county_disagreement": i % 11 == 0},
        })  # fmt: skip
        for k in range(i % 3):
            relations.append({"subject": eid, "predicate": f"p{k}", "object": f"o{i}-{k}", "object_kind": "literal",
                              "provenance": {"source": "t", "k": k}})  # fmt: skip
    vectors = rng.standard_normal((n, 16)).astype(np.float32)
    vectors[10:20] = vectors[5]  # exact ties: the lower row first
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return entities, relations, vectors


@pytest.fixture(scope="module")
def version(tmp_path_factory) -> Path:
    home = IndexHome(tmp_path_factory.mktemp("gis") / "rag_index").ensure()
    staged = home.version_dir("v1")
    staged.mkdir(parents=True)
    entities, relations, vectors = make_entities(N)
    _write_tables(staged, entities, relations)
    _write_gis_snapshot(staged, entities, vectors)
    write_manifest(staged, {"version_id": "v1", "gbim": {"input_hash": "x", "exported_at": "now"}})
    return staged


@pytest.fixture(scope="module")
def gis(version):
    return load_gis_index(version)


@pytest.fixture(scope="module")
def records(version):
    con = connect(version)
    try:
        return read_entities(con), read_relations(con)
    finally:
        con.close()


def test_entities_are_mapped_columns_shared_by_every_load_not_per_worker_dicts(version, gis, records) -> None:
    """What a worker holds: the vectors and columns mapped from one copy on disk (two loads, two workers: the same
    file), and the entity records and relations exactly those the tables hold, built when asked for."""
    assert mapped.is_mapped(gis.dense) and mapped.is_mapped(gis.lon) and mapped.is_mapped(gis.table.codes("label"))
    copies = sorted(p.name for p in mapped.cache_root(parts_dir(version)).iterdir())
    assert copies == [gis_index.copy_name(version)]
    again = load_gis_index(version)  # another worker: maps the same copy, writes nothing
    assert mapped.is_mapped(again.dense) and again.guard.inode == gis.guard.inode
    assert sorted(p.name for p in mapped.cache_root(parts_dir(version)).iterdir()) == copies
    entities, relations = records
    assert gis.size == len(entities) == N
    assert list(gis.entities) == entities  # ids.json order is entity id order here
    assert [gis.ids[r] for r in range(N)] == [e["entity_id"] for e in entities]
    for row in (0, 1, 97, N - 1):
        assert (
            gis.row_of[entities[row]["entity_id"]] == row and gis.row_of.get(f"{entities[row]['entity_id']}x") is None
        )
    by_subject: dict[str, list] = {}
    for rel in relations:
        by_subject.setdefault(rel["subject"], []).append(rel)
    assert {s: gis.relations.get(s) for s in by_subject} == by_subject
    assert gis.relations.get(entities[0]["entity_id"], []) == [] and len(gis.relations) == len(by_subject)


def brute_mask(entities, access, bbox=None, near=None, counties=(), datasets=()) -> np.ndarray:
    keys = {tidy_county_key(c) for c in counties} - {None, ""}
    out = []
    for e in entities:
        ok = e["access"] in access and (not datasets or e["dataset"] in datasets)
        ok = ok and (not counties or tidy_county_key(e["county"]) in keys)
        lon, lat = e["lon"], e["lat"]
        if bbox is not None:
            ok = ok and lon is not None and bbox[0] <= lon <= bbox[2] and bbox[1] <= lat <= bbox[3]
        if near is not None:
            ok = (
                ok
                and lon is not None
                and float(haversine_km(np.array(lat), np.array(lon), near[0], near[1])) <= near[2]
            )
        out.append(ok)
    return np.array(out)


CASES = [
    {},
    {"bbox": (-81.5, 38.0, -81.0, 38.5)},
    {"bbox": (-81.0, 38.0, -81.5, 38.5)},  # min above max: nothing
    {"near": (38.2, -81.2, 25.0)},
    {"near": (38.2, -81.2, 0.0)},
    {"near": (38.2, -81.2, 20000.0)},  # the whole earth: the longitude prefilter must not cut it
    {"near": (89.9, -81.2, 50.0)},  # a circle over the pole
    {"bbox": (-82.0, 37.5, -80.0, 39.0), "near": (38.2, -81.2, 60.0), "counties": ("fayette county", "KANAWHA")},
    {"counties": ("McDowell",), "datasets": ("b",)},
    {"counties": ("County",)},
    {"datasets": ("a", "nope")},
]


@pytest.mark.parametrize("case", CASES, ids=[json.dumps(c) for c in CASES])
@pytest.mark.parametrize("role", sorted(ACCESS))
def test_masks_keep_exactly_the_entities_meeting_every_constraint(gis, records, case, role) -> None:
    entities, _ = records
    got = gis.mask(ACCESS[role], **case)
    want = brute_mask(entities, ACCESS[role], **case)
    assert got.dtype == bool and np.array_equal(got, want)


@pytest.mark.parametrize("case", CASES[:2] + CASES[3:4] + CASES[7:9], ids=lambda c: json.dumps(c))
def test_ranking_is_todays_exact_ranking(gis, case) -> None:
    """The same top-k as scoring every kept row in float32 (what rank_entities did), ties to the lower row."""
    rng = np.random.default_rng(7)
    vectors = np.asarray(gis.dense, dtype=np.float64)
    queries = [vectors[5].astype(np.float32)] + [rng.standard_normal(16).astype(np.float32) for _ in range(20)]
    mask = gis.mask(ACCESS["internal"], **case)
    rows = np.flatnonzero(mask)
    for query in queries:
        for k in (1, 10, 25, rows.size + 5):
            ranked = rank_entities(gis, query, k, mask)
            old = np.asarray(gis.dense)[rows] @ query
            order = top_order(old, min(k, rows.size))
            assert ranked.candidates == rows.size and ranked.rows.size == min(k, rows.size)
            exact = vectors[ranked.rows] @ query.astype(np.float64)
            np.testing.assert_allclose(ranked.scores, exact, atol=1e-5)
            np.testing.assert_allclose(ranked.scores, old[order], atol=1e-5)  # the same scores, rank by rank
            assert np.array_equal(ranked.rows, rows[order])  # today's rows, in today's order (ties included)
            if ranked.rows.size < rows.size:  # nothing left out scores above the last one kept
                left = np.setdiff1d(rows, ranked.rows)
                assert (vectors[left] @ query.astype(np.float64)).max() <= exact.min() + 1e-5
            tied = ranked.rows[np.isin(ranked.rows, [5, *range(10, 20)])]  # equal vectors: the lower row first
            assert np.array_equal(tied, np.sort(tied))


def test_the_int8_first_stage_runs_on_an_unconstrained_query(gis) -> None:
    """Meaning only (every row kept): the scan reads the copy's int8 codes and rescores only a few rows."""
    mask = gis.mask(ACCESS["internal"])
    scan = gis.vectors.scan(np.asarray(gis.dense[3]), mask, np.flatnonzero(mask))
    rows, _ = scan.candidates(10)
    assert scan.approx is not None and 10 <= rows.size < N // 10 and 3 in rows


def test_a_copy_truncated_under_a_worker_is_written_again_not_read(tmp_path: Path) -> None:
    """A copy changed under its mapping is never read (SIGBUS): the next caller gets a fresh copy."""
    home = IndexHome(tmp_path / "rag_index").ensure()
    version = home.version_dir("v1")
    version.mkdir(parents=True)
    entities, relations, vectors = make_entities(50)
    _write_tables(version, entities, relations)
    _write_gis_snapshot(version, entities, vectors)
    write_manifest(version, {"version_id": "v1"})
    cached_gis_index.cache_clear()
    first = cached_gis_index(str(version))
    assert cached_gis_index(str(version)) is first
    copy = mapped.cache_root(parts_dir(version)) / gis_index.copy_name(version) / mapped.ARRAYS
    copy.chmod(0o640)
    os.truncate(copy, 0)
    second = cached_gis_index(str(version))
    assert second is not first and second.intact() and mapped.is_mapped(second.dense)
    assert second.entities[7]["label"] == "Place 7"
    cached_gis_index.cache_clear()


def test_ids_and_tables_that_disagree_are_a_clear_error_naming_the_version(tmp_path: Path) -> None:
    home = IndexHome(tmp_path / "rag_index").ensure()
    staged = home.version_dir("v2")
    staged.mkdir(parents=True)
    entities, relations, vectors = make_entities(20)
    _write_tables(staged, entities[:-1], relations)
    _write_gis_snapshot(staged, entities, vectors)
    with pytest.raises(LivingMemoryError, match=r"GIS part of index version v2 cannot be read .*20 entities.*19"):
        load_gis_index(staged)
    assert not any(p.name.startswith("gis-") for p in mapped.cache_root(parts_dir(staged)).glob("*"))


def test_copies_of_versions_no_longer_kept_are_removed_when_a_copy_is_written(tmp_path: Path) -> None:
    """Retention removes a version: its GIS copy (hundreds of MB at a million entities) goes with the next copy."""
    home = IndexHome(tmp_path / "rag_index").ensure()
    names = []
    for i, version_id in enumerate(("v1", "v2", "v3")):
        staged = home.version_dir(version_id)
        staged.mkdir(parents=True)
        entities, relations, vectors = make_entities(30 + i, seed=i)
        _write_tables(staged, entities, relations)
        _write_gis_snapshot(staged, entities, vectors)
        write_manifest(staged, {"version_id": version_id, "gbim": {"input_hash": version_id, "exported_at": "now"}})
        if version_id == "v3":
            shutil.rmtree(home.version_dir("v1"))  # retention
        assert load_gis_index(staged).size == 30 + i
        names.append(gis_index.copy_name(staged))
    root = mapped.cache_root(parts_dir(home.version_dir("v3")))
    assert sorted(p.name for p in root.glob("gis-*")) == sorted(names[1:])


@pytest.fixture(scope="module")
def with_graph(tmp_path_factory) -> Path:
    """A version whose export wrote the entities' approximate-search graph (as one of 250k entities or more would)."""
    home = IndexHome(tmp_path_factory.mktemp("gisgraph") / "rag_index").ensure()
    staged = home.version_dir("v1")
    staged.mkdir(parents=True)
    entities, relations, vectors = make_entities(N)
    _write_tables(staged, entities, relations)
    _write_gis_snapshot(staged, entities, vectors, graph_min_rows=1)
    write_manifest(staged, {"version_id": "v1", "gbim": {"input_hash": "g", "exported_at": "now"}})
    return staged


def test_a_large_export_is_searched_through_its_graph_with_exact_scores(with_graph, gis) -> None:
    """Meaning only: the graph's candidates rescored exactly, the top 10 as exact search's (recall@10 ≥ 0.99);
    a bbox keeps few rows: scored exactly, identical to exact search."""
    graphed = load_gis_index(with_graph)
    assert graphed.vectors.graphs[0] is not None and gis.vectors.graphs[0] is None
    rng = np.random.default_rng(3)
    access = ACCESS["internal"]
    found = 0
    for _ in range(50):
        query = rng.standard_normal(16).astype(np.float32)
        query /= np.linalg.norm(query)
        mask = graphed.mask(access)
        approx, exact = rank_entities(graphed, query, 10, mask), rank_entities(gis, query, 10, mask)
        np.testing.assert_allclose(approx.scores, np.asarray(graphed.dense)[approx.rows] @ query, atol=1e-5)
        found += np.isin(approx.rows, exact.rows).sum()
        small = graphed.mask(access, bbox=(-81.5, 38.0, -81.0, 38.5))
        assert np.array_equal(rank_entities(graphed, query, 10, small).rows, rank_entities(gis, query, 10, small).rows)
    assert found / 500 >= 0.99


def test_a_graph_that_does_not_match_its_record_is_left_unused(tmp_path: Path, with_graph, gis, caplog) -> None:
    """A damaged graph never fails the GIS part: logged, and every query is the exact scan's."""
    staged = tmp_path / "rag_index" / "versions" / "v1"
    shutil.copytree(with_graph, staged)
    graph = staged / "gis" / "ann.usearch"
    graph.chmod(0o640)
    with open(graph, "r+b") as fh:
        fh.truncate(graph.stat().st_size // 2)
    damaged = load_gis_index(staged)
    assert damaged.vectors.graphs[0] is None and "searched exactly" in caplog.text
    query = np.asarray(gis.dense[9])
    mask = damaged.mask(ACCESS["public"])
    assert np.array_equal(rank_entities(damaged, query, 10, mask).rows, rank_entities(gis, query, 10, mask).rows)


def test_a_radius_across_the_antimeridian_keeps_both_sides(tmp_path: Path) -> None:
    home = IndexHome(tmp_path / "rag_index").ensure()
    staged = home.version_dir("v1")
    staged.mkdir(parents=True)
    entities, relations, vectors = make_entities(25)
    for e, lon in zip(entities, (179.99, -179.99, 170.0, 0.0), strict=False):
        e["lon"], e["lat"] = lon, 0.0
    _write_tables(staged, entities, relations)
    _write_gis_snapshot(staged, entities, vectors)
    gis = load_gis_index(staged)
    assert np.flatnonzero(gis.mask(ACCESS["internal"], near=(0.0, 179.99, 50.0))).tolist() == [0, 1]
    assert np.flatnonzero(gis.mask(ACCESS["internal"], near=(0.0, -179.99, 50.0))).tolist() == [0, 1]
