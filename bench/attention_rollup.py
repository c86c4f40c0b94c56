"""Benchmark: the nightly attention rollup of 1,000,000 trace events in 4 files over 100,000 chunks.

    .venv/bin/python -m bench.attention_rollup [--events 1000000] [--chunks 100000] [--files 4]

Builds a synthetic index version (100,000 chunk rows, 10 % sealed) and a day of traces shaped like the serving
app's (queries returning 10 chunks each, Zipf-like popularity, 5 % of queries with feedback, some malformed
lines), then times ``livemem.usage.attention.rollup_day`` in a fresh process and records its peak memory (max RSS).
Target: ≤ 30 s. Results: bench/results/attention_rollup.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from datetime import date
from pathlib import Path

import duckdb
import numpy as np

from livemem.dates import iso, utc_now
from livemem.sources.config import PROJECT_ROOT
from livemem.version import connect
from livemem.version.store import MANIFEST, IndexHome

WORK = PROJECT_ROOT / "bench" / ".work" / "attention"
RESULTS = PROJECT_ROOT / "bench" / "results"
DAY = date(2026, 3, 1)
TARGET_S = 30.0


def build_index(home: IndexHome, chunks: int) -> None:
    """One published version with ``chunks`` chunk rows (enough columns for the rollup and its check)."""
    from livemem.version.schema import LAYOUT_VERSION
    from livemem.version.segments import append_rows
    from livemem.version.staging import init_chunk_tables

    version = home.new_version_id()
    path = home.version_dir(version)
    path.mkdir(parents=True)
    con = connect(path, read_only=False)
    init_chunk_tables(con)
    rows = con.execute(
        f"""
        SELECT
            uuid()::VARCHAR AS chunk_id, 'bench' AS source, 'bench' AS collection, 'public' AS access,
            'chunk ' || i AS content, md5(i::VARCHAR) || md5(i::VARCHAR) AS content_hash,
            md5(i::VARCHAR) || md5((i + 1)::VARCHAR) AS embed_hash,
            CASE WHEN i % 10 = 0 THEN 'SEALED' ELSE 'OPEN' END AS seal_state, 'docs/' || (i // 5) || '.md' AS path,
            repeat('a', 40) AS commit_sha, '2026-01-01T00:00:00+00:00' AS timestamp, 'markdown' AS type, 7 AS size,
            '2026-01-01T00:00:00+00:00' AS created_at, '2026-01-01T00:00:00+00:00' AS updated_at,
            '[]' AS heading_path, i % 5 AS chunk_index, uuid()::VARCHAR AS parent_id, NULL AS domain
        FROM range({chunks}) t(i)
        """
    ).df()
    segment = append_rows(con, path, rows)
    con.execute("INSERT INTO attention SELECT chunk_id, 0, NULL FROM chunks")
    con.close()
    now = iso(utc_now())
    manifest = {
        "version_id": version, "base_version": None, "layout_version": LAYOUT_VERSION,
        "segments": [{"id": segment, "chunks": chunks, "parents": 0}], "created_at": now, "last_updated": now,
        "model": {"id": "bench", "dim": 384}, "total_chunks": chunks, "total_parents": chunks // 5,
        "sealed_chunks": chunks // 10, "index_size_mb": 0, "collections": {"bench": {"access": "public", "chunks": chunks}},
        "sources": {}, "breath_at_update": {"phase": "Δ3", "tone": "normal"},
        "governance": {"max_chunks": chunks, "max_size_mb": 10_000, "status": "ok"},
        "attention_stats": {"avg_score": 0, "high_attention_chunks": 0, "never_used_chunks": chunks}, "changes": {},
    }  # fmt: skip
    (path / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    home.current_file.write_text(version + "\n", encoding="utf-8")


def write_traces(home: IndexHome, events: int, files: int, seed: int = 7) -> dict[str, int]:
    """Trace files like the serving app's: per query, one retrieval event per result; some feedback."""
    con = connect(home.version_dir(home.current()))
    ids = [r[0] for r in con.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id").fetchall()]
    con.close()
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(ids) + 1) ** 0.8
    weights /= weights.sum()
    home.traces.mkdir(parents=True, exist_ok=True)
    written = malformed = feedback = 0
    queries = events // 10 + 1000
    seconds = rng.integers(0, 86_400, size=queries)
    # popularity-weighted picks for every query at once (drawing per query with p= would be O(chunks) each)
    all_picks = rng.choice(len(ids), size=(queries, 10), p=weights)
    with ExitStack() as stack:
        handles = [
            stack.enter_context(open(home.traces / f"{DAY.isoformat()}-bench-{n}.jsonl", "w", encoding="utf-8"))
            for n in range(files)
        ]
        query = 0
        while written < events:
            trace = str(uuid.uuid4())
            stamp = f"{DAY.isoformat()}T{seconds[query] // 3600:02d}:{seconds[query] // 60 % 60:02d}:{seconds[query] % 60:02d}Z"
            picks = list(dict.fromkeys(all_picks[query].tolist()))  # a query returns each chunk once
            out = handles[query % files]
            base = {"timestamp": stamp, "trace_id": trace, "query": f"question {query}", "breath_phase": "Δ3",
                    "agent": "serving", "role": "public", "index_version": "v", "useful": None}  # fmt: skip
            lines = [
                json.dumps(
                    {
                        **base,
                        "event": "retrieval",
                        "chunk_id": ids[p],
                        "rank": r + 1,
                        "score": 1.0 / (r + 1),
                        "context": {"related_chunks": []},
                    }
                )
                for r, p in enumerate(picks)
            ]
            if query % 20 == 0:
                judged = {**base, "event": "feedback", "chunk_id": ids[picks[0]], "useful": True, "query": None}
                lines.append(json.dumps({**judged, "context": {"related_chunks": []}}))
                feedback += 1
            if query % 1000 == 0:
                lines.append('{"truncated line')
                malformed += 1
            out.write("\n".join(lines) + "\n")
            written += len(lines)
            query += 1
    return {"lines": written, "queries": query, "feedback_events": feedback, "malformed_lines": malformed}


def run_rollup(root: Path) -> None:
    """Child process: time one rollup and print its numbers as JSON."""
    from livemem.sources.breath import Breath
    from livemem.usage.attention import AttentionConfig, rollup_day

    home = IndexHome(root)
    start = time.perf_counter()
    result = rollup_day(home, DAY, AttentionConfig(), Breath("Δ3", "normal"))
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "seconds": round(seconds, 3),
                "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "events": result.events,
                "malformed": result.malformed,
                "chunks_used": result.chunks_used,
                "staged": result.staged,
                "timings": result.timings,
                "attention_stats": result.attention_stats,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_rollup(Path(args.child))
        return
    import shutil

    shutil.rmtree(WORK, ignore_errors=True)
    home = IndexHome(WORK / "rag_index").ensure()
    t = time.perf_counter()
    build_index(home, args.chunks)
    shape = write_traces(home, args.events, args.files)
    setup_s = time.perf_counter() - t
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    child = subprocess.run(
        [sys.executable, "-m", "bench.attention_rollup", "--child", str(home.root)],
        capture_output=True, text=True, check=True, cwd=PROJECT_ROOT, env=env,
    )  # fmt: skip
    run = json.loads(child.stdout.strip().splitlines()[-1])
    results = {
        "command": "python -m bench.attention_rollup " + " ".join(sys.argv[1:]),
        "date": iso(utc_now()),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "duckdb": duckdb.__version__,
            "load_before": os.getloadavg(),
        },
        "setup": {"chunks": args.chunks, "files": args.files, "seconds": round(setup_s, 1), **shape},
        "rollup": run,
        "target_s": TARGET_S,
        "passed": run["seconds"] <= TARGET_S and run["events"] + run["malformed"] == shape["lines"],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "attention_rollup.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    md = [
        "# Attention rollup benchmark",
        "",
        f"Command: `.venv/bin/python -m bench.attention_rollup {' '.join(sys.argv[1:])}` — {results['date']}",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"DuckDB {duckdb.__version__}; load average before {tuple(round(x, 2) for x in os.getloadavg())}.",
        "",
        f"Input: {shape['lines']:,} trace lines ({shape['queries']:,} queries × 10 results, "
        f"{shape['feedback_events']:,} feedback events, {shape['malformed_lines']:,} malformed lines) in "
        f"{args.files} files, over {args.chunks:,} chunks (10 % sealed).",
        "",
        "| measure | value | target |",
        "|---|---|---|",
        f"| rollup wall time | {run['seconds']} s | ≤ {TARGET_S} s |",
        f"| peak memory (max RSS of the rollup process) | {run['max_rss_mb']} MB | recorded |",
        f"| events counted / malformed | {run['events']:,} / {run['malformed']:,} | all lines accounted for |",
        f"| chunks used that day | {run['chunks_used']:,} | |",
        "",
        f"Breakdown (s): {run['timings']}. Result: **{'PASS' if results['passed'] else 'FAIL'}**.",
        "",
    ]
    (RESULTS / "attention_rollup.md").write_text("\n".join(md), encoding="utf-8")
    print("\n".join(md))


if __name__ == "__main__":
    main()
