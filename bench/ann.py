"""Approximate first stage (issue 38): which graph index, at what size, with what recall — measured before wiring.

Run from the project root (after a ``bench.serving_quality`` run left its SciFact index in ``bench/.work/serving``)::

    .venv/bin/python -m bench.ann --sizes 50000,250000,1000000     # results/ann.{json,md}

**Vectors are real where they can be**: the all-MiniLM-L6-v2 vectors of the SciFact index (its chunk vectors and
its int8 sentence vectors, dequantised; about 54k unit vectors). 500 sentence vectors are held out as queries. A
size beyond the real count is reached with **perturbed copies** (a real vector plus Gaussian noise, renormalised,
mean cosine to its original reported): near-duplicate clusters, like a cycled corpus, which is the hard case for a
graph index (many near ties), so recall there is a floor, not a flattering figure.

Per size and candidate index: build time (2 threads), size on disk, load time memory-mapped (``view``/``MMAP``),
single-query latency (1 thread, p50 / p99) and **recall@10 of the final top-10** — the index's top ``k`` candidates
rescored exactly (float32 dot products, as serving's exact stage would) against the exact top-10 over all vectors.
Baseline: exact float32 scan of every vector with numpy (1 thread), the same ground truth.

Candidates: ``usearch`` HNSW (int8 and f16 storage) and ``faiss-cpu`` HNSW (flat float32 and int8 scalar
quantiser). hnswlib ships as source only here (no wheel), so it is not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.registry_bench import machine_facts

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_INDEX = PROJECT_ROOT / "bench/.work/serving/rag_index"
DEFAULT_OUTPUT = PROJECT_ROOT / "bench/results/ann.json"
QUERIES = 500
K = 10
CANDIDATES = (10, 40, 100)  # candidates taken from the graph and rescored exactly
NOISE = 0.35  # per-vector noise norm relative to the unit vector, for the perturbed copies
SEED = 38


def real_vectors(index_dir: Path) -> np.ndarray:
    """The unit vectors of the newest segment of a built index: chunk vectors and dequantised sentence vectors."""
    parts = sorted((index_dir / "parts").glob("seg-*"), key=lambda p: p.stat().st_mtime)
    if not parts:
        raise SystemExit(f"no segment under {index_dir}/parts: run bench.serving_quality first")
    seg = parts[-1]
    chunks = np.load(seg / "dense.npy").astype(np.float32)
    sentences = np.load(seg / "sentences.npz")
    codes = sentences["codes"].astype(np.float32) * sentences["scales"][:, None]
    vectors = np.vstack([chunks, codes])
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def corpus(real: np.ndarray, size: int, rng: np.random.Generator) -> tuple[np.ndarray, float | None]:
    """``size`` vectors: the real ones, then perturbed copies (and the mean cosine of a copy to its original)."""
    if size <= len(real):
        return real[:size].copy(), None
    extra = size - len(real)
    originals = real[rng.integers(0, len(real), extra)]
    noise = rng.standard_normal(originals.shape).astype(np.float32)
    noise *= NOISE / np.linalg.norm(noise, axis=1, keepdims=True)
    copies = originals + noise
    copies /= np.linalg.norm(copies, axis=1, keepdims=True)
    cosine = float(np.mean(np.sum(copies * originals, axis=1)))
    return np.vstack([real, copies]).astype(np.float32), cosine


def exact_topk(base: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    out = np.empty((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), 50):
        scores = queries[start : start + 50] @ base.T
        top = np.argpartition(-scores, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
        out[start : start + 50] = np.take_along_axis(top, order, axis=1)
    return out


def rescored(base: np.ndarray, query: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    candidates = candidates[candidates >= 0]
    scores = base[candidates] @ query
    return candidates[np.argsort(-scores)[:K]]


def recall(found: list[np.ndarray], truth: np.ndarray) -> float:
    return float(np.mean([len(set(f.tolist()) & set(t.tolist())) / K for f, t in zip(found, truth, strict=True)]))


def percentiles(samples: list[float]) -> dict[str, float]:
    arr = np.array(samples) * 1000
    return {"p50_ms": round(float(np.percentile(arr, 50)), 3), "p99_ms": round(float(np.percentile(arr, 99)), 3)}


def exact_scan(base: np.ndarray, queries: np.ndarray) -> dict[str, Any]:
    times = []
    for q in queries[:200]:
        t = time.perf_counter()
        scores = base @ q
        np.argpartition(-scores, K)[:K]
        times.append(time.perf_counter() - t)
    return percentiles(times)


class UsearchCandidate:
    def __init__(self, dtype: str) -> None:
        self.name = f"usearch HNSW {dtype}"
        self.dtype = dtype

    def build(self, base: np.ndarray, path: Path) -> None:
        from usearch.index import Index

        index = Index(ndim=base.shape[1], metric="ip", dtype=self.dtype, connectivity=16, expansion_add=128)
        index.add(np.arange(len(base)), base, threads=2)
        index.save(str(path))

    def load(self, path: Path) -> Any:
        from usearch.index import Index

        return Index.restore(str(path), view=True)

    def search(self, index: Any, query: np.ndarray, k: int) -> np.ndarray:
        index.expansion_search = max(64, k)
        return np.asarray(index.search(query, k, threads=1).keys, dtype=np.int64)


class FaissCandidate:
    def __init__(self, storage: str) -> None:
        self.name = f"faiss HNSW {storage}"
        self.storage = storage

    def build(self, base: np.ndarray, path: Path) -> None:
        import faiss

        faiss.omp_set_num_threads(2)
        if self.storage == "flat":
            index = faiss.IndexHNSWFlat(base.shape[1], 16, faiss.METRIC_INNER_PRODUCT)
        else:
            index = faiss.IndexHNSWSQ(base.shape[1], faiss.ScalarQuantizer.QT_8bit, 16, faiss.METRIC_INNER_PRODUCT)
            index.train(base)
        index.hnsw.efConstruction = 128
        index.add(base)
        faiss.write_index(index, str(path))

    def load(self, path: Path) -> Any:
        import faiss

        faiss.omp_set_num_threads(1)
        try:
            return faiss.read_index(str(path), faiss.IO_FLAG_MMAP)
        except RuntimeError:
            return faiss.read_index(str(path))

    def search(self, index: Any, query: np.ndarray, k: int) -> np.ndarray:
        index.hnsw.efSearch = max(64, k)
        return index.search(query[None, :], k)[1][0]


def measure(candidate: Any, base: np.ndarray, queries: np.ndarray, truth: np.ndarray, work: Path) -> dict[str, Any]:
    path = work / f"{candidate.name.replace(' ', '-')}.index"
    t = time.perf_counter()
    candidate.build(base, path)
    entry: dict[str, Any] = {"build_s": round(time.perf_counter() - t, 2), "bytes": path.stat().st_size}
    t = time.perf_counter()
    index = candidate.load(path)
    entry["load_s"] = round(time.perf_counter() - t, 4)
    for k in CANDIDATES:
        found, times = [], []
        for q in queries:
            t = time.perf_counter()
            keys = candidate.search(index, q, k)
            top = rescored(base, q, keys)
            times.append(time.perf_counter() - t)
            found.append(top)
        entry[f"k{k}"] = {"recall_at_10": round(recall(found, truth), 4), **percentiles(times)}
    del index
    path.unlink()
    return entry


ALL = {
    "usearch-i8": lambda: UsearchCandidate("i8"),
    "usearch-f16": lambda: UsearchCandidate("f16"),
    "faiss-flat": lambda: FaissCandidate("flat"),
    "faiss-sq8": lambda: FaissCandidate("sq8"),
}


def run(sizes: list[int], index_dir: Path, names: list[str], done: Any = None) -> dict[str, Any]:
    rng = np.random.default_rng(SEED)
    real = real_vectors(index_dir)
    held = rng.choice(len(real), QUERIES, replace=False)
    queries = real[held]
    real = np.delete(real, held, axis=0)
    candidates = [ALL[name]() for name in names]
    results: list[dict[str, Any]] = []
    out = {"real_vectors": len(real) + QUERIES, "queries": QUERIES, "sizes": results}
    for size in sizes:
        base, cosine = corpus(real, size, rng)
        truth = exact_topk(base, queries, K)
        entry: dict[str, Any] = {"size": size, "real": min(size, len(real)), "copy_cosine": cosine}
        entry["exact_numpy_float32"] = exact_scan(base, queries)
        print(size, "exact", json.dumps(entry["exact_numpy_float32"]), flush=True)
        with tempfile.TemporaryDirectory(prefix="ann-", dir=PROJECT_ROOT / "bench/.work") as work:
            for candidate in candidates:
                entry[candidate.name] = measure(candidate, base, queries, truth, Path(work))
                print(size, candidate.name, json.dumps(entry[candidate.name]), flush=True)
        results.append(entry)
        if done:
            done(out)  # written after every size: a long run keeps what it measured
    return out


def report_md(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# Approximate first stage (issue 38): graph indexes measured",
        "",
        f"Run {results['started_at']} on {m['cpu_model']} ({m['nproc']} cores, {m['ram_gib']} GiB); the machine "
        "was shared with other work (latencies are upper bounds). Command: `" + results["command"] + "`",
        "",
        f"Vectors: {results['real_vectors']:,} real all-MiniLM-L6-v2 vectors of the SciFact index (chunks and "
        f"sentences), {results['queries']} held out as queries; sizes beyond the real count are reached with "
        "perturbed copies (mean cosine to the original in the table). Recall@10 is of the **final** top-10: the "
        "graph's top-k candidates rescored exactly, against the exact top-10 over all vectors.",
        "",
        "| vectors | copy cosine | index | build (2 threads) | on disk | load (mmap) | recall@10 k=10 / 40 / 100 "
        "| p50 / p99 ms at k=40 (1 thread, with rescoring) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in results["sizes"]:
        cos = f"{s['copy_cosine']:.3f}" if s["copy_cosine"] else "real only"
        e = s["exact_numpy_float32"]
        lines.append(f"| {s['size']:,} | {cos} | exact float32 scan (numpy) | — | — | — | 1.0 | "
                     f"{e['p50_ms']} / {e['p99_ms']} |")  # fmt: skip
        for name, v in s.items():
            if not isinstance(v, dict) or "build_s" not in v:
                continue
            rec = " / ".join(f"{v[f'k{k}']['recall_at_10']:.4f}" for k in CANDIDATES)
            lines.append(
                f"| {s['size']:,} | {cos} | {name} | {v['build_s']} s | {v['bytes'] / 1e6:.0f} MB | {v['load_s']} s "
                f"| {rec} | {v['k40']['p50_ms']} / {v['k40']['p99_ms']} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ann", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="50000,250000")
    parser.add_argument("--index", type=Path, default=DEFAULT_INDEX, help="a built index home to take vectors from")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--candidates", default=",".join(ALL), help=f"comma-separated, of {', '.join(ALL)}")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    facts = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_facts(),
        "command": "python -m bench.ann " + " ".join(argv if argv is not None else sys.argv[1:]),
    }

    def write(results: dict[str, Any]) -> None:
        results.update(facts)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        args.output.with_suffix(".md").write_text(report_md(results), encoding="utf-8")

    results = run([int(s) for s in args.sizes.split(",")], args.index, args.candidates.split(","), write)
    print(report_md(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
