"""Would a second dense signal from the same model lift hybrid retrieval? Each sentence of a document embedded on
its own (optionally after the document's title), scored against the query, the document's best sentence taken.

An experiment, not a product feature (round 9, ``docs/decisions/0002-sentence-vectors.md``): it embeds the SciFact abstracts sentence by
sentence (≈45,000 texts against the index's 9,658 chunks, cached under ``bench/.work/serving/sentences``), then scores, on
the train questions only, each signal and fusion at the document level (each signal's best over a document's
chunks or sentences, then fused; the serving baseline scored the same way gives 0.7404 where ``search`` gives
0.7410). Reported: nDCG@10 overall and on the two fixed random halves of train (seed 5, as
``bench.serving_quality``'s ideas), Recall@100, and for the best setting of a small grid the value on one half
when it is chosen on the other (the check against overfitting the grid).

    .venv/bin/python -m bench.sentence_signal      # bench/results/sentence_signal.{json,md}

Variants: ``sentences`` (each sentence alone) and ``titled`` (``title\\nsentence``). Sentences are split by a
regular expression (``.``, ``!`` or ``?`` followed by a capital, a digit or a bracket; common abbreviations
re-joined).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from bench.serving_index import SCIFACT, WORK, ensure_index
from bench.serving_quality import RESULTS, Scores, load_queries, train_halves
from livemem.engine.snapshot import load_snapshot
from livemem.index.sentences import SENTENCE_END, rejoin
from livemem.model.embedding import Embedder

CACHE = WORK / "sentences"
# the product's rules (livemem.index.sentences, built in round 10), applied here to whole abstracts as in round 9
SPLIT = SENTENCE_END
VARIANTS = ("sentences", "titled")


def sentences(text: str) -> list[str]:
    """The sentences of a whole abstract as round 9 split them (no paragraphs, whitespace kept inside)."""
    return rejoin(p.strip() for p in SPLIT.split(text.strip()))


def corpus() -> list[dict]:
    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def sentence_vectors(variant: str, embedder: Embedder) -> tuple[np.ndarray, list[str], float | None]:
    """(vectors, the document id of each, seconds spent encoding them: None when read from the cache, which is
    used only when it holds the same texts: their hash is kept beside the vectors)."""
    texts, owners = [], []
    for doc in corpus():
        for sentence in sentences(doc["text"]) or [doc["title"]]:
            texts.append(f"{doc['title']}\n{sentence}" if variant == "titled" and doc["title"] else sentence)
            owners.append(doc["_id"])
    digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()
    CACHE.mkdir(parents=True, exist_ok=True)
    path, meta = CACHE / f"{variant}.npy", CACHE / f"{variant}.json"
    if path.exists() and meta.exists() and json.loads(meta.read_text()).get("texts_sha256") == digest:
        return np.load(path), owners, None
    started = time.perf_counter()
    vectors = np.asarray(embedder.encode(texts), dtype=np.float32)
    spent = time.perf_counter() - started
    np.save(CACHE / f"{variant}.tmp.npy", vectors)
    os.replace(CACHE / f"{variant}.tmp.npy", path)
    meta.write_text(json.dumps({"texts_sha256": digest, "encode_s": round(spent, 1)}), encoding="utf-8")
    return vectors, owners, spent


class Documents:
    """Signals as documents × queries matrices (each the best over a document's rows), and their nDCG@10."""

    def __init__(self, scores: Scores, qrels: list[dict[str, int]]) -> None:
        self.ids = np.array(sorted({d["_id"] for d in corpus()}))
        names = np.array([Path(p).stem for p in scores.paths])
        self.chunk_cos = self.best(np.stack(scores.dense, axis=1), names)
        bm25 = self.best(np.stack([s.astype(np.float64) for s in scores.sparse], axis=1), names)
        top = bm25.max(axis=0)
        self.bm25 = np.where(top > 0, bm25 / np.where(top > 0, top, 1), 0.0)  # over the query's best document
        self.matched = bm25 > 0
        n = len(qrels)
        self.rel = np.zeros((self.ids.size, n))
        for i, judged in enumerate(qrels):
            for doc, grade in judged.items():
                j = int(np.searchsorted(self.ids, doc))
                if j < self.ids.size and self.ids[j] == doc:
                    self.rel[j, i] = grade
        self.idcg = np.array([sum(1 / np.log2(k + 2) for k in range(min(10, len(r)))) for r in qrels])
        self.judged = np.array([len(r) for r in qrels])
        self.halves = dict(zip("ab", train_halves(n), strict=True))

    def best(self, rows: np.ndarray, owners: np.ndarray) -> np.ndarray:
        """Rows × queries → documents × queries: each document's best row."""
        owner = np.searchsorted(self.ids, owners)
        order = np.argsort(owner, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(owner[order]) != 0])
        assert starts.size == self.ids.size
        return np.maximum.reduceat(rows[order], starts, axis=0)

    def metrics(self, scores: np.ndarray) -> dict:
        n = scores.shape[1]
        top = np.argpartition(-scores, 100, axis=0)[:100]
        values = np.take_along_axis(scores, top, axis=0)
        order = np.argsort(-values, axis=0, kind="stable")
        top, values = np.take_along_axis(top, order, axis=0), np.take_along_axis(values, order, axis=0)
        gains = self.rel[top, np.arange(n)] * np.isfinite(values)
        ndcg = (gains[:10] / np.log2(np.arange(10) + 2)[:, None]).sum(0) / self.idcg
        return {
            "ndcg@10": round(float(ndcg.mean()), 4),
            "half_a": round(float(ndcg[self.halves["a"]].mean()), 4),
            "half_b": round(float(ndcg[self.halves["b"]].mean()), 4),
            "recall@100": round(float(((gains > 0).sum(0) / self.judged).mean()), 4),
            "per_query": ndcg,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default="sentence_signal")
    args = parser.parse_args()
    home = ensure_index()
    snap = load_snapshot(home, home.current())
    queries, qrels = load_queries("train")
    embedder = Embedder(encoder="onnx")
    vectors = np.asarray(embedder.encode(list(queries.values())), dtype=np.float32)
    docs = Documents(Scores(snap, queries, vectors), [qrels[q] for q in queries])
    chunk = np.maximum(docs.chunk_cos, 0.0)
    rows: list[tuple[str, dict]] = []

    def add(name: str, scores: np.ndarray) -> dict:
        found = docs.metrics(scores)
        rows.append((name, found))
        return found

    add("dense: best chunk", docs.chunk_cos)
    add("BM25: best chunk", np.where(docs.matched, docs.bm25, -np.inf))
    base = add("hybrid: chunk + 0.5 BM25 (the serving default, by document)", chunk + 0.5 * docs.bm25)
    counts: dict[str, dict] = {}
    grid: list[tuple[str, dict]] = []
    for variant in VARIANTS:
        sentence_rows, owners, spent = sentence_vectors(variant, embedder)
        counts[variant] = {"rows": int(sentence_rows.shape[0]), "encode_s": None if spent is None else round(spent, 1)}
        cos = docs.best(sentence_rows @ vectors.T, np.array(owners))
        best_of = np.maximum(chunk, np.maximum(cos, 0.0))
        add(f"{variant}: best sentence alone", cos)
        add(f"{variant}: max(chunk, sentence) alone", np.maximum(docs.chunk_cos, cos))
        for w in (0.3, 0.4, 0.5, 0.6):
            name = f"{variant}: max(chunk, sentence) + {w} BM25"
            grid.append((name, add(name, best_of + w * docs.bm25)))
        for wc, ws in itertools.product((0.5, 1.0), (0.3, 0.5, 0.75)):
            name = f"{variant}: {wc} chunk + 1 sentence + {ws} BM25"
            grid.append((name, add(name, wc * chunk + np.maximum(cos, 0.0) + ws * docs.bm25)))
    best = max(grid, key=lambda r: r[1]["ndcg@10"])
    on_a = max(grid, key=lambda r: r[1]["half_a"])
    on_b = max(grid, key=lambda r: r[1]["half_b"])
    gain = best[1]["per_query"] - base["per_query"]
    report = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "index_version": snap.version_id,
        "chunks": snap.size,
        "sentence_rows": counts,
        "rows": [{"setting": name, **{k: v for k, v in m.items() if k != "per_query"}} for name, m in rows],
        "best": {
            "setting": best[0],
            "ndcg@10": best[1]["ndcg@10"],
            "gain": round(float(gain.mean()), 4),
            "gain_se": round(float(gain.std() / np.sqrt(gain.size)), 4),
        },
        "chosen_on_a": {"setting": on_a[0], "half_b": on_a[1]["half_b"], "baseline_half_b": base["half_b"]},
        "chosen_on_b": {"setting": on_b[0], "half_a": on_b[1]["half_a"], "baseline_half_a": base["half_a"]},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.output}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    lines = [
        "# A sentence-level dense signal on SciFact train (documents, each signal's best over its rows)",
        "",
        f"Index `{snap.version_id}` ({snap.size} chunks); sentence rows: "
        + ", ".join(
            f"{v} {c['rows']}" + (f" (encoded in {c['encode_s']} s)" if c["encode_s"] else "")
            for v, c in counts.items()
        ),
        "",
        "| setting | nDCG@10 | half a | half b | Recall@100 |",
        "|---|---|---|---|---|",
        *(f"| {n} | {m['ndcg@10']} | {m['half_a']} | {m['half_b']} | {m['recall@100']} |" for n, m in rows),
        "",
        f"Best of the grid: {best[0]}, {best[1]['ndcg@10']} ({gain.mean():+.4f} over the serving default by "
        f"document, standard error {gain.std() / np.sqrt(gain.size):.4f}). Chosen on half a: {on_a[0]}, half b "
        f"{on_a[1]['half_b']} (default {base['half_b']}); chosen on half b: {on_b[0]}, half a {on_b[1]['half_a']} "
        f"(default {base['half_a']}).",
        "",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs. Reproduce: `.venv/bin/python -m bench.sentence_signal`",
    ]
    (RESULTS / f"{args.output}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
