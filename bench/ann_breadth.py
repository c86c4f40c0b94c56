"""Graph breadth and candidates against recall and latency on one built version (issue 38's tuning at 1M / 2M).

Loads one version of an index home that ``bench.scale --embedder structured`` built (its graphs included), runs the
same hybrid top-10 queries (vector given, as ``bench.scale``'s worker) exactly once (``LIVEMEM_ANN=exact``), then with
the graphs at each ``--breadths`` × ``--candidates`` setting, and prints one line per setting: hybrid p50 / p99,
recall@10 of the final top 10 against exact (ties at the exact 10th score count, as in ``bench.scale``) and of the
dense top 10 alone::

    .venv/bin/python -m bench.ann_breadth --home /tmp/scalework/size-2000000/index \\
        --breadths 1200,1600,2400 --candidates 400 --queries 200

One process, one worker's view; the machine's load average is printed with the results (it distorts latencies).
``--clients N``: N threads ask the queries at once (a worker serving N requests together): per-query p50 / p99,
queries per second and the hybrid recall.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from bench.scale import (
    DEFAULT_QUERIES,
    DEFAULT_WORK,
    WARMUP_QUERIES,
    hybrid_answers,
    make_embedder,
    percentiles_ms,
    read_jsonl,
    recall_at_10,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True, help="an index home (…/index)")
    parser.add_argument("--version", help="default: the one CURRENT names")
    parser.add_argument("--breadths", default="1600")
    parser.add_argument("--candidates", default="400")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--noise", type=float, default=1.0)
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK)
    parser.add_argument(
        "--clients", type=int, default=1, help="threads querying the one snapshot at once (a worker's concurrency)"
    )
    args = parser.parse_args(argv)

    import torch
    from threadpoolctl import threadpool_limits

    from livemem.engine.snapshot import load_snapshot
    from livemem.query.retrieval import Retriever
    from livemem.settings import EngineConfig
    from livemem.version.store import IndexHome

    threadpool_limits(1, user_api="blas")
    torch.set_num_threads(1)
    home = IndexHome(args.home, engine=EngineConfig.from_env())
    version = args.version or (args.home / "CURRENT").read_text().strip()
    t0 = time.perf_counter()
    loaded = snap = load_snapshot(home, version)  # ``snap``: the loaded version under the setting measured
    print(f"loaded {version}: {snap.size:,} chunks in {time.perf_counter() - t0:.1f} s", flush=True)
    embedder = make_embedder("structured", args.noise, args.work)
    retriever = Retriever(embedder)
    texts = [q["text"] for q in read_jsonl(DEFAULT_QUERIES)]
    wanted = [texts[i % len(texts)] for i in range(args.queries + WARMUP_QUERIES)]
    vectors = embedder.encode_queries(wanted)
    collections = snap.collections_for(frozenset({"public"}))

    def run() -> tuple[list, list, list]:
        return hybrid_answers(snap, retriever, collections, wanted, vectors)

    def run_clients() -> tuple[list, float, list[float]]:
        """The hybrid top 10s of the queries after the warm-up ones, asked by ``--clients`` threads at once, the
        wall time they took and each query's time."""
        from concurrent.futures import ThreadPoolExecutor

        from livemem.query.types import Query

        def one(i: int) -> tuple[float, tuple[list, list]]:
            t0 = time.perf_counter()
            query = Query(text=wanted[i], top_k=10, mode="hybrid")
            result = retriever.search(snap, query, collections, vector=vectors[i])
            return time.perf_counter() - t0, ([h.row for h in result.chunks], [h.score for h in result.chunks])

        with ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(one, range(WARMUP_QUERIES)))
            t0 = time.perf_counter()
            out = list(pool.map(one, range(WARMUP_QUERIES, len(wanted))))
            wall = time.perf_counter() - t0
        return [answer for _, answer in out], wall, [took for took, _ in out]

    snap = loaded.with_engine(loaded.engine.replace(ann="exact"))
    exact = run()
    print(json.dumps({"setting": "exact", "hybrid": percentiles_ms(exact[2]), "load": os.getloadavg()}), flush=True)
    for candidates in (int(c) for c in args.candidates.split(",")):
        for breadth in (int(b) for b in args.breadths.split(",")):
            snap = loaded.with_engine(loaded.engine.replace(ann="auto", ann_candidates=candidates, ann_breadth=breadth))
            if args.clients > 1:
                answers, wall, took = run_clients()
                line = {
                    "candidates": candidates,
                    "breadth": breadth,
                    "clients": args.clients,
                    "hybrid": percentiles_ms(took),
                    "queries_per_s": round(len(took) / wall, 1),
                    "recall_at_10_hybrid": recall_at_10(answers, exact[0]),
                    "load": os.getloadavg(),
                }
            else:
                found = run()
                line = {
                    "candidates": candidates,
                    "breadth": breadth,
                    "hybrid": percentiles_ms(found[2]),
                    "recall_at_10_hybrid": recall_at_10(found[0], exact[0]),
                    "recall_at_10_dense": recall_at_10(found[1], exact[1]),
                    "load": os.getloadavg(),
                }
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
