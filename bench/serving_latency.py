"""Serving latency and throughput through real HTTP on loopback, against uvicorn running ``serving.app:app``.

On the SciFact index built by the platform (``bench.serving_index``), with the SciFact train queries (each one
distinct, so the result cache cannot help unless measured on purpose):

- where one uncached hybrid top-10 ``/query`` spends its time, in-process (``components``): query encoding (wall
  and thread CPU time, which the other processes on a shared machine inflate less; int8 query vectors, serving's
  default, and float32 ones, each in a pass of its own: alternating them query by query made each evict the
  other's weights from the caches, +1 ms per int8 query), the whole retrieval, building the results, the trace
  (id, events, queueing them: what the request pays; ``trace_append``: the append the flusher thread does), the
  response model and its JSON;
- for each query encoder (``--encoders``, default ``onnx,onnx-fp32``; ``onnx``: serving's defaults, int8 query
  vectors; ``onnx-fp32``: float32 ones; ``torch``): one client, hybrid top-10: p50 / p99 / mean per request
  (result cache off), then 8 concurrent clients (threads, one keep-alive connection each) for a fixed time:
  requests/s and errors. ``--rounds N`` repeats the encoders in turn (A, B, B, A, ...) and reports each round
  and the median: on a shared machine only ratios within one run mean anything. ``--baseline DIR`` adds the
  same runs against another checkout of the project (``git archive <rev> | tar -x -C DIR``), served from there
  with this machine's environment: an A/B of two versions of the code in one run;
- cache hits: one query repeated with the cache on, p50 / p99.

    .venv/bin/python -m bench.serving_latency --workers 2   # bench/results/serving_latency.{json,md}
    .venv/bin/python -m bench.serving_latency --workers 2 --rounds 3 --seconds 10 --single 300 --tag r5
    .venv/bin/python -m bench.serving_latency --workers 2 --no-build --encoders onnx --baseline /tmp/old --rounds 4

The concurrent run cycles through the 809 train claims, so a query recurs after 809 requests; the result cache
is off there, and no query vector is cached either, so every request encodes and searches.
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
import orjson

from bench.serving_index import WORK, ensure_index
from bench.serving_quality import load_queries
from livemem.sources.config import PROJECT_ROOT
from livemem.version.store import IndexHome

RESULTS = PROJECT_ROOT / "bench" / "results"
# query encoder name -> the serving environment that selects it
ENCODERS = {
    "onnx": {"LIVEMEM_ENCODER": "onnx", "LIVEMEM_QUERY_PRECISION": "int8"},
    "onnx-fp32": {"LIVEMEM_ENCODER": "onnx", "LIVEMEM_QUERY_PRECISION": "fp32"},
    "torch": {"LIVEMEM_ENCODER": "torch"},
}


SERVER_PIDS: dict[str, int] = {}  # url -> pid of the uvicorn process serving it (uvicorn_server)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def uvicorn_server(
    index_dir: Path,
    cache_size: int,
    workers: int,
    extra_env: dict[str, str] | None = None,
    trace_dir: Path = WORK,
    root: Path = PROJECT_ROOT,
):
    """``serving.app:app`` of the project at ``root`` under uvicorn on a free loopback port, yielding its URL once
    /healthz answers 200."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(root),  # the code at root, before the installed (editable) project
        "RAG_INDEX_DIR": str(index_dir),
        "RAG_CACHE_SIZE": str(cache_size),
        "RAG_TRACE_DIR": str(trace_dir / "traces"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        **(extra_env or {}),
    }
    env.pop("LLM_BASE_URL", None)  # benchmarks measure the app, never a model backend
    command = [sys.executable, "-m", "uvicorn", "serving.app:app", "--host", "127.0.0.1", "--port", str(port),
               "--log-level", "warning", "--no-access-log", "--workers", str(workers),
               "--timeout-worker-healthcheck", "60"]  # as `make serve` (docs/deploy.md)  # fmt: skip
    process = subprocess.Popen(command, cwd=root, env=env)
    url = f"http://127.0.0.1:{port}"
    SERVER_PIDS[url] = process.pid
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
        SERVER_PIDS.pop(url, None)
        process.terminate()
        process.wait(timeout=30)


def server_cpu_seconds(url: str) -> float:
    """CPU seconds (user + system) used so far by the uvicorn process serving ``url`` and its workers: per request,
    the cost that decides throughput on a machine the clients share, and far less noisy there than latency."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended meanwhile
        pid = int(stat.parent.name)
        parents[pid] = int(fields[1])
        ticks[pid] = int(fields[11]) + int(fields[12])
    tree, frontier = set(), {SERVER_PIDS[url]}
    while frontier:
        tree |= frontier
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - tree
    return sum(ticks.get(pid, 0) for pid in tree) / os.sysconf("SC_CLK_TCK")


QUERY_MODE = ["hybrid"]  # --mode: sparse leaves out the encoder, so the app's own path weighs more
QUERY_RETURN = ["chunks"]  # --return documents: each parent file once, with its whole text


def query_body(text: str) -> dict:
    return {"query": text, "top_k": 10, "mode": QUERY_MODE[0], "return": QUERY_RETURN[0]}


def timed_queries(client: httpx.Client, url: str, texts: list[str]) -> tuple[list[float], int]:
    latencies, errors = [], 0
    for text in texts:
        started = time.perf_counter()
        response = client.post(f"{url}/query", json=query_body(text))
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
                    ok = client.post(f"{url}/query", json=query_body(text)).status_code == 200
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


def components(index_dir: Path, texts: list[str], trace_dir: Path) -> dict[str, dict[str, float]]:
    """Milliseconds (p50, mean) of each step of an uncached hybrid top-10 /query, in this process (ONNX encoder,
    int8 query vectors, one thread, as a serving worker runs it; ``encode_fp32``: the float32 query vectors of the
    same texts, in a pass of their own before)."""
    from fastapi.testclient import TestClient

    from livemem.answer.results import chunk_result
    from livemem.model.embedding import Embedder
    from livemem.query.types import Query
    from livemem.usage.traces import retrieval_events
    from serving.app import create_app
    from serving.settings import Settings

    app = create_app(Settings(index_dir=index_dir, cache_size=0, trace_dir=trace_dir / "traces-components"))
    state = app.state.serving
    fp32 = Embedder(encoder="onnx", threads=1, query_precision="fp32")
    steps = ("encode", "encode_cpu", "encode_fp32", "encode_fp32_cpu", "retrieval", "results", "trace", "trace_append",
             "response_json")  # fmt: skip
    spent: dict[str, list[float]] = {name: [] for name in steps}

    def timed(name: str, started: float) -> None:
        spent[name].append((time.perf_counter() - started) * 1000)

    with TestClient(app) as client:
        snap = state.reader.snapshot()
        visible = snap.collections_for(frozenset({"public"}))
        for text in texts[-20:]:
            fp32.encode_one(text)
        for text in texts:
            started, cpu = time.perf_counter(), time.thread_time()
            fp32.encode_one(text)
            timed("encode_fp32", started)
            spent["encode_fp32_cpu"].append((time.thread_time() - cpu) * 1000)
        for text in texts[-20:]:
            client.post("/query", json=query_body(text))
        for text in texts:
            started, cpu = time.perf_counter(), time.thread_time()
            vector = state.retriever.encode(text)
            timed("encode", started)
            spent["encode_cpu"].append((time.thread_time() - cpu) * 1000)
            started = time.perf_counter()
            # the vector just encoded: "retrieval" is the search alone (the app encodes once per request too)
            found = state.retriever.search(snap, Query(text=text, top_k=10, mode="hybrid"), visible, vector=vector)
            timed("retrieval", started)
            for step, ms in found.timings_ms.items():  # the retriever's own steps (encode, dense, sparse, ...)
                spent.setdefault(f"retrieval.{step}", []).append(ms)
            started = time.perf_counter()
            results = [chunk_result(snap, hit) for hit in found.chunks]
            timed("results", started)
            started = time.perf_counter()
            ids = [r["chunk_id"] for r in results]
            trace_id = state.signer.issue(role="public", index_version=snap.version_id, chunk_ids=ids)
            state.traces.submit(
                retrieval_events(
                    trace_id=trace_id, query=text, chunk_ids=ids, scores=[r["score"] for r in results],
                    role="public", breath_phase=snap.breath_phase, index_version=snap.version_id, mode="hybrid",
                    return_="chunks", filters={}, collections=visible, cache_hit=False,
                )
            )  # fmt: skip
            timed("trace", started)
            started = time.perf_counter()
            state.traces.flush()  # what the flusher thread does (one request's events here; several under load)
            timed("trace_append", started)
            started = time.perf_counter()
            by_source: dict[str, list[dict]] = {}
            for result in results:
                by_source.setdefault(result["collection"], []).append(result)
            body = {"results": results, "results_by_source": by_source, "index_version": snap.version_id,
                    "trace_id": trace_id, "mode": "hybrid", "return": "chunks", "candidates": found.candidates,
                    "cached": False}  # fmt: skip
            orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)  # as serving.routers.query writes it
            timed("response_json", started)
    return {
        name: {"p50_ms": round(float(np.median(v)), 3), "mean_ms": round(float(np.mean(v)), 3)}
        for name, v in spent.items()
    }


def server_seconds(client: httpx.Client, url: str) -> tuple[float, int]:
    """Total seconds and count of /query requests as the server timed them (its own metrics histogram)."""
    text = client.get(f"{url}/metrics").text
    found = {}
    for line in text.splitlines():
        for name in ("sum", "count"):
            if line.startswith(f"livemem_http_request_duration_seconds_{name}{{") and 'route="/query"' in line:
                found[name] = float(line.rsplit(" ", 1)[1])
    return found.get("sum", 0.0), int(found.get("count", 0))


def server_and_client(index_dir: Path, texts: list[str]) -> dict[str, float]:
    """One worker, one client: the mean time the server spent per /query (from the app's request middleware,
    so everything inside the ASGI app) against the mean time the client waited (plus HTTP, uvicorn, the client)."""
    with uvicorn_server(index_dir, cache_size=0, workers=1) as url, httpx.Client(timeout=30) as client:
        timed_queries(client, url, texts[-30:])
        before = server_seconds(client, url)
        latencies, errors = timed_queries(client, url, texts)
        after = server_seconds(client, url)
    inside = (after[0] - before[0]) / max(1, after[1] - before[1]) * 1000
    waited = float(np.mean(latencies))
    return {
        "requests": len(latencies),
        "errors": errors,
        "client_mean_ms": round(waited, 3),
        "server_mean_ms": round(inside, 3),
        "outside_app_mean_ms": round(waited - inside, 3),
    }


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": len(os.sched_getaffinity(0)),
        "processor": platform.processor() or platform.machine(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def markdown(report: dict) -> str:
    lines = [
        f"# Serving latency: {report['request']['mode']} top-10 (return {report['request']['return']}) /query over real HTTP (uvicorn, loopback)",
        "",
        f"SciFact index `{report['index_version']}`, {report['uvicorn_workers']} uvicorn worker(s), train claims "
        f"(distinct; result cache off unless stated). Machine: {report['machine']['cpus']} CPUs, load average "
        f"{report['machine']['load_average_at_start']} at the start (shared with other agents: compare rows of "
        "this run with each other, not with other runs).",
        "",
    ]
    if "components" in report:
        lines += [
            "## Where one request spends its time (in-process, ONNX encoder, int8 query vectors, 1 thread)",
            "",
            "| step | p50 ms | mean ms |",
            "|---|---|---|",
        ]
        for name, row in report["components"].items():
            lines.append(f"| {name} | {row['p50_ms']} | {row['mean_ms']} |")
        lines += [
            "",
            "`encode_cpu` is the thread's CPU time for the encoding (what it costs without other processes); "
            "`encode_fp32` the float32 query vectors of the same texts, in a pass of their own; `retrieval` is the "
            "search with the vector just encoded, split into the retriever's own steps (`retrieval.*`, timed by "
            "`Retriever.search`); `trace` what the request pays for its trace (id, events, queueing them), "
            "`trace_append` the append the flusher thread then does.",
            "",
            "One uvicorn worker, one client: the server's own mean time per /query (its request middleware: "
            "everything inside the app) against the client's mean wait, the rest being HTTP, uvicorn and the "
            "client: " + ", ".join(f"{k} {v}" for k, v in report["server_and_client"].items()) + ".",
            "",
        ]
    if report["rounds"]:
        lines += [
            "## Over HTTP, per query encoder",
            "",
            "`onnx`: serving's defaults (int8 query vectors); `onnx-fp32`: float32 query vectors; rounds in turn, "
            "then the median of each column over the rounds. `server CPU ms/req`: CPU time of the uvicorn processes "
            "(all threads, user + system) per request, what bounds throughput when clients and workers share the cores."
            + (
                f" `@baseline`: the same, served by the code at `{report['baseline']}`."
                if report.get("baseline")
                else ""
            ),
            "",
            "| round | encoder | load | one client p50 ms | p90 | p99 | server CPU ms/req | errors | 8 clients req/s "
            "| p50 ms | p99 ms | server CPU ms/req | errors |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for number, round_ in enumerate(report["rounds"], 1):
            for name, row in round_.items():
                lines.append(_encoder_row(str(number), name, row))
        for name, row in report["encoders"].items():
            lines.append(_encoder_row("median", name, row))
    if report.get("paired"):
        lines += [
            "",
            f"## Paired: this code and `{report['baseline']}` served at once",
            "",
            "One client sends each query to both (which first alternates): p50 of each, and the median of the "
            "per-query differences; then 4 clients on each at the same time. Server CPU: CPU time of the uvicorn "
            "processes (all threads) per request.",
            "",
            "| round | one client p50 new / baseline ms | median difference ms | server CPU ms/req new / baseline "
            "| 4+4 clients req/s new / baseline | server CPU ms/req new / baseline | errors |",
            "|---|---|---|---|---|---|---|",
        ]
        for number, row in enumerate(report["paired"], 1):
            one_new, one_old = row["one_client_new"], row["one_client_baseline"]
            many_new, many_old = row["concurrent_new"], row["concurrent_baseline"]
            lines.append(
                f"| {number} | {one_new['p50_ms']} / {one_old['p50_ms']} | "
                f"{row['one_client_new_minus_baseline_ms']['median']} | "
                f"{one_new['server_cpu_ms']} / {one_old['server_cpu_ms']} | "
                f"{many_new['requests_per_s']} / {many_old['requests_per_s']} | "
                f"{many_new['server_cpu_ms']} / {many_old['server_cpu_ms']} | "
                f"{many_new['errors'] + many_old['errors']} |"
            )
    hit = report["one_client_cache_hit"]
    lines += ["", f"Cache hits (one query repeated, one client): p50 {hit['p50_ms']} ms, p99 {hit['p99_ms']} ms.", ""]
    lines += [f"Reproduce: `.venv/bin/{report['command']}`", ""]
    return "\n".join(lines)


def _encoder_row(label: str, name: str, row: dict) -> str:
    one, many = row["one_client_uncached"], row["concurrent_uncached"]
    return (
        f"| {label} | {name} | {row.get('load_1min', '')} | {one['p50_ms']} | {one['p90_ms']} | {one['p99_ms']} | "
        f"{one.get('server_cpu_ms', '')} | {one['errors']} | {many['requests_per_s']} | {many['p50_ms']} | "
        f"{many['p99_ms']} | {many.get('server_cpu_ms', '')} | {many['errors']} |"
    )


def median_row(rows: list[dict]) -> dict:
    """Each number of the rows' runs, the median over the rounds (errors: the sum)."""
    out: dict = {}
    for part in ("one_client_uncached", "concurrent_uncached"):
        keys = rows[0][part].keys()
        out[part] = {
            k: sum(r[part][k] for r in rows)
            if k == "errors"
            else round(float(np.median([r[part][k] for r in rows])), 3)
            for k in keys
        }
    return out


def paired(home_root: Path, baseline: Path, args: argparse.Namespace, texts: list[str]) -> dict:
    """This code and the baseline's served at once (serving's defaults, ``args.workers`` each), compared request by
    request: one client sends each query to both (which first alternates), so a change of load on a shared machine
    hits both sides of a pair alike; then 4 clients on each at the same time for ``args.seconds``."""
    out: dict = {}
    serving = uvicorn_server(home_root, 0, args.workers, ENCODERS["onnx"], trace_dir=WORK / "paired-new")
    with (
        serving as new,
        uvicorn_server(
            home_root, 0, args.workers, ENCODERS["onnx"], trace_dir=WORK / "paired-baseline", root=baseline
        ) as old,
    ):
        urls = {"new": new, "baseline": old}
        with httpx.Client(timeout=30) as client:
            for url in urls.values():
                timed_queries(client, url, texts[-30:])  # warm up
            cpu = {name: server_cpu_seconds(url) for name, url in urls.items()}
            latencies: dict[str, list[float]] = {"new": [], "baseline": []}
            for number, text in enumerate(texts[: args.single]):
                order = ["new", "baseline"] if number % 2 == 0 else ["baseline", "new"]
                for name in order:
                    latencies[name].extend(timed_queries(client, urls[name], [text])[0])
            for name, url in urls.items():
                out[f"one_client_{name}"] = {
                    **summary(latencies[name]),
                    "server_cpu_ms": _per(server_cpu_seconds(url) - cpu[name], latencies[name]),
                }
            differences = np.subtract(latencies["new"], latencies["baseline"])
            out["one_client_new_minus_baseline_ms"] = {
                "median": round(float(np.median(differences)), 3),
                "mean": round(float(differences.mean()), 3),
            }
        cpu = {name: server_cpu_seconds(url) for name, url in urls.items()}
        results: dict[str, dict] = {}
        threads = [
            threading.Thread(target=lambda n=name, u=url: results.__setitem__(n, throughput(u, texts, 4, args.seconds)))
            for name, url in urls.items()
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for name, url in urls.items():
            used = server_cpu_seconds(url) - cpu[name]
            out[f"concurrent_{name}"] = {
                **results[name],
                "server_cpu_ms": round(used * 1000 / results[name]["requests"], 3),
            }
    return out


def encoder_round(
    home_root: Path, encoder: str, args: argparse.Namespace, texts: list[str], root: Path = PROJECT_ROOT
) -> dict:
    row: dict = {"load_1min": round(os.getloadavg()[0], 2)}
    serving = uvicorn_server(home_root, cache_size=0, workers=args.workers, extra_env=ENCODERS[encoder], root=root)
    with serving as url:
        with httpx.Client(timeout=30) as client:
            timed_queries(client, url, texts[-30:])  # warm up
            cpu = server_cpu_seconds(url)
            latencies, errors = timed_queries(client, url, texts[: args.single])
            cpu = server_cpu_seconds(url) - cpu
        row["one_client_uncached"] = {**summary(latencies), "errors": errors, "server_cpu_ms": _per(cpu, latencies)}
        print(encoder, root, "one client:", row["one_client_uncached"], flush=True)
        cpu = server_cpu_seconds(url)
        row["concurrent_uncached"] = throughput(url, texts, 8, args.seconds)
        cpu = server_cpu_seconds(url) - cpu
        row["concurrent_uncached"]["server_cpu_ms"] = round(cpu * 1000 / row["concurrent_uncached"]["requests"], 3)
        print(encoder, root, "8 clients:", row["concurrent_uncached"], flush=True)
    return row


def _per(cpu_seconds: float, requests: list) -> float:
    return round(cpu_seconds * 1000 / max(1, len(requests)), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of the concurrent run")
    parser.add_argument("--single", type=int, default=400, help="requests in the one-client run")
    parser.add_argument("--encoders", default="onnx,onnx-fp32", help=f"query encoders to compare, of {list(ENCODERS)}")
    parser.add_argument("--rounds", type=int, default=1, help="repeat the encoders in turn this many times")
    parser.add_argument("--no-build", action="store_true", help="serve the published index as it is (no build)")
    parser.add_argument("--index", type=Path, help="serve this index home as it is (no build)")
    parser.add_argument(
        "--baseline", type=Path, help="another checkout of the project: each round also runs each encoder on it"
    )
    parser.add_argument(
        "--paired", type=int, default=0, help="with --baseline: rounds of both served at once, compared query by query"
    )
    parser.add_argument(
        "--no-components", action="store_true", help="skip the in-process steps and the server/client split"
    )
    parser.add_argument("--mode", default="hybrid", choices=["hybrid", "dense", "sparse"], help="the queries' mode")
    parser.add_argument(
        "--return", dest="return_", default="chunks", choices=["chunks", "documents"], help="the queries' return"
    )
    parser.add_argument("--tag", default="", help="suffix of the result files")
    args = parser.parse_args()
    QUERY_MODE[0] = args.mode
    QUERY_RETURN[0] = args.return_
    encoders = args.encoders.split(",")
    if not set(encoders) <= set(ENCODERS):
        parser.error(f"--encoders: any of {list(ENCODERS)}")
    home = IndexHome(args.index or WORK / "rag_index") if args.index or args.no_build else ensure_index()
    texts = list(load_queries("train")[0].values())
    report: dict = {
        "command": "python -m bench.serving_latency " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "index_version": home.current(),
        "uvicorn_workers": args.workers,
        "request": query_body("..."),
        "baseline": str(args.baseline) if args.baseline else None,
    }
    if not args.no_components:
        report["components"] = components(home.root, texts[:200], WORK)
        print("components:", report["components"])
        report["server_and_client"] = server_and_client(home.root, texts[:200])
        print("server and client:", report["server_and_client"])
    # (name, encoder, project root) of every run in a round; the baseline's runs are named "<encoder>@baseline"
    runs = [(e, e, PROJECT_ROOT) for e in encoders]
    if args.baseline:
        runs += [(f"{e}@baseline", e, args.baseline.resolve()) for e in encoders]
    report["rounds"], report["encoders"] = [], {}
    for number in range(args.rounds):
        ordered = runs if number % 2 == 0 else runs[::-1]  # A B, B A, ...: a drifting load favours neither
        rows = {name: encoder_round(home.root, encoder, args, texts, root) for name, encoder, root in ordered}
        report["rounds"].append({name: rows[name] for name, _, _ in runs})
    if report["rounds"]:
        report["encoders"] = {name: median_row([r[name] for r in report["rounds"]]) for name, _, _ in runs}
    if args.baseline and args.paired:
        report["paired"] = [paired(home.root, args.baseline.resolve(), args, texts) for _ in range(args.paired)]
        for row in report["paired"]:
            print("paired:", json.dumps(row), flush=True)
    with uvicorn_server(home.root, cache_size=1024, workers=args.workers) as url, httpx.Client(timeout=30) as client:
        timed_queries(client, url, texts[:1] * 20)
        latencies, errors = timed_queries(client, url, texts[:1] * 500)
        report["one_client_cache_hit"] = {**summary(latencies), "errors": errors}
        print("cache hits:", report["one_client_cache_hit"])
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = f"serving_latency{'-' + args.tag if args.tag else ''}"
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    (RESULTS / f"{name}.md").write_text(markdown(report), encoding="utf-8")
    print(f"wrote {RESULTS / name}.json and .md")


if __name__ == "__main__":
    main()
