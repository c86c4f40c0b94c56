"""Dense top-k latency: the float32 scan against the exact two-stage scan (``livemem.index.dense``), and first-stage kernels.

Random unit vectors (384 dims) cut into segments of the sizes a version has after a full build and a week of
one-file changes (one segment of ~97 % of the rows with 0.5 % of them deleted, then 7 small ones, the largest
merged first: ``livemem.version.segments.MAX_SEGMENTS``). Each query is a unit vector near a random row (so it has
a real nearest neighbour, as a text query has). Per query, in alternating order:

- ``float32 BLAS``: what serving did before: ``(segment @ q)[held]`` per segment (numpy, OpenBLAS), then the top k
  (``top_order``);
- ``float32 exact kernel``: ``DenseRows @ q`` (the dense score every path now agrees on) then the top k;
- ``two-stage``: ``DenseRows.top(q, k)``: float16 scan, then the candidates scored exactly; its first stage alone
  (``scan``) and the rows it scored exactly are recorded too.

for k = 1000 (hybrid's dense list, ``FusionSettings.depth``) and k = 10 (dense mode, top 10). Every two-stage
result is checked to be identical (rows and scores) to the exact kernel's. BLAS and torch use ``--threads``
threads (serving's default is 1: ``RAG_TORCH_THREADS``). The float16 copies are made before timing (once per
segment per process, as a serving worker does on its first query).

Then each first-stage kernel alone over 123k rows (``--kernels``): numpy float32 (BLAS), FBGEMM float16 (the one
used), FBGEMM int8 (per-row weights, the query quantised to 7 bits: a far looser bound), torch float16 (``torch.mv``,
the fallback), torch bfloat16, torch int8 weights (``_weight_int8pack_mm``, bfloat16 query), at 1 and 2 threads;
numpy's float16 product on a slice only (it is not BLAS: far slower).

    .venv/bin/python -m bench.dense_scan                                  # 123k and 500k rows, 40 queries each
    .venv/bin/python -m bench.dense_scan --sizes 123000 --queries 20     # quicker

Writes bench/results/dense_scan.json and .md. Timings on a shared machine are noisy: compare the variants of one
run (they are interleaved), not runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any

import numpy as np

from livemem.index.dense import DenseRows, first_stage_kernel, top_order
from livemem.sources.config import PROJECT_ROOT

RESULTS = PROJECT_ROOT / "bench" / "results"
DIM = 384
WARMUP = 3


def segments(rng: np.random.Generator, n: int) -> DenseRows:
    """One base segment and 7 small ones (0.8 % … 0.05 % of the rows), 0.5 % of the base deleted."""
    small = [max(1, int(n * share)) for share in (0.008, 0.006, 0.005, 0.004, 0.003, 0.001, 0.0005)]
    sizes = [n - sum(small), *small]
    parts = []
    for size in sizes:
        vectors = rng.standard_normal((size, DIM), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        held = np.arange(size) if size < n // 2 else np.sort(rng.choice(size, size - size // 200, replace=False))
        parts.append((vectors, held))
    return DenseRows(parts, DIM)


def queries(rng: np.random.Generator, rows: DenseRows, count: int) -> list[np.ndarray]:
    out = []
    for _ in range(count):
        part, held = rows.parts[0]
        near = part[held[rng.integers(held.size)]] + 0.6 * rng.standard_normal(DIM).astype(np.float32) / np.sqrt(DIM)
        out.append((near / np.linalg.norm(near)).astype(np.float32))
    return out


def blas_scan(rows: DenseRows, q: np.ndarray) -> np.ndarray:
    return np.concatenate(
        [dense @ q if held.size == dense.shape[0] else (dense @ q)[held] for dense, held in rows.parts]
    )


def timed(fn) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return (time.perf_counter() - start) * 1000, out


def summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {
        "p50_ms": round(statistics.median(ordered), 3),
        "p90_ms": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 3),
        "min_ms": round(ordered[0], 3),
    }


def run_size(n: int, count: int, threads: int, rng: np.random.Generator) -> dict[str, Any]:
    rows = segments(rng, n)
    t0 = time.perf_counter()
    rows.prepare()  # the float16 copies, made once per segment per process
    prepare_s = time.perf_counter() - t0
    qs = queries(rng, rows, count + WARMUP)
    variants = ("float32_blas", "float32_exact", "two_stage", "first_stage")
    times: dict[str, dict[str, list[float]]] = {str(k): {v: [] for v in variants} for k in (1000, 10)}
    rescored: dict[str, list[int]] = {"1000": [], "10": []}
    for i, q in enumerate(qs):
        for k in (1000, 10):
            order = list(variants) if i % 2 == 0 else list(reversed(variants))
            got: dict[str, Any] = {}
            ms: dict[str, float] = {}
            for variant in order:
                if variant == "float32_blas":
                    ms[variant], got[variant] = timed(lambda q=q, k=k: top_order(blas_scan(rows, q), k))
                elif variant == "float32_exact":
                    ms[variant], got[variant] = timed(lambda q=q, k=k: _exact_top(rows, q, k))
                elif variant == "two_stage":
                    ms[variant], got[variant] = timed(lambda q=q, k=k: rows.top(q, k))
                else:
                    ms[variant], scan = timed(lambda q=q: rows.scan(q))
                    if i >= WARMUP:
                        rescored[str(k)].append(int(scan.candidates(k)[0].size))
            want_rows, want_scores = got["float32_exact"]
            two_rows, two_scores = got["two_stage"]
            if not (np.array_equal(two_rows, want_rows) and np.array_equal(two_scores, want_scores)):
                raise AssertionError(f"two-stage top-{k} differs from the exact scan at {n} rows, query {i}")
            if i >= WARMUP:
                for variant, value in ms.items():
                    times[str(k)][variant].append(value)
    return {
        "rows": rows.size,
        "segments": [int(held.size) for _, held in rows.parts],
        "threads": threads,
        "first_stage_kernel": str(first_stage_kernel()),
        "prepare_float16_s": round(prepare_s, 2),
        "queries": count,
        "top": {
            k: {
                **{v: summary(t) for v, t in by.items()},
                "rows_scored_exactly_mean": round(float(np.mean(rescored[k])), 1),
                "two_stage_over_float32_blas_p50": round(
                    statistics.median(by["two_stage"]) / statistics.median(by["float32_blas"]), 3
                ),
            }
            for k, by in times.items()
        },
    }


def _exact_top(rows: DenseRows, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = rows @ q
    order = top_order(scores, k)
    return order, scores[order]


def kernels(n: int, reps: int, rng: np.random.Generator) -> dict[str, Any]:
    """Each first-stage product alone over ``n`` rows, interleaved, at 1 and 2 threads."""
    import torch
    from threadpoolctl import threadpool_limits

    m = rng.standard_normal((n, DIM), dtype=np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    q = m[0]
    m16, q16 = torch.from_numpy(m.astype(np.float16)), torch.from_numpy(q.astype(np.float16))
    mb, qb = torch.from_numpy(m).to(torch.bfloat16), torch.from_numpy(q).to(torch.bfloat16)
    scale = np.abs(m).max(axis=1) / 127
    m8 = torch.from_numpy(np.round(m / scale[:, None]).astype(np.int8))
    scale_b, q8 = torch.from_numpy(scale.astype(np.float32)).to(torch.bfloat16), qb[None, :]
    slice16, sq16 = m[:4096].astype(np.float16), q.astype(np.float16)
    w16 = torch.ops.quantized.linear_prepack_fp16(torch.from_numpy(m), None)
    channel = torch.from_numpy(np.abs(m).max(axis=1).astype(np.float64) / 127)
    w8 = torch.ops.quantized.linear_prepack(
        torch.quantize_per_channel(torch.from_numpy(m), channel, torch.zeros(n, dtype=torch.long), 0, torch.qint8), None
    )
    row = torch.from_numpy(q)[None, :]
    fns = {
        "numpy float32 (BLAS)": lambda: m @ q,
        "FBGEMM float16 (chosen)": lambda: torch.ops.quantized.linear_dynamic_fp16(row, w16),
        "FBGEMM int8 (dynamic)": lambda: torch.ops.quantized.linear_dynamic(row, w8, True),
        "torch float16 mv": lambda: torch.mv(m16, q16),
        "torch bfloat16 mv": lambda: torch.mv(mb, qb),
        "torch int8 weights (_weight_int8pack_mm)": lambda: torch._weight_int8pack_mm(q8, m8, scale_b),
        "numpy float16 matmul, per 123k rows (from 4,096)": lambda: slice16 @ sq16,
    }
    out: dict[str, Any] = {}
    before = torch.get_num_threads()
    for threads in (1, 2):
        torch.set_num_threads(threads)
        with threadpool_limits(threads, user_api="blas"):
            samples: dict[str, list[float]] = {name: [] for name in fns}
            for rep in range(reps + 1):
                for name in fns if rep % 2 else reversed(list(fns)):
                    ms, _ = timed(fns[name])
                    if rep:
                        samples[name].append(ms * (n / 4096 if name.startswith("numpy float16") else 1))
        out[str(threads)] = {name: round(statistics.median(v), 3) for name, v in samples.items()}
    torch.set_num_threads(before)
    return {"rows": n, "p50_ms_by_threads": out}


def machine() -> dict[str, Any]:
    import torch

    with open("/proc/cpuinfo", encoding="utf-8") as fh:
        model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "unknown")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=PROJECT_ROOT).stdout
    return {
        "cpu_model": model,
        "cpus": len(os.sched_getaffinity(0)),
        "ram_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "commit": commit.strip()[:12],
        "load_before": os.getloadavg(),
    }


def report_md(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# Dense top-k: float32 scan vs exact two-stage scan",
        "",
        f"Run {report['started_at']} on {m['cpu_model']} ({m['cpus']} cores, {m['ram_gib']} GiB), Python "
        f"{m['python']}, numpy {m['numpy']}, torch {m['torch']}; project commit `{m['commit']}`. Load average "
        f"before {', '.join(f'{x:.1f}' for x in m['load_before'])}, after "
        f"{', '.join(f'{x:.1f}' for x in report['load_after'])} (a shared machine: compare variants within a row).",
        "",
        f"Command: `{report['command']}`",
        "",
        "Random unit vectors (384 dims) in a base segment and 7 small ones; queries near a random row. p50 (p90) ms "
        "per query; every two-stage result was checked identical (rows, order, scores) to the exact scan.",
        "",
        "| rows | threads | k | float32 BLAS scan + top k (before) | float32 exact kernel + top k | two-stage "
        "| of which float16 first stage | rows scored exactly | two-stage ÷ before | first stage, packing time |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["sizes"]:
        for k, t in r["top"].items():
            lines.append(
                f"| {r['rows']:,} | {r['threads']} | {k} | {_cell(t, 'float32_blas')} | {_cell(t, 'float32_exact')} "
                f"| {_cell(t, 'two_stage')} | {_cell(t, 'first_stage')} | {t['rows_scored_exactly_mean']:,.0f} "
                f"| {t['two_stage_over_float32_blas_p50']:.2f} | {r['first_stage_kernel']}, "
                f"{r['prepare_float16_s']:.1f} s |"
            )
    if report.get("kernels"):
        kern = report["kernels"]
        names = list(kern["p50_ms_by_threads"]["1"])
        lines += [
            "",
            f"First-stage kernels alone over {kern['rows']:,} rows, p50 ms (interleaved):",
            "",
            "| threads | " + " | ".join(names) + " |",
            "|---|" + "---|" * len(names),
        ]
        for threads, by in kern["p50_ms_by_threads"].items():
            lines.append(f"| {threads} | " + " | ".join(f"{by[n]:.2f}" for n in names) + " |")
    return "\n".join(lines) + "\n"


def _cell(times: dict[str, Any], variant: str) -> str:
    return f"{times[variant]['p50_ms']:.2f} ({times[variant]['p90_ms']:.2f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.dense_scan", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[123_000, 500_000])
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1, help="BLAS and torch threads (serving's default: 1)")
    parser.add_argument("--kernels", type=int, default=123_000, help="rows for the kernel table (0: skip it)")
    parser.add_argument("--output", default=str(RESULTS / "dense_scan.json"))
    args = parser.parse_args(argv)

    import torch
    from threadpoolctl import threadpool_limits

    report: dict[str, Any] = {
        "command": "python -m bench.dense_scan " + " ".join(sys.argv[1:] if argv is None else argv),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "sizes": [],
    }
    rng = np.random.default_rng(0)
    torch.set_num_threads(args.threads)
    with threadpool_limits(args.threads, user_api="blas"):
        for n in args.sizes:
            report["sizes"].append(run_size(n, args.queries, args.threads, rng))
            print(json.dumps(report["sizes"][-1]["top"]), flush=True)
    if args.kernels:
        report["kernels"] = kernels(args.kernels, 9, rng)
    report["load_after"] = os.getloadavg()
    out = PROJECT_ROOT / args.output if not os.path.isabs(args.output) else args.output
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=2)
    md = report_md(report)
    with open(str(out).removesuffix(".json") + ".md", "w", encoding="utf-8") as fh:
        fh.write(md)
    print(md)


if __name__ == "__main__":
    main()
