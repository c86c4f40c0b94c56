"""Hybrid top-10 latency of one code tree over the SciFact serving index, for an A/B of two trees run in turn.

The index is the one ``bench.serving_quality`` builds and publishes (``bench/.work/serving/rag_index``). Each run
asks the first ``n`` train queries (vectors encoded in one batch, not timed) ``passes`` times, one thread, and
prints the tree it loaded ``livemem`` from with the p50 / p90 of the timed passes (the first pass warms up). To
compare two trees, unpack the older one (``git archive <commit> | tar -x -C /tmp/base``) and alternate the runs in
the same minutes (a shared 2-core VM drifts by ±20 % over minutes)::

    for i in 1 2; do
      (cd /tmp/base && PYTHONPATH=/tmp/base $OLDPWD/.venv/bin/python $OLDPWD/bench/code_ab.py)
      PYTHONPATH=. .venv/bin/python bench/code_ab.py
    done
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "bench" / ".work" / "serving" / "rag_index"
QUERIES = ROOT.parent / "shared" / "data" / "ir" / "scifact" / "queries.train.jsonl"


def main(argv: list[str]) -> int:
    import torch

    import livemem
    from livemem.engine.snapshot import load_snapshot
    from livemem.model.embedding import Embedder
    from livemem.query.retrieval import Retriever
    from livemem.query.types import Query
    from livemem.settings import EngineConfig
    from livemem.version.store import IndexHome

    n, passes = (int(argv[0]) if argv else 400), (int(argv[1]) if len(argv) > 1 else 3)
    torch.set_num_threads(1)
    snap = load_snapshot(IndexHome(HOME, engine=EngineConfig.from_env()), (HOME / "CURRENT").read_text().strip())
    with open(QUERIES, encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh][:n]
    embedder = Embedder(threads=1)
    retriever = Retriever(embedder)
    vectors = np.stack([embedder.encode_one(t) for t in texts])
    collections = snap.collections_for(frozenset({"public"}))
    times = []
    for _ in range(passes):
        for text, vector in zip(texts, vectors, strict=True):
            t0 = time.perf_counter()
            retriever.search(snap, Query(text=text, top_k=10, mode="hybrid"), collections, vector=vector)
            times.append((time.perf_counter() - t0) * 1000)
    timed = times[len(texts) :]
    print(f"{livemem.__file__}: hybrid p50 {np.percentile(timed, 50):.3f} ms, p90 {np.percentile(timed, 90):.3f} ms "
          f"over {len(timed)} searches of {snap.size} chunks")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
