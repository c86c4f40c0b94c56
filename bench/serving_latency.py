"""Serving latency and throughput through real HTTP on loopback, against uvicorn running ``serving.app:app``.

On the SciFact index built by the platform (``bench.serving_index``), with the SciFact train queries (each one
distinct, so the result cache cannot help unless measured on purpose):

- one client, hybrid top-10: p50 / p99 / mean per request (server started with the result cache off);
- 8 concurrent clients (threads, one keep-alive connection each) for a fixed time: requests/s and errors;
- cache hits: one query repeated with the cache on, p50 / p99.

    .venv/bin/python -m bench.serving_latency [--workers 1] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np

from bench.serving_index import WORK, ensure_index
from bench.serving_quality import load_queries
from livemem.config import PROJECT_ROOT

RESULTS = PROJECT_ROOT / "bench" / "results"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def uvicorn_server(
    index_dir: Path, cache_size: int, workers: int, extra_env: dict[str, str] | None = None, trace_dir: Path = WORK
):
    """``serving.app:app`` under uvicorn on a free loopback port, yielding its URL once /healthz answers 200."""
    port = free_port()
    env = {
        **os.environ,
        "RAG_INDEX_DIR": str(index_dir),
        "RAG_CACHE_SIZE": str(cache_size),
        "RAG_TRACE_DIR": str(trace_dir / "traces"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        **(extra_env or {}),
    }
    env.pop("LLM_BASE_URL", None)  # benchmarks measure the app, never a model backend
    command = [sys.executable, "-m", "uvicorn", "serving.app:app", "--host", "127.0.0.1", "--port", str(port),
               "--log-level", "warning", "--no-access-log", "--workers", str(workers)]  # fmt: skip
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not become healthy (exit code {process.poll()})")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def timed_queries(client: httpx.Client, url: str, texts: list[str]) -> tuple[list[float], int]:
    latencies, errors = [], 0
    for text in texts:
        started = time.perf_counter()
        response = client.post(f"{url}/query", json={"query": text, "top_k": 10, "mode": "hybrid"})
        latencies.append((time.perf_counter() - started) * 1000)
        errors += response.status_code != 200
    return latencies, errors


def summary(latencies: list[float]) -> dict[str, float]:
    values = np.asarray(latencies)
    return {
        "requests": int(values.size),
        "p50_ms": round(float(np.percentile(values, 50)), 2),
        "p90_ms": round(float(np.percentile(values, 90)), 2),
        "p99_ms": round(float(np.percentile(values, 99)), 2),
        "mean_ms": round(float(values.mean()), 2),
    }


def throughput(url: str, texts: list[str], clients: int, seconds: float) -> dict[str, float]:
    done = [0] * clients
    errors = [0] * clients
    latencies: list[list[float]] = [[] for _ in range(clients)]
    stop = time.monotonic() + seconds

    def run(i: int) -> None:
        with httpx.Client(timeout=30) as client:
            n = i
            while time.monotonic() < stop:
                text = texts[n % len(texts)]
                started = time.perf_counter()
                try:
                    ok = client.post(f"{url}/query", json={"query": text, "top_k": 10}).status_code == 200
                except httpx.HTTPError:
                    ok = False
                latencies[i].append((time.perf_counter() - started) * 1000)
                done[i] += 1
                errors[i] += not ok
                n += clients

    started = time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return {
        "clients": clients,
        "seconds": round(elapsed, 2),
        "requests": sum(done),
        "errors": sum(errors),
        "requests_per_s": round(sum(done) / elapsed, 1),
        **{k: v for k, v in summary([x for part in latencies for x in part]).items() if k != "requests"},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of the concurrent run")
    parser.add_argument("--single", type=int, default=400, help="requests in the one-client run")
    parser.add_argument("--tag", default="", help="suffix of the result files")
    args = parser.parse_args()
    home = ensure_index()
    texts = list(load_queries("train")[0].values())
    report: dict = {
        "command": "python -m bench.serving_latency " + " ".join(sys.argv[1:]),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": len(os.sched_getaffinity(0)),
            "processor": platform.processor() or platform.machine(),
        },
        "index_version": home.current(),
        "uvicorn_workers": args.workers,
        "request": {"mode": "hybrid", "top_k": 10, "return": "chunks"},
    }
    with uvicorn_server(home.root, cache_size=0, workers=args.workers) as url, httpx.Client(timeout=30) as client:
        timed_queries(client, url, texts[-30:])  # warm up
        latencies, errors = timed_queries(client, url, texts[: args.single])
        report["one_client_uncached"] = {**summary(latencies), "errors": errors}
        print("one client:", report["one_client_uncached"])
        report["concurrent_uncached"] = throughput(url, texts, 8, args.seconds)
        print("8 clients:", report["concurrent_uncached"])
    with uvicorn_server(home.root, cache_size=1024, workers=args.workers) as url, httpx.Client(timeout=30) as client:
        timed_queries(client, url, texts[:1] * 20)
        latencies, errors = timed_queries(client, url, texts[:1] * 500)
        report["one_client_cache_hit"] = {**summary(latencies), "errors": errors}
        print("cache hits:", report["one_client_cache_hit"])
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = f"serving_latency{'_' + args.tag if args.tag else ''}"
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(f"wrote {RESULTS / name}.json")


if __name__ == "__main__":
    main()
