"""A fresh worker's first /context (issue 49) through real HTTP: uvicorn with two workers over the bundled example
index (``bench.context_latency``'s), started as ``make serve`` starts it; the first two requests one at a time (each
worker's first, or one worker's first two), a bounded load loop of distinct messages two at a time, then ten warm
ones one at a time (answer cache off): workers killed (the supervisor's log), the first requests against the warm
median, per server start. Target: 0 killed, first ≤ 2× warm.

    .venv/bin/python -m bench.first_request [--starts 2] [--rounds 12]

Results: ``bench/results/first_request.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time

from bench.context_latency import ensure_index
from bench.registry_bench import machine_facts
from livemem.sources.config import PROJECT_ROOT
from livemem.version.store import IndexHome

sys.path.insert(0, str(PROJECT_ROOT / "tests"))  # the real-server helper and the load loop are the test's

from support.servers import uvicorn_process

RESULTS = PROJECT_ROOT / "bench" / "results"
SERVE_ARGS = ("--no-access-log",)  # and support.servers.SERVE_ARGS, as `make serve` starts uvicorn
TOWNS = ["Oak Hill", "Beckley", "Fayetteville", "Mount Hope", "Ansted", "Sophia"]
NEEDS = ["food pantry", "help paying the heating bill", "SNAP application", "Medicaid renewal", "WIC appointment"]


def one_start(home: IndexHome, rounds: int, start: int) -> dict:
    sys.path.insert(0, str(PROJECT_ROOT / "tests" / "api"))
    from test_workers_first_request import ask, in_pairs

    began = time.perf_counter()
    env = {"LIVEMEM_ANSWER_CACHE_SIZE": "0"}
    with uvicorn_process(home, workers=2, timeout=300, env=env, log_level="info", args=SERVE_ARGS) as (url, proc):
        while sum("Application startup complete" in line for line in proc.lines) < 2:
            time.sleep(0.2)
        ready = time.perf_counter() - began
        first = [
            ask(url, m) for m in (f"heating help for a family in Oak Hill {start}", f"food pantry in Beckley {start}")
        ]
        messages = [f"{NEEDS[i % len(NEEDS)]} near {TOWNS[i % len(TOWNS)]} ({start}-{i})" for i in range(2 * rounds)]
        loaded = in_pairs(url, messages)  # the load loop: two clients at a time
        warm = [ask(url, f"{NEEDS[i % len(NEEDS)]} in {TOWNS[i % len(TOWNS)]}, warm {start}-{i}") for i in range(10)]
        lines = list(proc.lines)
    kills = [line.strip() for line in lines if re.search(r"Child process \[\d+\] died|not ready in time", line)]
    median = statistics.median(warm)
    return {
        "ready_s": round(ready, 1),
        "workers_killed": len(kills),
        "first_s": [round(x, 3) for x in first],
        "warm_median_s": round(median, 3),
        "warm_max_s": round(max(warm), 3),
        "loaded_median_s": round(statistics.median(loaded), 3),
        "first_over_warm": round(max(first) / median, 2),
        "requests": len(first) + len(warm),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=2, help="server starts (each a fresh pair of workers)")
    parser.add_argument("--rounds", type=int, default=12, help="load pairs per start after the first requests")
    args = parser.parse_args()
    home = IndexHome(ensure_index())
    runs = [one_start(home, args.rounds, i) for i in range(args.starts)]
    report = {
        "command": "python -m bench.first_request " + " ".join(sys.argv[1:]),
        "machine": machine_facts(),
        "runs": runs,
        "met": all(r["workers_killed"] == 0 and r["first_over_warm"] <= 2 for r in runs),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "first_request.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    machine = report["machine"]
    lines = [
        "# A fresh worker's first /context (2 uvicorn workers, real HTTP, two clients)",
        "",
        f"Command: `.venv/bin/{report['command']}`  ",
        f"Machine: {machine['nproc']} cores, {machine['cpu_model']} (shared with other work)",
        "",
        "| start | ready s | workers killed | first requests s | warm median s | warm max s | first / warm | "
        "load loop median s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(runs):
        lines.append(
            f"| {i + 1} | {r['ready_s']} | {r['workers_killed']} | {', '.join(map(str, r['first_s']))} | "
            f"{r['warm_median_s']} | {r['warm_max_s']} | {r['first_over_warm']} | {r['loaded_median_s']} |"
        )
    lines += ["", f"Target (0 killed, first ≤ 2× warm) met: {'yes' if report['met'] else 'no'}"]
    (RESULTS / "first_request.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
