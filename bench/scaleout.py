"""Scale-out benchmark on the bundled example (``examples/sources.yaml``):

(a) serving throughput of uvicorn with 2 workers vs 1 on the same published example index: 8 concurrent clients
    (threads, one keep-alive connection each), real HTTP on loopback, hybrid top-10 queries, result cache off,
    a fixed duration per server;
(b) a full build of the example (``dagster job execute -j build_index``, the default in-process executor) with
    Dagster's storage in PostgreSQL (``deploy/dagster-postgres.yaml``) vs SQLite (``deploy/dagster.yaml``). Every
    build starts from a fresh index home, so a fresh embedding cache: each one embeds every chunk. The two
    storages alternate, ``--builds`` times each; medians are compared.

    .venv/bin/python -m bench.scaleout [--seconds 20] [--builds 3] [--pg-dsn postgresql://...]

The Postgres server comes from ``--pg-dsn`` (default ``$LIVEMEM_TEST_PG_DSN``); the benchmark creates a database
for Dagster's storage per build and drops it afterwards. Results: ``bench/results/scaleout.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

from bench.serving_latency import throughput, uvicorn_server
from livemem.sources.config import PROJECT_ROOT
from livemem.version.store import IndexHome

RESULTS = PROJECT_ROOT / "bench" / "results"
BUILD_MEASURES = ("wall_s", "run_s", "index_build_s", "dagster_overhead_s")
EXAMPLE = PROJECT_ROOT / "examples" / "sources.yaml"
DEFAULT_DSN = "postgresql://livemem:livemem@127.0.0.1:5432/livemem_test"
# Questions a caseworker or a visitor would ask of the example corpus (benefits, governance, playbook, code).
QUERIES = [
    "how do I apply for SNAP benefits",
    "LIHEAP heating assistance eligibility",
    "Medicaid renewal deadline",
    "food pantry in Fayette County",
    "Raleigh County emergency housing",
    "who can see internal case notes",
    "what does the constitution say about sealed records",
    "how are decisions recorded",
    "breath phase of the project",
    "charter principles of the living memory",
    "caseworker first visit checklist",
    "what to do when a client has no ID",
    "how to query the index from Python",
    "client library retry behaviour",
    "scripts to export resources",
    "WIC program office hours",
    "utility shutoff protection in winter",
    "transportation to medical appointments",
    "statewide benefits FAQ income limits",
    "appeal a denied benefits application",
    "child care assistance in West Virginia",
    "referral to legal aid",
    "how attention decays for unused chunks",
    "who approves changes to governance",
]


def machine() -> dict[str, object]:
    meminfo = Path("/proc/meminfo").read_text().split("\n", 1)[0] if Path("/proc/meminfo").exists() else ""
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": len(os.sched_getaffinity(0)),
        "processor": platform.processor() or platform.machine(),
        "memory": meminfo.split(":", 1)[-1].strip(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def dagster_build(storage: str, dsn: str, work: Path) -> dict[str, float | str]:
    """One full build of the example in a fresh index home and DAGSTER_HOME; wall time and the run's own time."""
    from dagster import AssetKey, DagsterInstance

    tag = uuid.uuid4().hex[:10]
    home, index = work / f"dagster_{tag}", work / f"index_{tag}"
    home.mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(home), "RAG_SOURCES": str(EXAMPLE), "RAG_INDEX_DIR": str(index),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(PROJECT_ROOT)}  # fmt: skip
    admin = None
    if storage == "postgres":
        admin = psycopg.connect(dsn, autocommit=True)
        db = f"livemem_dagster_bench_{tag}"
        admin.execute(f"CREATE DATABASE {db}")
        info = admin.info
        pg_env = {"DAGSTER_PG_HOST": info.host, "DAGSTER_PG_PORT": str(info.port), "DAGSTER_PG_USER": info.user,
                  "DAGSTER_PG_PASSWORD": info.password, "DAGSTER_PG_DB": db}  # fmt: skip
        env.update(pg_env)
        os.environ.update(pg_env)  # for reading the run back below
        shutil.copy(PROJECT_ROOT / "deploy" / "dagster-postgres.yaml", home / "dagster.yaml")
    else:
        shutil.copy(PROJECT_ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    try:
        dagster = Path(sys.executable).parent / "dagster"
        started = time.perf_counter()
        proc = subprocess.run(
            [str(dagster), "job", "execute", "-m", "orchestration.definitions", "-j", "build_index"],
            cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
        )  # fmt: skip
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"{storage} build failed:\n{proc.stderr[-3000:]}")
        with DagsterInstance.from_config(str(home)) as instance:
            record = instance.get_run_records()[0]
            run_s = record.end_time - record.start_time
            chunks = instance.fetch_materializations(AssetKey("chunks"), limit=1).records[0].asset_materialization
            build_s = chunks.metadata["timings_s"].value["total_s"]
        manifest = IndexHome(index).current_manifest()
        return {"storage": storage, "wall_s": round(wall, 2), "run_s": round(run_s, 2), "index_build_s": build_s,
                "dagster_overhead_s": round(run_s - build_s, 2), "chunks": manifest["total_chunks"],
                "version": manifest["version_id"]}  # fmt: skip
    finally:
        if admin is not None:
            admin.execute(f"DROP DATABASE IF EXISTS {env['DAGSTER_PG_DB']} WITH (FORCE)")
            admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of each throughput run")
    parser.add_argument("--builds", type=int, default=3, help="builds per storage")
    parser.add_argument("--pg-dsn", default=os.environ.get("LIVEMEM_TEST_PG_DSN", DEFAULT_DSN))
    args = parser.parse_args()
    report: dict = {"command": "python -m bench.scaleout " + " ".join(sys.argv[1:]), "machine": machine()}
    with tempfile.TemporaryDirectory(prefix="livemem_scaleout_") as tmp:
        work = Path(tmp)
        builds = []
        for _ in range(args.builds):
            for storage in ("sqlite", "postgres"):
                builds.append(dagster_build(storage, args.pg_dsn, work))
                print("build:", builds[-1])
        medians = {
            s: {k: statistics.median(b[k] for b in builds if b["storage"] == s) for k in BUILD_MEASURES}
            for s in ("sqlite", "postgres")
        }
        report["build"] = {
            "job": "build_index (in-process executor), examples/sources.yaml",
            "embedding_cache": "fresh per build (a fresh index home each time): every chunk is embedded",
            "runs": builds,
            "median": medians,
            "ratio_postgres_over_sqlite_wall": round(medians["postgres"]["wall_s"] / medians["sqlite"]["wall_s"], 3),
            "ratio_postgres_over_sqlite_run": round(medians["postgres"]["run_s"] / medians["sqlite"]["run_s"], 3),
            "ratio_postgres_over_sqlite_dagster_overhead": round(
                medians["postgres"]["dagster_overhead_s"] / medians["sqlite"]["dagster_overhead_s"], 3
            ),
        }

        index = next(IndexHome(p) for p in sorted(work.glob("index_*")) if IndexHome(p).current())
        serving: dict[str, dict] = {}
        for workers in (1, 2):
            with uvicorn_server(index.root, cache_size=0, workers=workers) as url:
                throughput(url, QUERIES, 8, 3.0)  # warm-up: every worker has answered before the measured run
                serving[f"workers_{workers}"] = throughput(url, QUERIES, 8, args.seconds)
                print(f"{workers} worker(s):", serving[f"workers_{workers}"])
        report["serving"] = {
            "index": f"example index {index.current()} ({index.current_manifest()['total_chunks']} chunks)",
            "request": {"mode": "hybrid", "top_k": 10, "clients": 8, "result_cache": "off"},
            **serving,
            "ratio_2_over_1_workers": round(
                serving["workers_2"]["requests_per_s"] / serving["workers_1"]["requests_per_s"], 3
            ),
        }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "scaleout.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (RESULTS / "scaleout.md").write_text(markdown(report), encoding="utf-8")
    print(f"wrote {RESULTS / 'scaleout.json'} and scaleout.md")


def markdown(report: dict) -> str:
    build, serving, m = report["build"], report["serving"], report["machine"]
    lines = [
        "# Scale-out: serving workers, Dagster storage",
        "",
        f"Command: `{report['command']}`  ",
        f"Machine: {m['cpus']} CPUs ({m['processor']}), {m['memory']} memory, {m['platform']}, Python {m['python']}; "
        f"load average at start {m.get('load_average_at_start', 'not recorded')}",
        "",
        f"## Serving throughput, 1 vs 2 uvicorn workers ({serving['index']})",
        "",
        "8 concurrent clients, keep-alive HTTP on loopback, hybrid top-10, result cache off.",
        "",
        "| workers | seconds | requests | errors | requests/s | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for workers in (1, 2):
        r = serving[f"workers_{workers}"]
        lines.append(
            f"| {workers} | {r['seconds']} | {r['requests']} | {r['errors']} | {r['requests_per_s']} | "
            f"{r['p50_ms']} | {r['p99_ms']} |"
        )
    lines += [
        "",
        f"**Ratio 2 workers / 1 worker: {serving['ratio_2_over_1_workers']}**",
        "",
        "## Full example build: Dagster storage in PostgreSQL vs SQLite",
        "",
        f"`{build['job']}`; embedding cache: {build['embedding_cache']}.",
        "`wall` is the whole `dagster job execute` process, `run` the run's start to end as Dagster recorded it,",
        "`index build` the build's own time (the `chunks` asset's `timings_s.total_s`), `Dagster overhead` =",
        "run - index build (event writes, checks, publish).",
        "",
        "| storage | wall s | run s | index build s | Dagster overhead s |",
        "|---|---|---|---|---|",
    ]
    for r in build["runs"]:
        lines.append(
            f"| {r['storage']} | {r['wall_s']} | {r['run_s']} | {r['index_build_s']} | {r['dagster_overhead_s']} |"
        )
    for storage, med in build["median"].items():
        lines.append(
            f"| **median {storage}** | {med['wall_s']} | {med['run_s']} | {med['index_build_s']} | "
            f"{med['dagster_overhead_s']} |"
        )
    lines += [
        "",
        f"**Ratio Postgres / SQLite: wall {build['ratio_postgres_over_sqlite_wall']}, run "
        f"{build['ratio_postgres_over_sqlite_run']}, Dagster overhead "
        f"{build['ratio_postgres_over_sqlite_dagster_overhead']}**",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
