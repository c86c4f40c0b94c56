"""A bbox / radius / county over many GBIM entities (issue 38: a 0.5° bbox keeps ≈ 32k of 1M): the prefilter reads
the copy's longitude-ordered latitudes (no gather of every row between the longitudes), and the kept rows are ranked
over their int8 codes first, the float32 vectors read only for the rows that can reach the top k; the answers are
today's (the chunks' two-stage scan over the mask, ``DenseScan``), ties included."""

from __future__ import annotations

import numpy as np
import pytest

from livemem.answer import gis_rank
from livemem.answer.gis_rank import rank_entities
from livemem.gbim.export import _write_gis_snapshot, _write_tables
from livemem.geo.distance import EARTH_RADIUS_KM, haversine_km
from livemem.index import kernels, scan
from livemem.query import gis_index
from livemem.query.gis_index import load_gis_index
from livemem.version import mapped
from livemem.version.store import IndexHome, write_manifest

N = 6000
ACCESS = frozenset({"public", "internal"})


def make_entities(n: int, seed: int = 3) -> tuple[list[dict], np.ndarray]:
    rng = np.random.default_rng(seed)
    entities = []
    for i in range(n):
        lon, lat = (None, None) if i % 101 == 0 else (float(rng.uniform(-82.6, -77.7)), float(rng.uniform(37.2, 40.6)))
        entities.append({
            "entity_id": f"gbim:b:{i:05d}", "source": "b", "worldview_id": "wv", "dataset": "a",
            "county": "Fayette County" if i % 3 else "Kanawha County", "gbim_entity": "facility", "label": f"P {i}",
            "description": f"Place {i}", "centroid_x": None, "centroid_y": None, "srid": 4326, "lon": lon, "lat": lat,
            "source_table": "b", "source_pk": str(i), "attributes": {}, "access": "internal" if i % 4 else "public",
            "collection": "gis_b", "geometry_type": "Point", "county_source": None, "county_spatial": None,
            "flags": {"geometry_repaired": False, "outside_region": False, "county_disagreement": False},
        })  # fmt: skip
    vectors = rng.standard_normal((n, 32)).astype(np.float32)
    vectors[200:260] = vectors[7]  # exact ties, spread over the map: the lower row first
    vectors[1000:1040] = -vectors[7]
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return entities, vectors


@pytest.fixture(scope="module")
def gis(tmp_path_factory):
    home = IndexHome(tmp_path_factory.mktemp("gis-bbox") / "rag_index").ensure()
    staged = home.version_dir("v1")
    staged.mkdir(parents=True)
    entities, vectors = make_entities(N)
    _write_tables(staged, entities, [])
    _write_gis_snapshot(staged, entities, vectors)
    write_manifest(staged, {"version_id": "v1", "gbim": {"input_hash": "x", "exported_at": "now"}})
    return load_gis_index(staged)


@pytest.fixture
def float32_rows(monkeypatch):
    """How many rows' float32 vectors the exact scoring loop reads (every path scores through it)."""
    read = []
    original = kernels._dot_rows

    def counting(vectors, rows, query, out):
        read.append(int(rows.size))
        return original(vectors, rows, query, out)

    monkeypatch.setattr(kernels, "_dot_rows", counting)
    return read


def queries(gis) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    dense = np.asarray(gis.dense)
    return [dense[7].copy(), -dense[7], dense[3000].copy()] + [
        rng.standard_normal(32).astype(np.float32) for _ in range(8)
    ]


# (constraint, whether it keeps at most EXACT_SHARE of the entities: today every kept row was scored in float32)
CONSTRAINTS = [
    ({"bbox": (-81.0, 38.0, -80.2, 38.8)}, True),  # ~230 of 6,000 (at 1M a 0.5° bbox keeps ~32k: 3%)
    ({"near": (38.9, -80.1, 40.0)}, True),
    ({"bbox": (-82.0, 37.5, -78.0, 40.0)}, False),  # most of the map: ~4,000
    ({"counties": ("Fayette",)}, False),
    ({"bbox": (-82.6, 37.2, -77.7, 40.6), "near": (38.9, -80.1, 400.0)}, False),
]


@pytest.mark.parametrize(("case", "few"), CONSTRAINTS, ids=lambda c: ",".join(c) if isinstance(c, dict) else str(c))
def test_kept_entities_are_ranked_as_today_reading_few_float32_vectors(gis, float32_rows, monkeypatch, case, few):
    """The top k of a constraint is today's, rows and scores bit for bit, ties to the lower row; the float32
    vectors of only the rows that can reach the top k are read (today, for a constraint keeping few of the entities,
    as a bbox does at 1M: every kept row). ``INT8_FEW_ROWS`` is lowered to the scale of this index."""
    monkeypatch.setattr(gis_rank, "INT8_FEW_ROWS", 64, raising=False)
    mask = gis.mask(ACCESS, **case)
    rows = np.flatnonzero(mask)
    assert rows.size > 100 and (rows.size <= scan.EXACT_SHARE * gis.size) == few
    for query in queries(gis):
        for k in (1, 10, 50):
            today = gis.vectors.scan(query, mask, rows).top(k)  # what rank_entities answered
            float32_rows.clear()
            ranked = rank_entities(gis, query, k, mask)
            assert ranked.candidates == rows.size
            assert np.array_equal(ranked.rows, today[0]) and np.array_equal(ranked.scores, today[1])
            if k <= 10:
                assert sum(float32_rows) <= max(k, rows.size // 4), (sum(float32_rows), rows.size)
    tied = rows[np.isin(rows, [7, *range(200, 260)])]  # equal vectors: the lowest rows first
    assert np.array_equal(rank_entities(gis, np.asarray(gis.dense[7]), tied.size, mask).rows, tied)


def test_a_radius_keeps_the_entities_exactly_at_its_edge_and_the_prefilter_reads_ordered_columns(gis) -> None:
    """Entities due north and south of the centre at exactly the radius are kept (the latitude prefilter is a hair
    wider than the radius), as the distance says; bbox edges equal to an entity's coordinates keep it. The prefilter
    reads the latitudes in longitude order from the mapped copy, not each row's latitude; the ranking reads the
    int8 codes in the copy's spatial order (every row once: neighbours in a cell of longitude, by latitude)."""
    assert mapped.is_mapped(gis.lat_by_lon)
    assert np.array_equal(np.asarray(gis.lat_by_lon), np.asarray(gis.lat)[np.asarray(gis.lon_order)])
    grid = np.asarray(gis.grid_rows)
    assert mapped.is_mapped(gis.int8_grid.codes) and np.array_equal(np.sort(grid), np.arange(gis.size))
    assert np.array_equal(np.asarray(gis.grid_pos)[grid], np.arange(gis.size))
    assert np.array_equal(np.asarray(gis.int8_grid.codes), np.asarray(gis.int8.codes)[grid])
    cells = np.floor(np.asarray(gis.lon)[grid] / gis_index.GRID_CELL_DEG)
    known = np.isfinite(cells)
    assert known[: known.sum()].all() and (np.diff(cells[known]) >= 0).all()  # positionless rows last
    lat, lon = np.asarray(gis.lat), np.asarray(gis.lon)
    for row in (1, 2, 500, 4321):
        for dlat in (0.3, -0.3, 1e-7):
            radius = float(haversine_km(np.array(lat[row]), np.array(lon[row]), lat[row] + dlat, lon[row]))
            mask = gis.mask(ACCESS, near=(lat[row] + dlat, lon[row], radius))
            want = haversine_km(lat, lon, lat[row] + dlat, lon[row]) <= radius  # NaN positions: never
            assert mask[row] and np.array_equal(mask, want & gis.access_mask(ACCESS))
            assert abs(radius - EARTH_RADIUS_KM * np.radians(abs(dlat))) < 1e-6
        bbox = (lon[row], lat[row], lon[row], lat[row])
        assert np.flatnonzero(gis.mask(ACCESS, bbox=bbox)).tolist() == [row]
    assert not gis.mask(ACCESS, bbox=(float("nan"), 37.0, -78.0, 40.0)).any()
