"""Hybrid top-10 latency at a built scale home, settings interleaved query by query (round 19's A/B tool).

A shared 2-core VM drifts by ±20 % over minutes, so two settings measured one after the other compare the machine,
not the settings. Here each query is asked under every setting in turn (the order rotating), after one exact pass
(``LIVEMEM_ANN=exact``) whose answers are the truth for recall@10 (ties at the exact 10th score count, as in
``bench.scale``). Settings: ``cbC_B`` (graph candidates C, breadth B). Prints p50 / p90 / p99 and recall per setting.

    .venv/bin/python bench/hybrid_interleaved.py bench/.work/scale/size-2000000/index 300 cb200_800,cb200_600

Run as a script (not ``-m``) so that ``PYTHONPATH`` chooses the code measured: an older tree unpacked with
``git archive <commit> livemem | tar -x -C /tmp/base`` (and ``ln -s $PWD/schemas /tmp/base/schemas``) is measured
with ``PYTHONPATH=/tmp/base:. .venv/bin/python bench/hybrid_interleaved.py ...`` in the same minutes as this one.
Each setting is the loaded snapshot under its own engine config (``Snapshot.with_engine``: the same segments); a tree
from before ``livemem.settings.EngineConfig`` (it set ``livemem.index.scan.ANN_*`` instead) is measured with the
script of its own commit (``git show <commit>:bench/hybrid_interleaved.py``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np


def main(argv: list[str]) -> int:
    import torch
    from threadpoolctl import threadpool_limits

    from bench.scale import DEFAULT_QUERIES, DEFAULT_WORK, WARMUP_QUERIES, make_embedder, read_jsonl, recall_at_10
    from livemem.engine.snapshot import load_snapshot
    from livemem.query.retrieval import Retriever
    from livemem.query.types import Query
    from livemem.settings import EngineConfig
    from livemem.version.store import IndexHome

    threadpool_limits(1, user_api="blas")
    torch.set_num_threads(1)
    root, n, settings = Path(argv[0]), int(argv[1]), argv[2].split(",") if len(argv) > 2 else ["cb200_800"]
    loaded = load_snapshot(IndexHome(root, engine=EngineConfig.from_env()), (root / "CURRENT").read_text().strip())
    embedder = make_embedder("structured", 1.0, DEFAULT_WORK)
    retriever = Retriever(embedder)
    texts = [q["text"] for q in read_jsonl(DEFAULT_QUERIES)]
    wanted = [texts[i % len(texts)] for i in range(n + WARMUP_QUERIES)]
    vectors = embedder.encode_queries(wanted)
    collections = loaded.collections_for(frozenset({"public"}))

    def use(setting: str):
        """The loaded snapshot searched under ``setting`` (its own engine config: the same segments)."""
        if setting == "exact":
            return loaded.with_engine(loaded.engine.replace(ann="exact"))
        candidates, breadth = setting[2:].split("_")
        return loaded.with_engine(
            loaded.engine.replace(ann="auto", ann_candidates=int(candidates), ann_breadth=int(breadth))
        )

    snaps = {s: use(s) for s in ["exact", *settings]}

    def ask(setting: str, text: str, vector: np.ndarray) -> tuple[float, tuple[list, list]]:
        t0 = time.perf_counter()
        query = Query(text=text, top_k=10, mode="hybrid")
        found = retriever.search(snaps[setting], query, collections, vector=vector)
        return time.perf_counter() - t0, ([h.row for h in found.chunks], [h.score for h in found.chunks])

    truth = [ask("exact", t, v)[1] for t, v in zip(wanted[WARMUP_QUERIES:], vectors[WARMUP_QUERIES:], strict=True)]
    times: dict[str, list[float]] = {s: [] for s in settings}
    answers: dict[str, list] = {s: [] for s in settings}
    for i, (text, vector) in enumerate(zip(wanted, vectors, strict=True)):
        for setting in settings[i % len(settings) :] + settings[: i % len(settings)]:
            took, answer = ask(setting, text, vector)
            if i >= WARMUP_QUERIES:
                times[setting].append(took * 1000)
                answers[setting].append(answer)
    for setting in settings:
        p50, p90, p99 = (float(np.percentile(times[setting], p)) for p in (50, 90, 99))
        print(f"{setting:12s} p50 {p50:6.2f}  p90 {p90:6.2f}  p99 {p99:6.2f} ms  "
              f"recall@10 {recall_at_10(answers[setting], truth)}", flush=True)  # fmt: skip
    print("load average", os.getloadavg())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
