"""The query and build speed of all-MiniLM-L6-v2 on torch and on ONNX Runtime, and whether the vectors agree.

Texts: the first 400 SciFact abstracts as the pipeline writes them (``# {title}\\n\\n{text}\\n``, one file per
document); queries: the first 200 train claims. Every backend runs with 2 threads and batches of 64.

- ``torch``: ``Embedder(encoder="torch")`` (sentence-transformers ``encode``; ``encode_one`` for a query).
- ``onnx-plain``: a plain ``torch.onnx.export`` on ONNX Runtime (graph optimisation ALL), unfused.
- ``onnx-unsorted``: the fused export, batches in input order.
- ``onnx``: the shipped backend in float32 (fused export, batches sorted by token count),
  ``Embedder(encoder="onnx", precision="fp32")``.
- ``onnx-int8``: the shipped int8 copy of the fused export (``livemem.model.onnx_encoder.quantize_model``: dynamic
  quantisation, one weight scale per output channel), which serving uses for query vectors only.
- ``onnx-int8-block``: the shipped int8-block copy (8-bit ``MatMulNBits``, one scale per 64 weights, float32
  attention), which builds use for index vectors by default (``Embedder(encoder="onnx")``).
- ``onnx-int8-tensor``: the same with one weight scale per tensor (the quantisation first tried: too lossy).

Quality of the int8 copy (it ships only where nDCG@10 stays within 0.005 of fp32): ``--ndcg`` embeds a SciFact
subset and its train claims with each of torch, onnx and onnx-int8 (dense nDCG@10, documents and queries alike);
``--serving-ndcg`` scores what serving does, on the published SciFact serving index (``bench.serving_index``):
float32 index vectors, train claims encoded one at a time (``encode_one``) in float32 and in int8, through
``Retriever.search`` (dense and hybrid, ``return: documents``).

For each: single-query encode p50 / p90 (ms, one thread: what a serving worker uses, and two threads), build
throughput (texts/s over the 400 texts), and the cosine of each vector to torch's (min, median).

    .venv/bin/python -m bench.encoder --runs 3          # writes bench/results/encoder.{json,md}
    .venv/bin/python -m bench.encoder --runs 1 --ndcg   # adds the int8 quality check (a few minutes)
    .venv/bin/python -m bench.encoder --variants torch,onnx --name encoder-core   # the two that matter
    .venv/bin/python -m bench.encoder --runs 3 --texts 192 --queries 100 --variants torch,onnx,onnx-int8 \
        --serving-ndcg --name encoder-r5       # round 5: int8 query vectors, their cost in nDCG@10
    .venv/bin/python -m bench.encoder --runs 3 --texts 400 --queries 200 \
        --variants torch,onnx,onnx-int8,onnx-int8-block --name encoder-r12   # round 12: int8-block builds
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from bench.serving_quality import load_queries, ndcg_at
from livemem.model.embedding import Embedder, default_model_path
from livemem.model.onnx_encoder import OnnxEncoder, export_model
from livemem.sources.config import PROJECT_ROOT

SCIFACT = PROJECT_ROOT.parent / "shared" / "data" / "ir" / "scifact"
RESULTS = PROJECT_ROOT / "bench" / "results"
WORK = PROJECT_ROOT / "bench" / ".work" / "encoder"
THREADS = 2
BATCH = 64
VARIANTS = ("torch", "onnx-plain", "onnx-unsorted", "onnx", "onnx-int8", "onnx-int8-tensor", "onnx-int8-block")


def corpus() -> dict[str, str]:
    docs = {}
    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            docs[d["_id"]] = f"# {d['title']}\n\n{d['text']}\n"
    return docs


def query_latency(encode_one, queries: list[str]) -> dict[str, float]:
    for text in queries[:20]:
        encode_one(text)
    times, cpu = [], []
    for text in queries:
        start, start_cpu = time.perf_counter(), time.thread_time()
        encode_one(text)
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.thread_time() - start_cpu) * 1000)
    times.sort()
    # The calling thread's CPU time: with one thread it is the encoding's cost without the waits that other
    # processes on a shared machine add to the wall-clock time (it still pays their cache and memory traffic).
    return {
        "p50_ms": round(statistics.median(times), 2),
        "p90_ms": round(times[int(len(times) * 0.9)], 2),
        "cpu_p50_ms": round(statistics.median(cpu), 2),
    }


def throughput(encode, texts: list[str]) -> tuple[float, np.ndarray]:
    encode(texts[:BATCH])  # warm-up: first-run allocations
    start = time.perf_counter()
    vectors = encode(texts)
    return round(len(texts) / (time.perf_counter() - start), 1), vectors


def unsorted(encoder: OnnxEncoder):
    def encode(texts: list[str]) -> np.ndarray:
        ids = [e.ids for e in encoder.tokenizer.encode_batch(texts)]
        return np.concatenate([encoder._run(ids[i : i + BATCH]) for i in range(0, len(ids), BATCH)])

    return encode


def variants(model: Path, names: list[str]) -> dict[str, tuple]:
    """name -> (batch encoder, query encoder with 1 thread or None for torch's child process, with 2 threads)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    shipped = Embedder(encoder="onnx", threads=THREADS, batch_size=BATCH, precision="fp32")
    plain, int8 = WORK / "plain.onnx", WORK / "int8-tensor.onnx"
    if "onnx-plain" in names:
        export_model(model, plain, fuse=False)
    if "onnx-int8-tensor" in names:
        quantize_dynamic(
            shipped.onnx.file,
            int8,
            weight_type=QuantType.QInt8,
            # shape inference cannot type the outputs of the fused contrib ops; they are float32
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )

    def onnx(file: Path | None, threads: int, precision: str = "fp32") -> OnnxEncoder:
        return OnnxEncoder(model, threads=threads, batch_size=BATCH, model_file=file, precision=precision)

    torch2 = Embedder(encoder="torch", threads=THREADS, batch_size=BATCH)
    makers = {
        "torch": lambda: (torch2.encode, None, torch2.encode_one),
        "onnx-plain": lambda: (onnx(plain, 2).encode, onnx(plain, 1).encode_one, onnx(plain, 2).encode_one),
        "onnx-unsorted": lambda: (unsorted(shipped.onnx), False, False),
        "onnx": lambda: (shipped.encode, onnx(None, 1).encode_one, shipped.encode_one),
        "onnx-int8": lambda: (
            onnx(None, 2, "int8").encode,
            onnx(None, 1, "int8").encode_one,
            onnx(None, 2, "int8").encode_one,
        ),
        "onnx-int8-tensor": lambda: (onnx(int8, 2).encode, onnx(int8, 1).encode_one, onnx(int8, 2).encode_one),
        "onnx-int8-block": lambda: (
            onnx(None, 2, "int8-block").encode,
            onnx(None, 1, "int8-block").encode_one,
            onnx(None, 2, "int8-block").encode_one,
        ),
    }
    return {name: makers[name]() for name in names}


def torch_one_thread_latency(queries: list[str]) -> dict[str, float]:
    """torch sets threads per process, so its one-thread query latency is measured in a child process."""
    import subprocess
    import sys

    code = (
        "import json,sys; from bench.encoder import query_latency; from livemem.model.embedding import Embedder; "
        "e=Embedder(encoder='torch', threads=1); e.model; "
        "print(json.dumps(query_latency(e.encode_one, json.loads(sys.stdin.read()))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], input=json.dumps(queries), capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_run(found: dict[str, tuple], texts: list[str], queries: list[str]) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    reference = None
    for name, (batch, one_1, one_2) in found.items():
        rate, vectors = throughput(batch, texts)
        if reference is None:
            reference = vectors
        cosine = (vectors * reference).sum(axis=1)
        rows[name] = {
            "texts_per_s": rate,
            "query_1_thread": torch_one_thread_latency(queries) if one_1 is None else _latency(one_1, queries),
            "query_2_threads": _latency(one_2, queries),
            "cosine_min": round(float(cosine.min()), 7),
            "cosine_median": round(float(np.median(cosine)), 7),
        }
        print(name, json.dumps(rows[name]), flush=True)
    return rows


def _latency(encode_one, queries: list[str]) -> dict[str, float] | None:
    return query_latency(encode_one, queries) if encode_one else None


def dense_ndcg(found: dict[str, tuple], docs: dict[str, str], size: int) -> dict[str, float]:
    """Dense nDCG@10 of the train claims over a subset: every judged-relevant abstract plus the first others."""
    queries, qrels = load_queries("train")
    wanted = {d for rel in qrels.values() for d in rel}
    ids = sorted(wanted) + [d for d in docs if d not in wanted][: max(0, size - len(wanted))]
    out = {}
    for name in [n for n in ("torch", "onnx", "onnx-int8", "onnx-int8-block") if n in found]:
        batch = found[name][0]
        matrix = batch([docs[d] for d in ids])
        qvecs = batch(list(queries.values()))
        scores = qvecs @ matrix.T
        ndcg = [
            ndcg_at([ids[j] for j in np.argsort(-row)[:10]], qrels[qid], 10)
            for qid, row in zip(queries, scores, strict=True)
        ]
        out[name] = round(float(np.mean(ndcg)), 4)
        print("ndcg", name, out[name], flush=True)
    return {"documents": len(ids), "queries": len(queries), "ndcg@10": out}


def serving_ndcg() -> dict[str, dict[str, float]]:
    """nDCG@10 of the train claims on the published SciFact serving index, as serving ranks them (its index
    vectors, float32 or int8-block as it was built; one query at a time) with float32 and with int8 query vectors."""
    from bench.serving_index import WORK as SERVING_WORK
    from bench.serving_quality import evaluate
    from livemem.engine.snapshot import load_snapshot
    from livemem.query.retrieval import Retriever
    from livemem.settings import EngineConfig
    from livemem.version.store import IndexHome

    home = IndexHome(SERVING_WORK / "rag_index", engine=EngineConfig.from_env())
    if not home.current():
        raise SystemExit("no SciFact serving index: run `python -m bench.serving_index` first")
    snap = load_snapshot(home, home.current())
    queries, qrels = load_queries("train")
    out: dict[str, dict[str, float]] = {"index_version": home.current(), "queries": len(queries)}
    for precision in ("fp32", "int8"):
        embedder = Embedder(encoder="onnx", threads=1, query_precision=precision)
        vectors = np.stack([embedder.encode_one(text) for text in queries.values()])
        retriever = Retriever(embedder)
        for mode in ("dense", "hybrid"):
            found = evaluate(retriever, snap, queries, vectors, qrels, mode)
            out[f"{precision} {mode}"] = found["ndcg@10"]
            print("serving ndcg", precision, mode, found["ndcg@10"], flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--texts", type=int, default=400)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--name", default="encoder", help="results file name under bench/results/")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, torch first")
    parser.add_argument("--ndcg", type=int, nargs="?", const=1500, default=0, help="subset size for nDCG@10")
    parser.add_argument("--serving-ndcg", action="store_true", help="int8 query vectors on the serving index")
    args = parser.parse_args()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    docs = corpus()
    texts = list(docs.values())[: args.texts]
    queries = list(load_queries("train")[0].values())[: args.queries]
    names = args.variants.split(",")
    if names[0] != "torch" or not set(names) <= set(VARIANTS) or (args.ndcg and "onnx-int8" not in names):
        parser.error(f"--variants: torch first, then any of {VARIANTS[1:]} (--ndcg needs onnx and onnx-int8)")
    found = variants(default_model_path(), names)
    runs = []
    for i in range(args.runs):
        load = os.getloadavg()[0]
        print(f"run {i + 1}/{args.runs}, load {load:.2f}", flush=True)
        runs.append({"load_1min": round(load, 2), "variants": one_run(found, texts, queries)})
    report = {
        "command": "python -m bench.encoder " + " ".join(sys.argv[1:]),
        "machine": {"cpus": len(os.sched_getaffinity(0)), "python": platform.python_version()},
        "texts": len(texts),
        "queries": len(queries),
        "threads": THREADS,
        "batch": BATCH,
        "runs": runs,
        "median": median_of(runs),
    }
    if args.ndcg:
        report["int8_quality"] = dense_ndcg(found, docs, args.ndcg)
    if args.serving_ndcg:
        report["int8_queries_on_the_serving_index"] = serving_ndcg()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{args.name}.md").write_text(markdown(report))
    print(markdown(report))


def median_of(runs: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for name in runs[0]["variants"]:
        rows = [r["variants"][name] for r in runs]
        med = {"texts_per_s": statistics.median(r["texts_per_s"] for r in rows)}
        for key in ("query_1_thread", "query_2_threads"):
            if rows[0][key]:
                med[key + "_p50_ms"] = statistics.median(r[key]["p50_ms"] for r in rows)
        if rows[0]["query_1_thread"] and "cpu_p50_ms" in rows[0]["query_1_thread"]:
            med["query_1_thread_cpu_p50_ms"] = statistics.median(r["query_1_thread"]["cpu_p50_ms"] for r in rows)
        med["cosine_min"] = min(r["cosine_min"] for r in rows)
        out[name] = med
    torch_rate = out["torch"]["texts_per_s"]
    for med in out.values():
        med["vs_torch"] = round(med["texts_per_s"] / torch_rate, 2)
    return out


def markdown(report: dict) -> str:
    loads = ", ".join(str(r["load_1min"]) for r in report["runs"])
    lines = [
        "# Encoder benchmark: all-MiniLM-L6-v2 on torch and ONNX Runtime",
        "",
        f"{report['texts']} SciFact abstracts, {report['queries']} train claims, {report['threads']} threads, "
        f"batch {report['batch']}, {report['machine']['cpus']} CPUs. Median of {len(report['runs'])} runs; "
        f"1-minute load average at the start of each run: {loads} (other agents shared the 2 cores).",
        "",
        "| variant | texts/s | × torch | query p50, 1 thread (ms) | its CPU time (ms) | query p50, 2 threads (ms) "
        "| min cosine to torch |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, med in report["median"].items():
        two = med.get("query_2_threads_p50_ms")
        lines.append(
            f"| {name} | {med['texts_per_s']} | {med['vs_torch']} | {med.get('query_1_thread_p50_ms', '-')} | "
            f"{med.get('query_1_thread_cpu_p50_ms', '-')} | {two if two is not None else '-'} | {med['cosine_min']} |"
        )
    if "int8_quality" in report:
        q = report["int8_quality"]
        lines += [
            "",
            f"Dense nDCG@10, {q['queries']} train claims over {q['documents']} abstracts (all judged ones): "
            + ", ".join(f"{k} {v}" for k, v in q["ndcg@10"].items()),
        ]
    if "int8_queries_on_the_serving_index" in report:
        q = report["int8_queries_on_the_serving_index"]
        scores = ", ".join(f"{k} {v}" for k, v in q.items() if k not in ("index_version", "queries"))
        lines += [
            "",
            f"nDCG@10 as serving ranks ({q['queries']} train claims, SciFact serving index `{q['index_version']}`, "
            f"index vectors as built, `return: documents`), by query-vector precision: {scores}",
        ]
    lines += ["", f"Reproduce: `.venv/bin/{report['command']}`", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
