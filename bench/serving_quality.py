"""Retrieval quality of serving on SciFact: nDCG@10 and Recall@100 for dense, sparse and hybrid.

The corpus is indexed by the platform (``bench.serving_index``); queries run through the serving retrieval code
(``livemem.retrieval.Retriever.search``) with ``return: documents`` (each SciFact abstract is one parent file,
``docs/<_id>.md``), against the train queries and judgements. Query vectors are encoded in one batch (the same
model and normalisation serving uses one query at a time). It also sweeps the fusion constant ``k`` and the
dense weight of reciprocal rank fusion on the train split, to document the defaults.

    .venv/bin/python -m bench.serving_quality            # writes bench/results/serving_quality.json and .md
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import numpy as np

from bench.serving_index import SCIFACT, ensure_index
from livemem.config import PROJECT_ROOT
from livemem.embedding import Embedder
from livemem.reader import load_snapshot
from livemem.retrieval import FusionSettings, Query, Retriever

RESULTS = PROJECT_ROOT / "bench" / "results"
K_VALUES = (10, 30, 60, 100)
DENSE_WEIGHTS = (0.5, 0.75, 1.0, 1.25, 1.5)


def load_queries(split: str) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    queries = {}
    with open(SCIFACT / f"queries.{split}.jsonl", encoding="utf-8") as fh:
        for line in fh:
            q = json.loads(line)
            queries[q["_id"]] = q["text"]
    qrels: dict[str, dict[str, int]] = {}
    with open(SCIFACT / "qrels" / f"{split}.tsv", encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            qid, doc, score = line.rstrip("\n").split("\t")
            if int(score) > 0:
                qrels.setdefault(qid, {})[doc] = int(score)
    return {q: t for q, t in queries.items() if q in qrels}, qrels


def ndcg_at(ranked: list[str], relevant: dict[str, int], k: int) -> float:
    dcg = sum(relevant.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(rel / math.log2(i + 2) for i, rel in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: list[str], relevant: dict[str, int], k: int) -> float:
    return len(set(ranked[:k]) & set(relevant)) / len(relevant)


def evaluate(retriever, snap, queries, vectors, qrels, mode: str) -> dict[str, float]:
    ndcg, recall = [], []
    paths = snap.columns["path"]
    started = time.perf_counter()
    for (qid, text), vector in zip(queries.items(), vectors, strict=True):
        found = retriever.search(
            snap, Query(text, top_k=100, mode=mode, return_="documents"), ["scifact"], vector=vector
        )
        ranked = [Path(paths[d.hits[0].row]).stem for d in found.documents]
        ndcg.append(ndcg_at(ranked, qrels[qid], 10))
        recall.append(recall_at(ranked, qrels[qid], 100))
    return {
        "ndcg@10": round(float(np.mean(ndcg)), 4),
        "recall@100": round(float(np.mean(recall)), 4),
        "ms_per_query_excluding_encoding": round((time.perf_counter() - started) * 1000 / len(queries), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="train")
    parser.add_argument("--no-sweep", action="store_true", help="skip the fusion parameter sweep")
    args = parser.parse_args()
    home = ensure_index()
    snap = load_snapshot(home, home.current())
    queries, qrels = load_queries(args.split)
    embedder = Embedder()
    started = time.perf_counter()
    vectors = embedder.encode(list(queries.values()))
    encode_s = time.perf_counter() - started
    retriever = Retriever(embedder)
    defaults = retriever.fusion
    report = {
        "command": f"python -m bench.serving_quality --split {args.split}",
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": _cpus()},
        "index_version": snap.version_id,
        "corpus_docs": len(set(snap.columns["parent_id"])),
        "chunks": snap.size,
        "split": args.split,
        "queries": len(queries),
        "return": "documents",
        "fusion": {"method": "weighted reciprocal rank fusion", **vars(defaults)},
        "batch_encode_s": round(encode_s, 2),
        "modes": {
            mode: evaluate(retriever, snap, queries, vectors, qrels, mode) for mode in ("dense", "sparse", "hybrid")
        },
    }
    if not args.no_sweep:
        sweep = []
        for k in K_VALUES:
            for weight in DENSE_WEIGHTS:
                retriever.fusion = FusionSettings(k=k, dense_weight=weight, sparse_weight=1.0, depth=defaults.depth)
                scores = evaluate(retriever, snap, queries, vectors, qrels, "hybrid")
                sweep.append({"k": k, "dense_weight": weight, "sparse_weight": 1.0, **scores})
                print(sweep[-1])
        report["fusion_sweep"] = sweep
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "serving_quality.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (RESULTS / "serving_quality.md").write_text(_markdown(report), encoding="utf-8")
    print(json.dumps(report["modes"], indent=2))


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


def _markdown(report: dict) -> str:
    lines = [
        f"# Serving retrieval quality on SciFact ({report['split']} split, return=documents)",
        "",
        f"Command: `{report['command']}` — {report['machine']['platform']}, {report['machine']['cpus']} CPUs.",
        f"Index {report['index_version']}: {report['corpus_docs']} documents, {report['chunks']} chunks; "
        f"{report['queries']} queries with judgements.",
        "",
        "| mode | nDCG@10 | Recall@100 |",
        "|---|---|---|",
    ]
    for mode, scores in report["modes"].items():
        lines.append(f"| {mode} | {scores['ndcg@10']:.4f} | {scores['recall@100']:.4f} |")
    fusion = report["fusion"]
    lines += ["", f"Hybrid: weighted RRF, k={fusion['k']}, dense weight {fusion['dense_weight']}, "
              f"sparse weight {fusion['sparse_weight']}, depth {fusion['depth']}."]  # fmt: skip
    if "fusion_sweep" in report:
        lines += [
            "",
            "## Fusion sweep (hybrid)",
            "",
            "| k | dense weight | nDCG@10 | Recall@100 |",
            "|---|---|---|---|",
        ]
        for row in report["fusion_sweep"]:
            lines.append(f"| {row['k']} | {row['dense_weight']} | {row['ndcg@10']:.4f} | {row['recall@100']:.4f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
