"""Retrieval quality of serving on SciFact: nDCG@10 and Recall@100 for dense, sparse and hybrid, and the sweep
that chose the fusion.

The corpus is indexed by the platform (``bench.serving_index``); queries run through the serving retrieval code
(``livemem.retrieval.Retriever.search``) with ``return: documents`` (each SciFact abstract is one parent file,
``docs/<_id>.md``), against the judgements of one split. Query vectors are encoded in one batch (the same model
and normalisation serving uses one query at a time).

The sweep (train split only: the test split is never looked at to choose anything) compares fusion methods and
parameters (``livemem.fusion``: RRF k and weights, min-max and z-score weighted sums, per-side depth) and BM25 k1/b
(``livemem.sparse.K1``/``B``, set in this process only). It scores each setting with ``fuse`` + ``top_documents``
over per-query dense and BM25 scores computed once (what ``search`` does for one collection with no filters; the
modes table, through ``search``, checks that). ``--compare VERSION`` also scores another published version of the
same index (e.g. one chunked differently) through ``search``.

    .venv/bin/python -m bench.serving_quality --split train    # writes bench/results/serving_quality.json and .md
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

from bench.serving_index import SCIFACT, WORK, ensure_index
from livemem import sparse
from livemem.config import PROJECT_ROOT
from livemem.embedding import Embedder
from livemem.fusion import FusionSettings, fuse
from livemem.reader import load_snapshot
from livemem.retrieval import Hit, Query, Retriever, top_documents
from livemem.store import IndexHome

RESULTS = PROJECT_ROOT / "bench" / "results"
SPARSE_WEIGHTS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0)
BM25_DEFAULTS = (sparse.K1, sparse.B)
BM25_GRID = [(k1, b) for k1 in (0.6, 0.9, 1.2, 1.5) for b in (0.3, 0.5, 0.75)]
# the hybrids each BM25 setting is scored with: the serving default and the runner-up method
BM25_FUSIONS = {
    "minmax 1:1": FusionSettings("minmax", sparse_weight=1.0),
    "zscore 1:1": FusionSettings("zscore", sparse_weight=1.0),
}


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


def _fusions() -> list[FusionSettings]:
    """The settings the sweep compares (weights are relative: only their ratio matters for min-max and z-score)."""
    grid = [FusionSettings("rrf", k=k, dense_weight=w) for k in (10, 30, 60) for w in (0.75, 1.0, 1.25)]
    for depth in (100, 1000):
        grid += [FusionSettings("minmax", sparse_weight=w, depth=depth) for w in SPARSE_WEIGHTS]
        grid += [FusionSettings("zscore", sparse_weight=w, depth=depth) for w in (0.3, 0.5, 0.75, 1.0, 1.25, 1.5)]
    grid += [
        FusionSettings("minmax", sparse_weight=w, depth=1000, sparse_depth=d) for d in (50, 200) for w in (0.5, 0.75)
    ]
    return grid


def _label(f: FusionSettings) -> str:
    if f.method == "rrf":
        return f"rrf k={f.k:g} dense={f.dense_weight:g} sparse={f.sparse_weight:g} depth={f.depth}"
    sparse_depth = "" if f.sparse_depth is None else f" sparse_depth={f.sparse_depth}"
    return f"{f.method} dense={f.dense_weight:g} sparse={f.sparse_weight:g} depth={f.depth}{sparse_depth}"


class Scores:
    """Each query's dense and BM25 scores over every chunk, computed once, and rankings fused from them."""

    def __init__(self, snap, queries: dict[str, str], vectors: np.ndarray) -> None:
        self.snap = snap
        self.texts = list(queries.values())
        self.dense = [np.asarray(snap.dense @ v, dtype=np.float32) for v in vectors]
        self.rows = np.arange(snap.size)
        self.paths = snap.columns["path"]
        self.bm25 = snap.sparse_for(frozenset({"public"}))
        self.sparse = self.sparse_scores()

    def sparse_scores(self) -> list[np.ndarray]:
        return [self.bm25.scores(t) for t in self.texts]

    def ranked(self, rows: np.ndarray, scores: np.ndarray) -> list[str]:
        documents = top_documents(self.snap, rows, scores, 100, lambda r, s: Hit(r, s))
        return [Path(self.paths[d.hits[0].row]).stem for d in documents]

    def evaluate(self, qrels: list[dict[str, int]], fusion: FusionSettings | None, sparse=None) -> dict[str, float]:
        """Hybrid with ``fusion``, or BM25 alone when it is None."""
        ndcg, recall = [], []
        for i, relevant in enumerate(qrels):
            s = (sparse or self.sparse)[i]
            if fusion is None:
                matched = np.flatnonzero(s > 0)
                ranked = self.ranked(matched, s[matched].astype(np.float64))
            else:
                ranked = self.ranked(*fuse(self.rows, self.dense[i], s, fusion))
            ndcg.append(ndcg_at(ranked, relevant, 10))
            recall.append(recall_at(ranked, relevant, 100))
        return {"ndcg@10": round(float(np.mean(ndcg)), 4), "recall@100": round(float(np.mean(recall)), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="train")
    parser.add_argument("--no-sweep", action="store_true", help="skip the fusion and BM25 parameter sweep")
    parser.add_argument("--compare", action="append", default=[], help="another published version to score too")
    parser.add_argument("--version", help="score this published version as it is (default: build, then current)")
    parser.add_argument("--output", default="serving_quality", help="results name under bench/results/")
    args = parser.parse_args()
    home = IndexHome(WORK / "rag_index") if args.version else ensure_index()
    snap = load_snapshot(home, args.version or home.current())
    queries, qrels = load_queries(args.split)
    embedder = Embedder()
    started = time.perf_counter()
    vectors = embedder.encode(list(queries.values()))
    encode_s = time.perf_counter() - started
    retriever = Retriever(embedder)
    defaults = retriever.fusion
    report = {
        "command": "python -m bench.serving_quality " + " ".join(sys.argv[1:]),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": _cpus()},
        "index_version": snap.version_id,
        "chunking": _manifest(home, snap.version_id).get("chunking"),
        "corpus_docs": len(set(snap.columns["parent_id"])),
        "chunks": snap.size,
        "split": args.split,
        "queries": len(queries),
        "return": "documents",
        "fusion": {"label": _label(defaults), **vars(defaults)},
        "batch_encode_s": round(encode_s, 2),
        "modes": _modes(retriever, snap, queries, vectors, qrels),
    }
    report["compared"] = []
    for version in args.compare:
        other = load_snapshot(home, version)
        manifest = _manifest(home, version)
        report["compared"].append(
            {
                "index_version": version,
                "chunking": manifest.get("chunking"),
                "chunks": other.size,
                "modes": _modes(retriever, other, queries, vectors, qrels),
            }
        )
    if not args.no_sweep:
        if args.split != "train":
            raise SystemExit("the sweep chooses settings: run it on the train split only")
        report |= _sweep(snap, queries, vectors, qrels)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.output}.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (RESULTS / f"{args.output}.md").write_text(_markdown(report), encoding="utf-8")
    print(json.dumps(report["modes"], indent=2))


def _manifest(home: IndexHome, version: str) -> dict:
    return json.loads((home.version_dir(version) / "manifest.json").read_text(encoding="utf-8"))


def _modes(retriever, snap, queries, vectors, qrels) -> dict[str, dict[str, float]]:
    return {mode: evaluate(retriever, snap, queries, vectors, qrels, mode) for mode in ("dense", "sparse", "hybrid")}


def _sweep(snap, queries, vectors, qrels) -> dict:
    judged = [qrels[q] for q in queries]
    scores = Scores(snap, queries, vectors)
    sweep = []
    for fusion in _fusions():
        sweep.append({"setting": _label(fusion), **vars(fusion), **scores.evaluate(judged, fusion)})
        print(sweep[-1]["setting"], sweep[-1]["ndcg@10"])
    best = max(sweep, key=lambda r: r["ndcg@10"])
    bm25 = []
    for k1, b in BM25_GRID:
        sparse.K1, sparse.B = k1, b
        try:
            varied = scores.sparse_scores()
        finally:
            sparse.K1, sparse.B = BM25_DEFAULTS
        row = {"k1": k1, "b": b, "sparse": scores.evaluate(judged, None, varied)}
        for name, fusion in BM25_FUSIONS.items():
            row[name] = scores.evaluate(judged, fusion, varied)
        bm25.append(row)
        print(row)
    return {"fusion_sweep": sweep, "best": best["setting"], "bm25_sweep": bm25}


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


def _markdown(report: dict) -> str:
    lines = [
        f"# Serving retrieval quality on SciFact ({report['split']} split, return=documents)",
        "",
        f"Command: `{report['command']}` — {report['machine']['platform']}, {report['machine']['cpus']} CPUs.",
        f"Index {report['index_version']}: {report['corpus_docs']} documents, {report['chunks']} chunks "
        f"(chunking {json.dumps(report['chunking'])}); {report['queries']} queries with judgements.",
        "",
        "| mode | nDCG@10 | Recall@100 |",
        "|---|---|---|",
    ]
    for mode, scores in report["modes"].items():
        lines.append(f"| {mode} | {scores['ndcg@10']:.4f} | {scores['recall@100']:.4f} |")
    lines += ["", f"Hybrid (the serving default): {report['fusion']['label']}."]
    for other in report.get("compared", []):
        lines += [
            "",
            f"## Version {other['index_version']}: {other['chunks']} chunks, chunking {json.dumps(other['chunking'])}",
            "",
            "| mode | nDCG@10 | Recall@100 |",
            "|---|---|---|",
        ]
        for mode, scores in other["modes"].items():
            lines.append(f"| {mode} | {scores['ndcg@10']:.4f} | {scores['recall@100']:.4f} |")
    if "fusion_sweep" in report:
        lines += ["", "## Fusion sweep (hybrid, train)", "", "| setting | nDCG@10 | Recall@100 |", "|---|---|---|"]
        for row in report["fusion_sweep"]:
            lines.append(f"| {row['setting']} | {row['ndcg@10']:.4f} | {row['recall@100']:.4f} |")
        lines += ["", f"Best: {report['best']}.", "", "## BM25 k1 / b (train; set in this process only)", ""]
        names = list(BM25_FUSIONS)
        lines += [
            "| k1 | b | BM25 nDCG@10 | BM25 Recall@100 | "
            + " | ".join(f"{n} nDCG@10 | {n} Recall@100" for n in names)
            + " |",
            "|---|---|---|---|" + "---|---|" * len(names),
        ]
        for row in report["bm25_sweep"]:
            cells = [row["sparse"], *(row[n] for n in names)]
            lines.append(
                f"| {row['k1']} | {row['b']} | "
                + " | ".join(f"{c['ndcg@10']:.4f} | {c['recall@100']:.4f}" for c in cells)
                + " |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
