"""Graph links against recall: dense recall@10 of one segment's graph (as built) against a graph of the same
vectors built with other links (usearch HNSW, int8, inner product), for the SciFact train questions encoded as
``bench.scale``'s structured stand-in encodes them; exact top 10 by float32 products over every row::

    .venv/bin/python -m bench.graph_links --segment /tmp/scalework/size-2000000/index/parts/seg-<id> \\
        --connectivity 32 --expansion-add 256 --breadths 1600,3200

Prints one JSON line per (graph, breadth): recall@10 (a row tying the exact 10th score counts) and ms per walk.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import simsimd  # noqa: F401  (before usearch: livemem.index.ann)

from bench.scale import DEFAULT_QUERIES, DEFAULT_WORK, make_embedder, read_jsonl


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segment", type=Path, required=True)
    parser.add_argument("--connectivity", type=int, default=32)
    parser.add_argument("--expansion-add", type=int, default=256)
    parser.add_argument("--breadths", default="1600,3200")
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--noise", type=float, default=1.0)
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK)
    args = parser.parse_args(argv)
    from usearch.index import Index

    dense = np.load(args.segment / "dense.npy", mmap_mode="r")
    embedder = make_embedder("structured", args.noise, args.work)
    queries = np.asarray(
        embedder.encode_queries([q["text"] for q in read_jsonl(DEFAULT_QUERIES)][: args.queries]), dtype=np.float32
    )
    scores = np.empty((queries.shape[0], dense.shape[0]), np.float32)
    for a in range(0, dense.shape[0], 200_000):
        scores[:, a : a + 200_000] = queries @ np.asarray(dense[a : a + 200_000], dtype=np.float32).T
    truth = np.argsort(-scores, axis=1)[:, :10]
    kth = np.take_along_axis(scores, truth[:, 9:10], axis=1)[:, 0]

    def recall(index, breadth: int) -> tuple[float, float]:
        index.expansion_search = breadth
        hits, started = 0, time.perf_counter()
        for i, q in enumerate(queries):
            keys = index.search(q, args.count).keys.astype(np.int64)
            top = keys[np.argsort(-scores[i, keys], kind="stable")[:10]]
            tied = int(np.sum((scores[i, top] >= kth[i] - 1e-6) & ~np.isin(top, truth[i])))
            hits += min(10, len(set(top.tolist()) & set(truth[i].tolist())) + tied)
        return hits / (10 * len(queries)), (time.perf_counter() - started) / len(queries) * 1e3

    breadths = [int(b) for b in args.breadths.split(",")]
    built = Index.restore(str(args.segment / "ann.usearch"), view=True)
    for b in breadths:
        r, ms = recall(built, b)
        print(json.dumps({"graph": "as built", "breadth": b, "recall_at_10": r, "ms_per_walk": round(ms, 2)}))
    started = time.perf_counter()
    other = Index(ndim=dense.shape[1], metric="ip", dtype="i8", connectivity=args.connectivity,
                  expansion_add=args.expansion_add)  # fmt: skip
    for a in range(0, dense.shape[0], 100_000):
        end = min(a + 100_000, dense.shape[0])
        other.add(np.arange(a, end), np.asarray(dense[a:end], dtype=np.float32), threads=2)
    built_s = round(time.perf_counter() - started, 1)
    for b in breadths:
        r, ms = recall(other, b)
        print(json.dumps({"graph": f"connectivity {args.connectivity}, expansion_add {args.expansion_add}",
                          "built_s": built_s, "breadth": b, "recall_at_10": r, "ms_per_walk": round(ms, 2)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
