"""The local_resources registry at 100,000 rows: verification time and resolver latency.

    .venv/bin/python -m bench.registry_bench [--rows 100000] [--queries 2000]

1. **generate**: ``--rows`` synthetic programs over every in-use standard WV ZIP (county from the ZIP data), each
   with 0-4 coverage ZIPs, phones, emails, URLs and verification dates spread over the last 300 days (so some are
   stale); 1 % of rows carry one defect each (bad ZIP, wrong county, bad phone / email / URL, unknown type,
   duplicate id) and 1 % are deprecated. Written as a CSV file under ``bench/.work/registry/``.
2. **verify**: ``load_rows`` + ``verify`` (targets: ≤ 10 s in all), timed after a warm-up that loads the ZIP data
   and compiles the schema once (what a long-running Dagster process pays once).
3. **stage**: ``run_verification`` on an empty index home: load, verify and write the version's tables
   (registry, registry_issues, registry_history) and manifest; then publish.
4. **resolve**: the registry of the published version is loaded into memory once (timed), then ``--queries``
   random calls of ``resolve`` (ZIP; county; ZIP + resource_type; id), limit 50 like ``GET /resources``;
   p50 / p95 / p99 per kind and overall (target p50 ≤ 5 ms).

Results: ``bench/results/registry.json`` and ``bench/results/registry.md``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from livemem import registry
from livemem.registry import FIELDS, RESOURCE_TYPES, RegistryConfig
from livemem.version.store import IndexHome

WORK = Path("bench/.work/registry")
RESULTS = Path("bench/results")


def machine_facts() -> dict[str, Any]:
    cpu_model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
    mem = next(
        (
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        ),
        0,
    )
    return {
        "hostname": platform.node(),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model,
        "ram_gib": round(mem / 1024 / 1024, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        **{dist: metadata.version(dist) for dist in ("pandas", "numpy", "duckdb", "zipcodes", "fastjsonschema")},
    }


def wv_places() -> list[tuple[str, str]]:
    import zipcodes

    return [
        (z["zip_code"], z["county"].removesuffix(" County"))
        for z in zipcodes.filter_by(state="WV")
        if z["active"] and z["zip_code_type"] == "STANDARD"
    ]


def generate(path: Path, n: int, now: datetime, seed: int = 7) -> dict[str, int]:
    rng = random.Random(seed)
    places = wv_places()
    zips = [z for z, _ in places]
    defects = ["zip", "county", "phone", "email", "url", "type", "dup"]
    counts = {"defective": 0, "deprecated": 0}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(FIELDS))
        writer.writeheader()
        for i in range(n):
            zip_code, county = rng.choice(places)
            verified = now - timedelta(days=rng.randint(0, 300))
            row = {
                "local_resource_id": f"wv-{i:06d}",
                "name": f"Program {i} of {county} County",
                "description": "Synthetic program for the registry benchmark.",
                "resource_type": rng.choice(RESOURCE_TYPES),
                "county": county,
                "zip": zip_code,
                "zip_coverage": " ".join(rng.sample(zips, rng.randint(0, 4))),
                "address": f"{rng.randint(1, 999)} Main Street",
                "contact_phone": f"(304) 555-01{rng.randint(0, 99):02d}",
                "contact_email": f"program{i}@example.org",
                "url": f"https://example.org/programs/{i}",
                "eligibility": "Residents of the county.",
                "hours": "Mon-Fri 9:00-5:00",
                "verification_status": "verified",
                "last_verified_at": verified.date().isoformat(),
                "verified_by": "benchmark",
                "deprecated_at": "",
            }
            roll = rng.random()
            if roll < 0.01:
                counts["defective"] += 1
                defect = rng.choice(defects)
                if defect == "zip":
                    row["zip"] = "99999"
                elif defect == "county":
                    row["county"] = "Nowhere"
                elif defect == "phone":
                    row["contact_phone"] = "555-01"
                elif defect == "email":
                    row["contact_email"] = "nobody@"
                elif defect == "url":
                    row["url"] = "ftp://example.org"
                elif defect == "type":
                    row["resource_type"] = "bowling"
                else:
                    row["local_resource_id"] = "wv-000000"
            elif roll < 0.02:
                counts["deprecated"] += 1
                row["deprecated_at"] = (now - timedelta(days=5)).date().isoformat()
            writer.writerow(row)
    return counts


def percentiles(samples: list[float]) -> dict[str, float]:
    arr = np.array(samples) * 1000
    return {
        "n": len(samples),
        "p50_ms": round(float(np.percentile(arr, 50)), 3),
        "p95_ms": round(float(np.percentile(arr, 95)), 3),
        "p99_ms": round(float(np.percentile(arr, 99)), 3),
        "mean_ms": round(float(arr.mean()), 3),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=2000)
    args = parser.parse_args(argv)
    now = datetime.now(UTC)
    shutil.rmtree(WORK, ignore_errors=True)
    results: dict[str, Any] = {
        "command": "python -m bench.registry_bench " + " ".join(sys.argv[1:] if argv is None else argv),
        "run_at": now.isoformat(),
        "machine": machine_facts(),
        "rows": args.rows,
    }
    csv_path = WORK / "local_resources.csv"
    t = time.perf_counter()
    results["generated"] = generate(csv_path, args.rows, now)
    results["generate_s"] = round(time.perf_counter() - t, 3)
    cfg = RegistryConfig(kind="csv", path=csv_path)

    t = time.perf_counter()
    registry.zip_data()
    registry._fast_validator()
    results["warm_up_s"] = round(time.perf_counter() - t, 3)  # once per process

    t = time.perf_counter()
    loaded = registry.load_rows(cfg)
    t_load = time.perf_counter()
    verified = registry.verify(loaded, cfg, now)
    t_verify = time.perf_counter()
    results["verify"] = {
        "load_s": round(t_load - t, 3),
        "verify_s": round(t_verify - t_load, 3),
        "total_s": round(t_verify - t, 3),
        "target_s": 10.0,
        "counts": verified.counts(),
        "issues_by_rule": verified.issues_by_rule(),
    }

    home = IndexHome(WORK / "index")
    t = time.perf_counter()
    run = registry.run_verification(cfg, home, now=now)
    home.publish(run.version_id, run.base_version, retention=2)
    results["stage_and_publish"] = {"total_s": round(time.perf_counter() - t, 3), "timings": run.timings}

    registry._cached_index.cache_clear()
    t = time.perf_counter()
    index = registry.load_registry_index(home.version_dir(run.version_id))
    results["index_load_s"] = round(time.perf_counter() - t, 3)

    rng = random.Random(11)
    zips = [z for z in {r["zip"] for r in index.rows}]
    counties = sorted({r["county"] for r in index.rows})
    ids = list(index.by_id)
    kinds = {
        "zip": lambda: registry.resolve(index, zip=rng.choice(zips), limit=50),
        "county": lambda: registry.resolve(index, county=rng.choice(counties), limit=50),
        "zip_and_type": lambda: registry.resolve(
            index, zip=rng.choice(zips), resource_type=rng.choice(RESOURCE_TYPES), limit=50
        ),
        "id": lambda: registry.resolve(index, local_resource_id=rng.choice(ids), limit=50),
    }
    samples: dict[str, list[float]] = {k: [] for k in kinds}
    sizes: dict[str, list[int]] = {k: [] for k in kinds}
    for _ in range(50):
        kinds["zip"]()
    for q in range(args.queries):
        kind = list(kinds)[q % len(kinds)]
        t = time.perf_counter()
        found = kinds[kind]()
        samples[kind].append(time.perf_counter() - t)
        sizes[kind].append(found.total)
    results["resolve"] = {
        "all": {**percentiles([s for v in samples.values() for s in v]), "target_p50_ms": 5.0},
        **{k: {**percentiles(v), "mean_matches": round(float(np.mean(sizes[k])), 1)} for k, v in samples.items()},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "registry.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (RESULTS / "registry.md").write_text(report(results), encoding="utf-8")
    print(report(results))


def report(r: dict[str, Any]) -> str:
    m = r["machine"]
    v = r["verify"]
    lines = [
        "# Registry benchmark",
        "",
        f"`{r['command']}` on {r['run_at'][:19]}Z — {m['cpu_model']}, {m['nproc']} cores, {m['ram_gib']} GiB, "
        f"Python {m['python']}, pandas {m['pandas']}, duckdb {m['duckdb']}, zipcodes {m['zipcodes']}.",
        "",
        f"{r['rows']:,} synthetic WV rows ({r['generated']['defective']} with one defect, "
        f"{r['generated']['deprecated']} deprecated).",
        "",
        "| step | seconds | target |",
        "|---|---|---|",
        f"| ZIP data + schema compile (once per process) | {r['warm_up_s']} | |",
        f"| load CSV | {v['load_s']} | |",
        f"| verify (every rule) | {v['verify_s']} | |",
        f"| **load + verify** | **{v['total_s']}** | ≤ 10 |",
        f"| load + verify + stage tables and history + publish | {r['stage_and_publish']['total_s']} | |",
        f"| load the registry index of a version (serving, once per version) | {r['index_load_s']} | |",
        "",
        "Counts: " + ", ".join(f"{k} {n:,}" for k, n in v["counts"].items()),
        "",
        "| resolve (limit 50) | n | p50 ms | p95 ms | p99 ms | mean matches |",
        "|---|---|---|---|---|---|",
    ]
    for kind, s in r["resolve"].items():
        label = "**all** (target p50 ≤ 5 ms)" if kind == "all" else kind
        lines.append(
            f"| {label} | {s['n']} | {s['p50_ms']} | {s['p95_ms']} | {s['p99_ms']} | {s.get('mean_matches', '')} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
