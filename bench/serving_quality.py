"""Retrieval quality of serving on SciFact: nDCG@10 and Recall@100 for dense, sparse and hybrid, and the sweep
that chose the fusion.

The corpus is indexed by the platform (``bench.serving_index``); queries run through the serving retrieval code
(``livemem.query.retrieval.Retriever.search``) with ``return: documents`` (each SciFact abstract is one parent file,
``docs/<_id>.md``), against the judgements of one split. Query vectors are encoded in one batch (the same model
and normalisation serving uses one query at a time).

The sweep (train split only: the test split is never looked at to choose anything) compares fusion methods and
parameters (``livemem.query.fusion``: RRF k and weights, min-max and z-score weighted sums, per-side depth) and BM25 k1/b
(``livemem.index.sparse.K1``/``B``, set in this process only). It scores each setting with ``fuse`` + ``top_documents``
over per-query dense and BM25 scores computed once (what ``search`` does for one collection with no filters; the
modes table, through ``search``, checks that). ``--compare VERSION`` also scores another published version of the
same index (e.g. one chunked differently) through ``search``.

``--api`` also asks every question through the real app (a uvicorn process, ``/query``, result cache off, top 10)
in each mode: the numbers a client sees, with the serving encoder. ``--ideas`` (train only) measures the
query-side ideas of round 5 on the same per-query scores: document-level aggregation of chunk scores, a BM25
title field (postings built in memory from the snapshot's rows: the segment format is unchanged), pseudo-relevance
feedback (RM3 for BM25, Rocchio for the query vector) and the fusion variants, each with the nDCG@10 of two fixed
random halves of train (no test split ships with the data: the halves are the check against overfitting) and the
ms per query it adds, timed in the same run as the baseline.

``--feedback`` (train only, round 6) scores the pseudo-relevance feedback of hybrid search (``FusionSettings``
``feedback_*``: Rocchio from the first fused chunks, their cosine to the moved query added to the first fused
chunks) through ``search`` itself, setting by setting against feedback off, with the halves, the per-query
difference's standard error, and the ms per ``search`` of the default with and without it (interleaved).

    .venv/bin/python -m bench.serving_quality --split train    # writes bench/results/serving_quality.json and .md
    .venv/bin/python -m bench.serving_quality --split train --no-sweep --api --ideas --output serving_quality-r5
    .venv/bin/python -m bench.serving_quality --split train --no-sweep --api --feedback --output serving_quality-r6
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
from livemem.engine.snapshot import load_snapshot
from livemem.index import postings, sparse
from livemem.index.dense import top_order
from livemem.model.embedding import Embedder
from livemem.query.fusion import FusionSettings, fuse
from livemem.query.retrieval import Retriever, top_documents
from livemem.query.types import Hit, Query
from livemem.settings import CacheSettings, EncoderSettings
from livemem.sources.config import PROJECT_ROOT
from livemem.version.store import IndexHome

RESULTS = PROJECT_ROOT / "bench" / "results"
SPARSE_WEIGHTS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0)
BM25_DEFAULTS = (sparse.K1, sparse.B)
BM25_GRID = [(k1, b) for k1 in (0.6, 0.9, 1.2, 1.5) for b in (0.2, 0.3, 0.5, 0.75)]
# the hybrids each BM25 setting is scored with: the serving default and the runner-up method
BM25_FUSIONS = {
    "linear 1:0.5": FusionSettings("linear"),
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


def train_halves(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The two fixed random halves (a, b) of ``n`` train questions (seed 5): the check against overfitting, since
    SciFact ships no test split here. Every idea of every round is scored on these same halves."""
    order = np.random.default_rng(5).permutation(n)
    return order[: n // 2], order[n // 2 :]


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
    grid += [FusionSettings("linear", sparse_weight=w) for w in (0.3, 0.4, 0.5, 0.6, 0.75)]
    grid += [FusionSettings("linear", sparse_weight=0.5, depth=d) for d in (50, 100, 200, 300)]  # cheaper top-k
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
    feedback = (
        f" feedback m={f.feedback_chunks} beta={f.feedback_beta:g} w={f.feedback_weight:g} depth={f.feedback_depth}"
        if f.feedback
        else ""
    )
    sentences = f" sentences={f.sentence_weight:g} depth={f.sentence_depth}" if f.sentences else ""
    return (
        f"{f.method} dense={f.dense_weight:g} sparse={f.sparse_weight:g} depth={f.depth}{sparse_depth}{sentences}"
        f"{feedback}"
    )


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
    parser.add_argument("--api", action="store_true", help="also ask every question through the real app (HTTP)")
    parser.add_argument("--ideas", action="store_true", help="measure the round-5 query-side ideas (train only)")
    parser.add_argument("--timing", action="store_true", help="time search per fusion method, interleaved (A/B)")
    parser.add_argument("--feedback", action="store_true", help="sweep hybrid's pseudo-relevance feedback (train)")
    parser.add_argument("--sentences", action="store_true", help="sweep hybrid's sentence blend (train)")
    args = parser.parse_args()
    if (not args.no_sweep or args.ideas or args.feedback or args.sentences) and args.split != "train":
        raise SystemExit("the sweep and the ideas choose settings: run them on the train split only")
    home = IndexHome(WORK / "rag_index") if args.version else ensure_index()
    snap = load_snapshot(home, args.version or home.current())
    queries, qrels = load_queries(args.split)
    # Query vectors in float32 whatever the index's precision (int8-block by default), as in every round before:
    # the modes table compares indexes with the same queries; --api measures serving's own (int8) query vectors.
    # LIVEMEM_ENCODER / LIVEMEM_QUERY_PRECISION / LIVEMEM_ONNX_CACHE as the environment says; float32 index vectors
    embedder = Embedder.configured(
        EncoderSettings.from_env(index_precision="fp32"), CacheSettings.from_env().onnx_cache
    )
    started = time.perf_counter()
    vectors = embedder.encode(list(queries.values()))
    encode_s = time.perf_counter() - started
    retriever = Retriever(embedder)
    defaults = retriever.fusion_for(snap)  # with sentence vectors: the blend and its BM25 weight
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
    if args.api:
        report["api"] = _api(home, queries, qrels)
    if not args.no_sweep:
        report |= _sweep(snap, queries, vectors, qrels)
    if args.ideas:
        report["ideas"] = ideas(snap, queries, vectors, qrels)
    if args.timing:
        report["timing"] = fusion_timing(embedder, snap, queries, vectors)
    if args.feedback:
        report["feedback"] = feedback_sweep(embedder, snap, queries, vectors, qrels)
    if args.sentences:
        report["sentences"] = sentence_sweep(embedder, snap, queries, vectors, qrels)
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


def _api(home: IndexHome, queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> dict:
    """nDCG@10 per mode through the real app: a uvicorn process, ``/query`` (documents, top 10), cache off."""
    import httpx

    from bench.serving_latency import uvicorn_server

    out: dict = {}
    with (
        uvicorn_server(home.root, cache_size=0, workers=1, trace_dir=WORK / "quality") as url,
        httpx.Client(timeout=60) as client,
    ):
        for mode in ("dense", "sparse", "hybrid"):
            ndcg, versions, started = [], set(), time.perf_counter()
            for qid, text in queries.items():
                answer = client.post(
                    f"{url}/query", json={"query": text, "top_k": 10, "mode": mode, "return": "documents"}
                )
                answer.raise_for_status()
                body = answer.json()
                versions.add(body["index_version"])
                ranked = [Path(r["provenance"]["path"]).stem for r in body["results"]]
                ndcg.append(ndcg_at(ranked, qrels[qid], 10))
            out[mode] = {
                "ndcg@10": round(float(np.mean(ndcg)), 4),
                "ms_per_request": round((time.perf_counter() - started) * 1000 / len(queries), 2),
                "index_version": sorted(versions),
            }
            print("api", mode, out[mode], flush=True)
    return out


def fusion_timing(embedder: Embedder, snap, queries: dict[str, str], vectors: np.ndarray, rounds: int = 5) -> dict:
    """ms per hybrid ``search`` (documents, top 10, query already encoded) for each fusion method, interleaved
    query by query so a busy machine slows every method alike; the median of ``rounds`` passes over 200 queries."""
    methods = {"rrf": FusionSettings("rrf"), "minmax": FusionSettings("minmax"), "linear": FusionSettings("linear")}
    retrievers = {name: Retriever(embedder, fusion) for name, fusion in methods.items()}
    texts, passes = list(queries.values())[:200], {name: [] for name in methods}
    for _ in range(rounds):
        spent = dict.fromkeys(methods, 0.0)
        for text, vector in zip(texts, vectors, strict=False):
            for name, retriever in retrievers.items():
                started = time.perf_counter()
                retriever.search(snap, Query(text, return_="documents"), ["scifact"], vector=vector)
                spent[name] += time.perf_counter() - started
        for name in methods:
            passes[name].append(spent[name] * 1000 / len(texts))
    out = {name: round(float(np.median(v)), 3) for name, v in passes.items()}
    out |= {f"{name}_vs_rrf": round(out[name] / out["rrf"], 3) for name in methods}
    print("timing", out, flush=True)
    return out


def _settings_table(
    embedder: Embedder,
    snap,
    queries: dict[str, str],
    vectors: np.ndarray,
    qrels: dict[str, dict[str, int]],
    settings: list[tuple[str, FusionSettings]],
    step: str,
) -> list[dict]:
    """Train nDCG@10 of hybrid search (documents, top 10) through ``search`` for each ``(label, fusion)``, on the two
    fixed halves (seed 5), with the per-query difference to the first setting and its standard error, and the mean
    ms of the ``step`` timing (``Retrieval.timings_ms``)."""
    paths = snap.columns["path"]
    halves = train_halves(len(queries))
    rows, base = [], None
    for label, fusion in settings:
        retriever, values, spent = Retriever(embedder, fusion), [], []
        for (qid, text), vector in zip(queries.items(), vectors, strict=True):
            found = retriever.search(snap, Query(text, top_k=10, return_="documents"), ["scifact"], vector=vector)
            values.append(ndcg_at([Path(paths[d.hits[0].row]).stem for d in found.documents], qrels[qid], 10))
            spent.append(found.timings_ms.get(step, 0.0))
        values = np.array(values)
        base = values if base is None else base
        delta = values - base
        rows.append(
            {
                "setting": label,
                "ndcg@10": round(float(values.mean()), 4),
                **{f"half_{h}": round(float(values[i].mean()), 4) for h, i in zip("ab", halves, strict=True)},
                "delta": round(float(delta.mean()), 4),
                "delta_se": round(float(delta.std() / np.sqrt(delta.size)), 4),
                f"{step}_ms": round(float(np.mean(spent)), 3),
            }
        )
        print(step, rows[-1], flush=True)
    return rows


def _sentence_settings() -> list[tuple[str, FusionSettings]]:
    """Off (the round-5 fusion), the default, then the blend weight x BM25 weight grid at depth 200, then the depth
    at the default weights."""
    out = [
        ("off (linear 1 : 0.5, no blend)", FusionSettings(sentence_weight=0.0)),
        ("on (the default)", FusionSettings()),
    ]
    default = FusionSettings()
    for weight in (0.5, 0.6, 0.67, 0.75, 0.85, 1.0):
        for bm25 in (0.2, 0.25, 0.3, 0.35, 0.4, 0.5):
            if (weight, bm25) != (default.sentence_weight, default.sentence_sparse_weight):
                fusion = FusionSettings(sentence_weight=weight, sentence_sparse_weight=bm25)
                out.append((f"sentences={weight:g} sparse={bm25:g} depth=200", fusion))
    out += [(f"default, depth={d}", FusionSettings(sentence_depth=d)) for d in (20, 50, 100, 500, 1000)]
    return out


def sentence_sweep(
    embedder: Embedder, snap, queries: dict[str, str], vectors: np.ndarray, qrels: dict[str, dict[str, int]]
) -> dict:
    """The sentence blend's settings (``_sentence_settings``) through ``search``, and the check against overfitting
    the grid: the setting that is best on one half, scored on the other."""
    if not snap.dense.has_sentences:
        raise SystemExit(f"index {snap.version_id} has no sentence vectors (index.sentences: false?)")
    rows = _settings_table(embedder, snap, queries, vectors, qrels, _sentence_settings(), "sentences")
    grid = rows[1:]
    best = max(grid, key=lambda r: r["ndcg@10"])
    on_a, on_b = max(grid, key=lambda r: r["half_a"]), max(grid, key=lambda r: r["half_b"])
    return {
        "settings": rows,
        "best": best["setting"],
        "chosen_on_a": {"setting": on_a["setting"], "half_b": on_a["half_b"], "off_half_b": rows[0]["half_b"]},
        "chosen_on_b": {"setting": on_b["setting"], "half_a": on_b["half_a"], "off_half_a": rows[0]["half_a"]},
    }


def _feedback_settings() -> list[tuple[str, FusionSettings]]:
    """Off, the default, then one knob at a time around it (first chunks m, Rocchio beta, weight, depth)."""
    out = [
        ("off (linear 1 : 0.5, the default)", FusionSettings()),
        ("on (RAG_FUSION_FEEDBACK=1)", FusionSettings(feedback_chunks=1)),
    ]
    for chunks in (1, 3, 5):
        for weight in (0.2, 0.3, 0.5):
            if (chunks, weight) != (1, 0.3):
                out.append(
                    (f"m={chunks} beta=1 w={weight}", FusionSettings(feedback_chunks=chunks, feedback_weight=weight))
                )
    out += [(f"m=1 beta={b:g} w=0.3", FusionSettings(feedback_chunks=1, feedback_beta=b)) for b in (0.5, 2.0)]
    out += [(f"m=1 beta=1 w=0.3 depth={d}", FusionSettings(feedback_chunks=1, feedback_depth=d)) for d in (20, 1000)]
    return out


def feedback_sweep(
    embedder: Embedder, snap, queries: dict[str, str], vectors: np.ndarray, qrels: dict[str, dict[str, int]]
) -> dict:
    """Train nDCG@10 of hybrid search (documents) for each feedback setting, through ``search``, with the two fixed
    halves of ``Ideas`` (seed 5) and the standard error of the per-query difference to feedback off; then the ms per
    ``search`` (documents, top 10) of the default with and without feedback, interleaved, median of 3 passes."""
    rows = _settings_table(embedder, snap, queries, vectors, qrels, _feedback_settings(), "feedback")
    retrievers = {"off": Retriever(embedder), "on": Retriever(embedder, FusionSettings(feedback_chunks=1))}
    texts, passes = list(queries.values())[:200], {"off": [], "on": []}
    for _ in range(3):
        spent = dict.fromkeys(retrievers, 0.0)
        for text, vector in zip(texts, vectors, strict=False):
            for name, retriever in retrievers.items():
                started = time.perf_counter()
                retriever.search(snap, Query(text, return_="documents"), ["scifact"], vector=vector)
                spent[name] += time.perf_counter() - started
        for name in retrievers:
            passes[name].append(spent[name] * 1000 / len(texts))
    timing = {name: round(float(np.median(v)), 3) for name, v in passes.items()}
    timing["on_vs_off"] = round(timing["on"] / timing["off"], 3)
    print("feedback timing", timing, flush=True)
    return {"settings": rows, "timing": timing}


class Ideas:
    """The round-5 query-side ideas, scored on the per-query scores of ``Scores`` (train only). Document scores
    are a chunk score's maximum over each parent (what ``top_documents`` ranks by) unless an idea says otherwise."""

    def __init__(self, scores: Scores, qrels: list[dict[str, int]], vectors: np.ndarray) -> None:
        import scipy.sparse as sp

        self.s, self.vectors = scores, vectors
        snap = scores.snap
        names = np.array([Path(p).stem for p in scores.paths])
        self.docs, parent = np.unique(names, return_inverse=True)
        self.order = np.argsort(parent, kind="stable")
        self.starts = np.flatnonzero(np.r_[True, np.diff(parent[self.order]) != 0])
        self.rel = []
        for relevant in qrels:
            rel = np.zeros(self.docs.size)
            for doc, grade in relevant.items():
                i = int(np.searchsorted(self.docs, doc))
                if i < self.docs.size and self.docs[i] == doc:
                    rel[i] = grade
            self.rel.append(rel)
        self.idcg = [sum(1 / math.log2(i + 2) for i in range(min(10, len(r)))) for r in qrels]
        self.halves = train_halves(len(qrels))
        self.matrix = np.asarray(snap.dense.materialize(), dtype=np.float32)
        # PRF and the title field need per-term access: a term x chunk BM25 matrix built in memory from the rows
        records = [snap.record(r) for r in range(snap.size)]
        self.texts = [r["content"] for r in records]
        self.titles = [(r["metadata"].get("heading_path") or [""])[0] for r in records]
        tf, self.vocab = self._counts(self.texts)
        self.lengths = np.maximum(np.asarray(tf.sum(1)).ravel(), 1.0)
        df = np.asarray((tf > 0).sum(0)).ravel()
        self.idf = np.log(1 + (tf.shape[0] - df + 0.5) / (df + 0.5))
        m = tf.tocoo(copy=True)
        m.data = m.data / (m.data + sparse.K1 * (1 - sparse.B + sparse.B * self.lengths[m.row] / self.lengths.mean()))
        self.bm25 = m.tocsr()
        self.unit_tf = sp.csr_matrix(tf.multiply(1 / self.lengths[:, None]))  # P(term | chunk) for RM3
        self.query_terms = [self._query(t) for t in scores.texts]

    def _counts(self, texts: list[str]):
        from collections import Counter

        import scipy.sparse as sp

        vocab: dict[str, int] = {}
        rows, cols, vals = [], [], []
        for r, text in enumerate(texts):
            for term, count in Counter(postings.tokens(text)).items():
                rows.append(r)
                cols.append(vocab.setdefault(term, len(vocab)))
                vals.append(count)
        return sp.csr_matrix((vals, (rows, cols)), shape=(len(texts), len(vocab)), dtype=np.float64), vocab

    def _query(self, text: str) -> np.ndarray:
        q = np.zeros(len(self.vocab))
        for term in postings.tokens(text):
            if term in self.vocab:
                q[self.vocab[term]] += 1
        return q

    def doc_max(self, chunk_scores: np.ndarray) -> np.ndarray:
        return np.maximum.reduceat(chunk_scores[self.order], self.starts)

    def doc_sum(self, chunk_scores: np.ndarray) -> np.ndarray:
        return np.add.reduceat(chunk_scores[self.order], self.starts)

    def ndcg(self, i: int, doc_scores: np.ndarray) -> float:
        top = top_order(doc_scores, 10)
        gains = self.rel[i][top] * np.isfinite(doc_scores[top])
        return float((gains / np.log2(np.arange(top.size) + 2)).sum() / self.idcg[i])

    def score(self, name: str, per_query, note: str = "") -> dict:
        """nDCG@10 (all, and each half) of ``per_query(i) -> document scores``, and its ms per query."""
        started = time.perf_counter()
        values = np.array([self.ndcg(i, per_query(i)) for i in range(len(self.rel))])
        ms = (time.perf_counter() - started) * 1000 / len(self.rel)
        row = {"idea": name, "ndcg@10": round(float(values.mean()), 4)}
        row |= {f"half_{h}": round(float(values[idx].mean()), 4) for h, idx in zip("ab", self.halves, strict=True)}
        row |= {"ms_per_query": round(ms, 2), "note": note}
        print(row, flush=True)
        return row

    def fused(self, dense: np.ndarray, bm25: np.ndarray, fusion: FusionSettings) -> np.ndarray:
        full = np.full(dense.size, -np.inf)
        rows, scores = fuse(self.s.rows, dense, bm25, fusion)
        full[rows] = scores
        return self.doc_max(full)

    def bm25_only(self, bm25: np.ndarray) -> np.ndarray:
        return self.doc_max(np.where(bm25 > 0, bm25, -np.inf))

    def feedback(self, i: int, fusion: FusionSettings, chunks: int, terms: int, lam: float, beta: float):
        """RM3 (BM25) and Rocchio (dense) from the first ``chunks`` chunks of the hybrid ranking, weighted by how
        far each is above the next: (refined dense scores, refined BM25 scores)."""
        dense, bm25 = self.s.dense[i], self.s.sparse[i]
        rows, fused = fuse(self.s.rows, dense, bm25, fusion)
        top = top_order(fused, chunks + 1)
        rows, weight = rows[top[:chunks]], fused[top[:chunks]] - fused[top[-1]] + 1e-6
        weight = weight / weight.sum()
        if lam:
            expansion = np.asarray(self.unit_tf[rows].T @ weight).ravel()
            keep = np.argpartition(-expansion, terms)[:terms]
            model = np.zeros_like(expansion)
            model[keep] = expansion[keep] / expansion[keep].sum()
            q = self.query_terms[i]
            q = (1 - lam) * q / max(q.sum(), 1) + lam * model
            bm25 = np.asarray(self.bm25 @ (q * self.idf), dtype=np.float32).ravel()
        if beta:
            v = self.vectors[i] + beta * (weight[:, None] * self.matrix[rows]).sum(0)
            dense = (self.matrix @ (v / np.linalg.norm(v))).astype(np.float32)
        return dense, bm25


def ideas(snap, queries: dict[str, str], vectors: np.ndarray, qrels: dict[str, dict[str, int]]) -> list[dict]:
    """Each idea's train nDCG@10 (and per half) and ms per query (see ``Ideas``); rows in the order of docs/serving.md."""
    scores = Scores(snap, queries, vectors)
    x = Ideas(scores, [qrels[q] for q in queries], vectors)
    d, s = scores.dense, scores.sparse
    n = len(queries)
    rrf, minmax, linear = FusionSettings("rrf"), FusionSettings("minmax"), FusionSettings("linear")
    out = [
        x.score("dense (max chunk per document)", lambda i: x.doc_max(d[i])),
        x.score("BM25 (max chunk per document)", lambda i: x.bm25_only(s[i])),
        x.score("hybrid RRF k=10 (round 4 default)", lambda i: x.fused(d[i], s[i], rrf), "baseline"),
        x.score("hybrid min-max 1:1", lambda i: x.fused(d[i], s[i], minmax)),
        x.score("hybrid linear 1:0.5 (new default)", lambda i: x.fused(d[i], s[i], linear)),
    ]
    for w in (0.4, 0.6):
        out.append(
            x.score(
                f"hybrid linear 1:{w}", lambda i, w=w: x.fused(d[i], s[i], FusionSettings("linear", sparse_weight=w))
            )
        )

    # document-level aggregation: a document's other chunks add to its best one (per side), or fusion of documents
    def summed(chunk_scores: np.ndarray, share: float) -> np.ndarray:
        best = x.doc_max(chunk_scores)
        return best + share * (x.doc_sum(chunk_scores) - best)

    for share in (0.1, 0.3):
        out.append(
            x.score(
                f"BM25, document = max + {share} x its other chunks",
                lambda i, share=share: (lambda m: np.where(m > 0, m, -np.inf))(summed(s[i], share)),
            )
        )
    out.append(x.score("dense, document = max + 0.05 x its other chunks", lambda i: summed(d[i], 0.05)))

    def doc_fusion(i: int, method: str) -> np.ndarray:
        dd, ss = x.doc_max(d[i]), x.doc_max(s[i])
        rows, fused = fuse(np.arange(dd.size), dd, ss.astype(np.float32), FusionSettings(method))
        full = np.full(dd.size, -np.inf)
        full[rows] = fused
        return full

    for method in ("minmax", "linear"):
        out.append(x.score(f"fusion of documents (max chunk per side), {method}", lambda i, m=method: doc_fusion(i, m)))
    # title field: BM25 over the title alone, added to the chunk's BM25; or every chunk prefixed with its title
    title_scorer = sparse.SparseScorer([(postings.Postings.build(x.titles), np.arange(snap.size))], snap.size)
    prefixed = [t if t.startswith("# ") or not ti else f"{ti}\n{t}" for t, ti in zip(x.texts, x.titles, strict=True)]
    prefixed_scorer = sparse.SparseScorer([(postings.Postings.build(prefixed), np.arange(snap.size))], snap.size)
    everyone = np.ones(snap.size, dtype=bool)
    started = time.perf_counter()
    titles = [title_scorer.scores(t, everyone) for t in scores.texts]
    title_ms = (time.perf_counter() - started) * 1000 / n
    started = time.perf_counter()
    with_title = [prefixed_scorer.scores(t, everyone) for t in scores.texts]
    prefixed_ms = (time.perf_counter() - started) * 1000 / n
    for w in (0.2, 0.3):
        note = f"+{title_ms:.2f} ms/query (a second BM25 over titles)"
        out.append(x.score(f"BM25 + {w} x title-field BM25", lambda i, w=w: x.bm25_only(s[i] + w * titles[i]), note))
        out.append(
            x.score(
                f"hybrid linear, BM25 + {w} x title field",
                lambda i, w=w: x.fused(d[i], s[i] + w * titles[i], linear),
                note,
            )
        )
    note = f"{prefixed_ms:.2f} ms/query BM25 (index-time change: every chunk's postings hold its title)"
    out.append(x.score("BM25, every chunk prefixed with its title", lambda i: x.bm25_only(with_title[i]), note))
    out.append(
        x.score("hybrid linear, chunks prefixed with their title", lambda i: x.fused(d[i], with_title[i], linear), note)
    )
    # pseudo-relevance feedback from the hybrid ranking
    for chunks, terms, lam, beta in ((3, 10, 0.3, 0.5), (5, 10, 0.3, 0.5), (5, 20, 0.5, 1.0)):
        label = f"{chunks} chunks, {terms} terms, RM3 weight {lam}, Rocchio {beta}"
        refined = {}

        def run(i, chunks=chunks, terms=terms, lam=lam, beta=beta, refined=refined):
            refined[i] = x.feedback(i, linear, chunks, terms, lam, beta)
            return x.fused(*refined[i], linear)

        out.append(x.score(f"hybrid linear after PRF ({label})", run, "ms: feedback + second scan and BM25, numpy"))
        out.append(x.score(f"dense after Rocchio ({label})", lambda i, r=refined: x.doc_max(r[i][0])))
        out.append(x.score(f"BM25 after RM3 ({label})", lambda i, r=refined: x.bm25_only(r[i][1])))
    # round 6: each feedback alone, its list replacing its side (the shipped feedback adds a cosine instead: --feedback)
    for chunks, terms, lam in ((3, 10, 0.3), (3, 20, 0.5), (10, 20, 0.3)):
        out.append(
            x.score(
                f"hybrid linear, BM25 side after RM3 alone ({chunks} chunks, {terms} terms, weight {lam})",
                lambda i, c=chunks, t=terms, w=lam: x.fused(d[i], x.feedback(i, linear, c, t, w, 0.0)[1], linear),
            )
        )
    for chunks, beta in ((1, 0.5), (3, 0.5), (5, 0.25)):

        def dense_rocchio(i, c=chunks, b=beta):
            top = top_order(d[i], c)  # from the dense ranking itself
            v = x.vectors[i] + b * x.matrix[top].mean(0)
            return (x.matrix @ (v / np.linalg.norm(v))).astype(np.float32)

        out.append(
            x.score(
                f"hybrid linear, dense side after Rocchio from the dense top {chunks} (beta {beta})",
                lambda i, f=dense_rocchio: x.fused(f(i), s[i], linear),
            )
        )
    return out


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
    if "feedback" in report:
        t = report["feedback"]["timing"]
        lines += [
            "",
            "## Hybrid pseudo-relevance feedback (train, through `search`, documents, top 10)",
            "",
            "m: first fused chunks moving the query; beta: Rocchio; w: weight of the cosine to the moved query; depth:",
            "first fused chunks rescored (default m=1 beta=1 w=0.3 depth=200). Delta: per-query nDCG@10 difference to",
            f"off, with its standard error. `search` ms (interleaved, median of 3): off {t['off']:.3f}, on {t['on']:.3f}"
            f" (×{t['on_vs_off']:.3f}).",
            "",
            "| setting | nDCG@10 | half a | half b | delta | se | feedback ms |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in report["feedback"]["settings"]:
            lines.append(
                f"| {row['setting']} | {row['ndcg@10']:.4f} | {row['half_a']:.4f} | {row['half_b']:.4f} | "
                f"{row['delta']:+.4f} | {row['delta_se']:.4f} | {row['feedback_ms']:.3f} |"
            )
    if "sentences" in report:
        found = report["sentences"]
        a, b = found["chosen_on_a"], found["chosen_on_b"]
        lines += [
            "",
            "## Hybrid's sentence blend (train, through `search`, documents, top 10)",
            "",
            "sentences: the best sentence's share of the first fused chunks' dense part; sparse: the BM25 weight with",
            "it; depth: the first fused chunks blended. Delta: per-query nDCG@10 difference to off, with its standard",
            f"error. Best: {found['best']}. Chosen on half a: {a['setting']}, half b {a['half_b']:.4f} (off "
            f"{a['off_half_b']:.4f}); chosen on half b: {b['setting']}, half a {b['half_a']:.4f} (off "
            f"{b['off_half_a']:.4f}).",
            "",
            "| setting | nDCG@10 | half a | half b | delta | se | sentences ms |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in found["settings"]:
            lines.append(
                f"| {row['setting']} | {row['ndcg@10']:.4f} | {row['half_a']:.4f} | {row['half_b']:.4f} | "
                f"{row['delta']:+.4f} | {row['delta_se']:.4f} | {row['sentences_ms']:.3f} |"
            )
    if "api" in report:
        lines += [
            "",
            "## Through the API (uvicorn, `/query`, documents, top 10, cache off, serving encoder)",
            "",
            "| mode | nDCG@10 | ms per request (client side) |",
            "|---|---|---|",
        ]
        for mode, row in report["api"].items():
            lines.append(f"| {mode} | {row['ndcg@10']:.4f} | {row['ms_per_request']:.1f} |")
    if "timing" in report:
        t = report["timing"]
        lines += [
            "",
            "## Hybrid search per fusion method (documents, top 10, query encoded; interleaved, median of 5 passes)",
            "",
            "| method | ms per query | vs RRF |",
            "|---|---|---|",
        ]
        lines += [f"| {m} | {t[m]:.3f} | {t[m + '_vs_rrf']:.3f} |" for m in ("rrf", "minmax", "linear")]
    if "ideas" in report:
        base = next(r for r in report["ideas"] if r["note"] == "baseline")
        lines += [
            "",
            "## Query-side ideas (train; halves a / b: two fixed random halves of train, the overfitting check)",
            "",
            "ms per query: scoring one query in this bench (numpy, the scores of both sides already computed), "
            f"against {base['ms_per_query']:.2f} ms for the baseline in the same run.",
            "",
            "| idea | nDCG@10 | half a | half b | ms per query | note |",
            "|---|---|---|---|---|---|",
        ]
        for row in report["ideas"]:
            lines.append(
                f"| {row['idea']} | {row['ndcg@10']:.4f} | {row['half_a']:.4f} | {row['half_b']:.4f} | "
                f"{row['ms_per_query']:.2f} | {row['note']} |"
            )
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
