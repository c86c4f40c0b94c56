"""Benchmark: GBIM export of 100,000 synthetic WV features, and /gis/query with a bbox at that size.

    .venv/bin/python -m bench.gbim_bench [--features 100000] [--queries 200]

1. Export (target ≤ 20 s, embedding excluded): 100,000 features in EPSG:26917 — 80 % points, 20 % small
   polygons, 1 % invalid (self-intersecting) polygons — become entities (validity repair, centroids in the
   projected CRS, reprojection to EPSG:4326, county by point-in-polygon against the 55 real WV county polygons
   of ``../shared/data/geo/wv_counties.geojson``) and relations: ``livemem.gbim.features_to_entities`` +
   ``relations_for``, the same functions the Dagster asset runs.
2. ``POST /gis/query`` with a bbox (target p50 ≤ 25 ms): those entities written as a version's GIS part (random
   unit vectors stand in for the description embeddings; the query is encoded by the real model), served by
   the app, queried in-process through FastAPI's TestClient with a random 0.5° × 0.5° bbox inside WV.
Results: bench/results/gbim.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time

import numpy as np

from livemem.dates import iso, utc_now
from livemem.sources.config import PROJECT_ROOT
from livemem.version.store import IndexHome

SHARED = PROJECT_ROOT.parent / "shared" / "data" / "geo" / "wv_counties.geojson"
WORK = PROJECT_ROOT / "bench" / ".work" / "gbim"
RESULTS = PROJECT_ROOT / "bench" / "results"


def synthetic_features(n: int, seed: int = 11):
    """Points and small polygons spread over West Virginia, in EPSG:26917."""
    import geopandas as gpd
    import shapely

    counties = gpd.read_file(SHARED)
    wv = shapely.union_all(counties.geometry.to_numpy())
    rng = np.random.default_rng(seed)
    min_lon, min_lat, max_lon, max_lat = wv.bounds
    lon = rng.uniform(min_lon, max_lon, n * 3)
    lat = rng.uniform(min_lat, max_lat, n * 3)
    inside = shapely.contains_xy(wv, lon, lat)
    lon, lat = lon[inside][:n], lat[inside][:n]
    points = gpd.GeoSeries(shapely.points(lon, lat), crs="EPSG:4326").to_crs("EPSG:26917").to_numpy()
    geoms = []
    for i, p in enumerate(points):
        if i % 100 == 0:  # a bow-tie: invalid, repaired by make_valid
            x, y = p.x, p.y
            geoms.append(shapely.Polygon([(x, y), (x + 50, y + 50), (x + 50, y), (x, y + 50), (x, y)]))
        elif i % 5 == 0:
            geoms.append(p.buffer(40, quad_segs=2))
        else:
            geoms.append(p)
    frame = gpd.GeoDataFrame(
        {
            "facility_id": [f"f{i}" for i in range(len(geoms))],
            "name": [f"Facility {i}" for i in range(len(geoms))],
            "description": [f"Benefits facility number {i} serving the community" for i in range(len(geoms))],
        },
        geometry=geoms,
        crs="EPSG:26917",
    )
    return frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--features", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    from livemem.gbim import (
        CountyBoundaries,
        SpatialConfig,
        SpatialSource,
        _write_empty_chunk_parts,
        _write_gis_snapshot,
        _write_tables,
        features_to_entities,
        read_counties,
        relations_for,
    )

    frame = synthetic_features(args.features)
    boundaries = CountyBoundaries(SHARED, "NAME")
    source = SpatialSource(
        name="bench", dataset="bench", worldview_id="wv", gbim_entity="facility", id_field="facility_id",
        crs="EPSG:26917", collection="gis_bench", label_field="name", description_field="description",
    )  # fmt: skip
    spatial = SpatialConfig(sources=(source,), counties=boundaries)
    t0 = time.perf_counter()
    counties, _ = read_counties(boundaries)
    t1 = time.perf_counter()
    entities, quarantined = features_to_entities(source, frame, spatial, counties)
    t2 = time.perf_counter()
    relations = [r for e in entities for r in relations_for(e, boundaries)]
    t3 = time.perf_counter()
    export_s = t3 - t0
    with_county = sum(1 for e in entities if e["county"])

    shutil.rmtree(WORK, ignore_errors=True)
    home = IndexHome(WORK / "rag_index").ensure()
    version = home.new_version_id()
    staged = home.version_dir(version)
    staged.mkdir(parents=True)
    _write_empty_chunk_parts(staged, 384)
    _write_tables(staged, entities, relations)
    vectors = np.random.default_rng(3).standard_normal((len(entities), 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    _write_gis_snapshot(staged, entities, vectors)
    now = iso(utc_now())
    (staged / "manifest.json").write_text(json.dumps({
        "version_id": version, "base_version": None, "created_at": now, "last_updated": now,
        "model": {"id": "sentence-transformers/all-MiniLM-L6-v2", "dim": 384}, "total_chunks": 0, "collections": {},
        "sources": {}, "breath_at_update": {"phase": None, "tone": "normal"},
    }), encoding="utf-8")  # fmt: skip
    home.current_file.write_text(version + "\n", encoding="utf-8")

    from fastapi.testclient import TestClient

    from livemem.model.embedding import Embedder
    from livemem.settings import CacheSettings, EncoderSettings
    from serving.app import create_app
    from serving.settings import Settings

    rng = np.random.default_rng(5)
    latencies = []
    hits = []
    with TestClient(
        create_app(
            Settings(index_dir=home.root, warm_up=True),
            Embedder.configured(EncoderSettings.from_env(), CacheSettings.from_env().onnx_cache, threads=1),
        )
    ) as client:
        client.post("/gis/query", json={"query": "warm up", "n_results": 10})
        for i in range(args.queries):
            lon0, lat0 = rng.uniform(-82.0, -78.5), rng.uniform(37.5, 39.9)
            body = {
                "query": f"food pantry near town {i}",
                "n_results": 10,
                "bbox": [lon0, lat0, lon0 + 0.5, lat0 + 0.5],
            }
            start = time.perf_counter()
            response = client.post("/gis/query", json=body)
            latencies.append((time.perf_counter() - start) * 1000)
            assert response.status_code == 200, response.text
            hits.append(response.json()["candidates"])
    p50, p99 = (float(np.percentile(latencies, q)) for q in (50, 99))
    results = {
        "command": "python -m bench.gbim_bench",
        "date": iso(utc_now()),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load": os.getloadavg(),
        },
        "export": {
            "features": len(frame),
            "entities": len(entities),
            "quarantined": len(quarantined),
            "repaired": sum(e["flags"]["geometry_repaired"] for e in entities),
            "with_county": with_county,
            "relations": len(relations),
            "read_counties_s": round(t1 - t0, 3),
            "entities_s": round(t2 - t1, 3),
            "relations_s": round(t3 - t2, 3),
            "total_s": round(export_s, 3),
            "target_s": 20.0,
            "passed": export_s <= 20.0,
        },
        "gis_query": {
            "queries": len(latencies),
            "p50_ms": round(p50, 2),
            "p99_ms": round(p99, 2),
            "median_candidates_in_bbox": float(np.median(hits)),
            "target_p50_ms": 25.0,
            "passed": p50 <= 25.0,
        },
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gbim.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    e, q = results["export"], results["gis_query"]
    md = f"""# GBIM benchmark

Command: `.venv/bin/python -m bench.gbim_bench` — {results["date"]}
Machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; load {tuple(round(x, 2) for x in os.getloadavg())}.

| measure | value | target |
|---|---|---|
| export of {e["features"]:,} features (entities + relations, embedding excluded) | {e["total_s"]} s | ≤ 20 s ({"PASS" if e["passed"] else "FAIL"}) |
| of which: county polygons read / entities (repair, centroids, reprojection, county) / relations | {e["read_counties_s"]} / {e["entities_s"]} / {e["relations_s"]} s | |
| entities / repaired / quarantined / with a county / relations | {e["entities"]:,} / {e["repaired"]:,} / {e["quarantined"]:,} / {e["with_county"]:,} / {e["relations"]:,} | |
| `/gis/query` with a 0.5° bbox at {e["entities"]:,} entities, p50 / p99 (TestClient, query encoded by the model) | {q["p50_ms"]} / {q["p99_ms"]} ms | p50 ≤ 25 ms ({"PASS" if q["passed"] else "FAIL"}) |
| entities inside the bbox (median) | {q["median_candidates_in_bbox"]:,.0f} | |
"""
    (RESULTS / "gbim.md").write_text(md, encoding="utf-8")
    print(md)


if __name__ == "__main__":
    main()
