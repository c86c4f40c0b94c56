"""/context and /chat latency through real HTTP on loopback, against uvicorn running ``serving.app:app`` over
the bundled example index (built whole once: build_index, export_gbim, verify_registry).

- /context, one client, distinct messages (answer cache off): p50 / p99 (target p50 ≤ 40 ms);
- /chat without an LLM backend (extractive), distinct messages, cache off: p50 / p99 (target p50 ≤ 50 ms);
- answer-cache hits: one /chat message repeated, cache on: p50 / p99 (target p50 ≤ 3 ms).

    .venv/bin/python -m bench.context_latency [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from bench.serving_latency import uvicorn_server
from livemem.sources.config import PROJECT_ROOT

RESULTS = PROJECT_ROOT / "bench" / "results"
WORK = PROJECT_ROOT / "bench" / ".work" / "context"
TOWNS = ["Oak Hill", "Beckley", "Fayetteville", "Sophia", "Mount Hope", "Montgomery", "Shady Spring", "Ansted"]
NEEDS = ["help paying the heating bill", "food pantry", "SNAP application", "WIC appointment", "Medicaid renewal",
         "winter coats for kids", "rental assistance", "sliding fee clinic"]  # fmt: skip
FRAMES = ["{need} in {town}", "Where can I get {need} near {town} WV?", "{need} for a family in {town}"]


def messages(n: int) -> list[str]:
    out = [f.format(need=need, town=town) for f in FRAMES for town in TOWNS for need in NEEDS]
    return out[:n]


def ensure_index() -> Path:
    home = WORK / "rag_index"
    if (home / "CURRENT").is_file():
        return home
    from dagster import DagsterInstance

    from orchestration.definitions import build_definitions

    defs = build_definitions(PROJECT_ROOT / "examples" / "sources.yaml", home)
    instance = DagsterInstance.ephemeral()
    for job in ("build_index", "export_gbim", "verify_registry"):
        assert defs.resolve_job_def(job).execute_in_process(instance=instance).success, job
    return home


def server(home: Path, cache_size: int):
    extra = {"LIVEMEM_ANSWER_CACHE_SIZE": str(cache_size), "LIVEMEM_WARM_UP": "false"}
    return uvicorn_server(home, cache_size=1024, workers=1, extra_env=extra, trace_dir=WORK)


def timed(client: httpx.Client, path: str, texts: list[str]) -> list[float]:
    out = []
    for text in texts:
        started = time.perf_counter()
        r = client.post(path, json={"message": text})
        out.append((time.perf_counter() - started) * 1000)
        r.raise_for_status()
    return out


def summary(ms: list[float]) -> dict[str, float]:
    a = np.array(ms)
    return {"n": int(a.size), "p50_ms": round(float(np.percentile(a, 50)), 2),
            "p99_ms": round(float(np.percentile(a, 99)), 2), "mean_ms": round(float(a.mean()), 2)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=150)
    args = parser.parse_args()
    home = ensure_index()
    texts = messages(args.messages)
    results: dict[str, dict] = {}
    with server(home, cache_size=0) as url, httpx.Client(base_url=url, timeout=30) as client:
        timed(client, "/context", ["warm up message"] * 5)
        results["context"] = summary(timed(client, "/context", texts))
        results["chat_extractive"] = summary(timed(client, "/chat", texts))
    with server(home, cache_size=1024) as url, httpx.Client(base_url=url, timeout=30) as client:
        timed(client, "/chat", ["food pantry in Beckley"] * 5)
        results["chat_cache_hit"] = summary(timed(client, "/chat", ["food pantry in Beckley"] * args.messages))
    targets = {"context": 40.0, "chat_extractive": 50.0, "chat_cache_hit": 3.0}
    report = {
        "command": "python -m bench.context_latency " + " ".join(sys.argv[1:]),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
        },
        "index": str(home),
        "results": {
            k: {**v, "target_p50_ms": targets[k], "met": v["p50_ms"] <= targets[k]} for k, v in results.items()
        },
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "context_latency.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    lines = ["# /context and /chat latency (real HTTP, one client, uvicorn on 127.0.0.1)", "",
             f"Command: `{report['command']}`  ", f"Machine: {report['machine']}", "",
             "| measure | n | p50 ms | p99 ms | mean ms | target p50 | met |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, r in report["results"].items():
        lines.append(f"| {name} | {r['n']} | {r['p50_ms']} | {r['p99_ms']} | {r['mean_ms']} | ≤ {r['target_p50_ms']} | "
                     f"{'yes' if r['met'] else 'no'} |")  # fmt: skip
    (RESULTS / "context_latency.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
