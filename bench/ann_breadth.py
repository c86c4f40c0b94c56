"""Graph breadth and candidates against recall and latency on one built version (issue 38's tuning at 1M / 2M).

Loads one version of an index home that ``bench.scale --embedder structured`` built (its graphs included), runs the
same hybrid top-10 queries (vector given, as ``bench.scale``'s worker) exactly once (``LIVEMEM_ANN=exact``), then with
the graphs at each ``--breadths`` × ``--candidates`` setting, and prints one line per setting: hybrid p50 / p99,
recall@10 of the final top 10 against exact (ties at the exact 10th score count, as in ``bench.scale``) and of the
dense top 10 alone::

    .venv/bin/python -m bench.ann_breadth --home /tmp/scalework/size-2000000/index \\
        --breadths 1200,1600,2400 --candidates 400 --queries 200

One process, one worker's view; the machine's load average is printed with the results (it distorts latencies).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from bench.scale import DEFAULT_QUERIES, DEFAULT_WORK, WARMUP_QUERIES, make_embedder, percentiles_ms, read_jsonl


def _recall(found: list[tuple[list[int], list[float]]], truth: list[tuple[list[int], list[float]]]) -> float:
    shares = []
    for (rows, scores), (exact_rows, exact_scores) in zip(found, truth, strict=True):
        if not exact_rows:
            continue
        kth = exact_scores[-1]
        same = len(set(rows) & set(exact_rows))
        tied = sum(1 for r, x in zip(rows, scores, strict=True) if r not in exact_rows and x >= kth - 1e-6)
        shares.append(min(len(exact_rows), same + tied) / len(exact_rows))
    return round(float(np.mean(shares)), 4)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True, help="an index home (…/index)")
    parser.add_argument("--version", help="default: the one CURRENT names")
    parser.add_argument("--breadths", default="1600")
    parser.add_argument("--candidates", default="400")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--noise", type=float, default=1.0)
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK)
    args = parser.parse_args(argv)

    import torch
    from threadpoolctl import threadpool_limits

    from livemem.index import scan
    from livemem.query.retrieval import Retriever
    from livemem.query.types import Query
    from livemem.version.reader import load_snapshot
    from livemem.version.store import IndexHome

    threadpool_limits(1, user_api="blas")
    torch.set_num_threads(1)
    home = IndexHome(args.home)
    version = args.version or (args.home / "CURRENT").read_text().strip()
    t0 = time.perf_counter()
    snap = load_snapshot(home, version)
    print(f"loaded {version}: {snap.size:,} chunks in {time.perf_counter() - t0:.1f} s", flush=True)
    embedder = make_embedder("structured", args.noise, args.work)
    retriever = Retriever(embedder)
    texts = [q["text"] for q in read_jsonl(DEFAULT_QUERIES)]
    wanted = [texts[i % len(texts)] for i in range(args.queries + WARMUP_QUERIES)]
    vectors = embedder.encode_queries(wanted)
    collections = snap.collections_for(frozenset({"public"}))

    def run() -> tuple[list, list, list]:
        hybrid, dense, times = [], [], []
        for i, (text, vector) in enumerate(zip(wanted, vectors, strict=True)):
            started = time.perf_counter()
            result = retriever.search(snap, Query(text=text, top_k=10, mode="hybrid"), collections, vector=vector)
            if i >= WARMUP_QUERIES:
                times.append(time.perf_counter() - started)
                hybrid.append(([h.row for h in result.chunks], [h.score for h in result.chunks]))
                rows, scores = snap.dense.top(vector, 10)
                dense.append((rows.tolist(), scores.tolist()))
        return hybrid, dense, times

    scan.ANN_MODE = "exact"
    exact = run()
    scan.ANN_MODE = "auto"
    print(json.dumps({"setting": "exact", "hybrid": percentiles_ms(exact[2]), "load": os.getloadavg()}), flush=True)
    for candidates in (int(c) for c in args.candidates.split(",")):
        for breadth in (int(b) for b in args.breadths.split(",")):
            scan.ANN_CANDIDATES, scan.ANN_BREADTH = candidates, breadth
            found = run()
            line = {
                "candidates": candidates,
                "breadth": breadth,
                "hybrid": percentiles_ms(found[2]),
                "recall_at_10_hybrid": _recall(found[0], exact[0]),
                "recall_at_10_dense": _recall(found[1], exact[1]),
                "load": os.getloadavg(),
            }
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
