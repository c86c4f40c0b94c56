"""Answers measured like retrieval: the bundled answer suite (``examples/eval/suite.yaml``) asked through the HTTP
app's ``POST /chat`` (FastAPI TestClient, extractive answers, answer cache off) over the bundled example index,
built whole into a fresh home under ``bench/.work/answers`` (build_index, export_gbim, verify_registry).

Prints and writes accuracy per category and overall, /chat p50 / p99 over the suite, and every failing case with
why (``bench/results/answers-<tag>.{json,md}``). The same suite is also asked in process through
``livemem.answer.evaluation.SnapshotAsker`` (what ``livemem eval`` and the publish gate use): the two must agree
case by case, which the report says.

    .venv/bin/python -m bench.answers [--tag r1] [--suite examples/eval/suite.yaml]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from livemem.sources.config import PROJECT_ROOT

RESULTS = PROJECT_ROOT / "bench" / "results"
WORK = PROJECT_ROOT / "bench" / ".work" / "answers"
INTERNAL_KEY = "bench-answers-internal"


def build_index(home: Path) -> None:
    from dagster import DagsterInstance

    from orchestration.definitions import build_definitions

    shutil.rmtree(home.parent, ignore_errors=True)
    home.parent.mkdir(parents=True)
    defs = build_definitions(PROJECT_ROOT / "examples" / "sources.yaml", home)
    instance = DagsterInstance.ephemeral()
    for job in ("build_index", "export_gbim", "verify_registry"):
        assert defs.resolve_job_def(job).execute_in_process(instance=instance).success, job


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD")
    return f"{head}{' (with uncommitted changes)' if git('status', '--porcelain', '--untracked-files=no') else ''}"


def summary(ms: list[float]) -> dict[str, float]:
    a = np.array(ms)
    return {"n": int(a.size), "p50_ms": round(float(np.percentile(a, 50)), 2),
            "p99_ms": round(float(np.percentile(a, 99)), 2), "mean_ms": round(float(a.mean()), 2)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path, default=PROJECT_ROOT / "examples" / "eval" / "suite.yaml")
    parser.add_argument("--tag", default="local", help="results go to bench/results/answers-<tag>.{json,md}")
    parser.add_argument("--code", help="what code ran, for the report (default: this checkout's git HEAD)")
    args = parser.parse_args()

    from fastapi.testclient import TestClient

    from livemem.answer.evaluation import HttpAsker, SnapshotAsker, load_suite, run_suite
    from livemem.engine.snapshot import load_snapshot
    from livemem.settings import ContextSettings, EngineConfig
    from livemem.version.store import IndexHome
    from serving.app import create_app
    from serving.services.context import ContextService
    from serving.settings import Settings

    suite = load_suite(args.suite)
    home = WORK / "rag_index"
    build_index(home)
    settings = Settings(index_dir=home, warm_up=False, api_keys={INTERNAL_KEY: "internal"})
    context = ContextSettings(warm_up=False, cache_size=0)
    app = create_app(settings)
    state = app.state.serving
    state.context_service = ContextService(state, context, None)
    with TestClient(app) as client:
        version = client.get("/healthz").json().get("index_version")
        for _ in range(3):  # the model, the version's tables and the place tables load on first use
            client.post("/chat", json={"message": "warm up: food pantry in Oak Hill"})
        http = run_suite(suite, HttpAsker(client, {"internal": INTERNAL_KEY}), version)
    index = IndexHome(home, engine=EngineConfig.from_env())  # as the app's (ServingState.from_settings)
    snap = load_snapshot(index, index.current())
    try:
        local = run_suite(suite, SnapshotAsker(snap, state.retriever, context, settings), version)
    finally:
        snap.close()
    disagree = [a.id for a, b in zip(http.cases, local.cases, strict=True) if a.passed != b.passed]
    latency = summary([c.elapsed_ms for c in http.cases if c.response_class is not None])
    report = {
        "command": "python -m bench.answers " + " ".join(sys.argv[1:]),
        "code": args.code or commit(),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
        },
        "suite_file": str(args.suite.resolve().relative_to(PROJECT_ROOT)) if args.suite.resolve().is_relative_to(
            PROJECT_ROOT) else str(args.suite),
        "index_version": version,
        **http.as_dict(cases=False),
        "chat_latency": latency,
        "in_process_disagrees_on": disagree,
        "failures": {c.id: {"category": c.category, "question": c.question, "failures": list(c.failures)}
                     for c in http.failed},
    }  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"answers-{args.tag}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    lines = [
        f"# Answer suite: {suite.name} ({http.total} questions), through POST /chat (extractive, cache off)", "",
        f"Command: `{report['command']}`  ", f"Code: {report['code']}  ", f"Machine: {report['machine']}  ",
        f"Suite: `{report['suite_file']}`; index version {version} (bundled example, built fresh)", "",
        f"**{http.summary()}**; /chat p50 {latency['p50_ms']} ms, p99 {latency['p99_ms']} ms over the suite "
        f"({latency['n']} answers); in-process evaluation (`livemem eval`, the gate) "
        + ("agrees on every case" if not disagree else f"disagrees on {', '.join(disagree)}"), "",
        "| category | passed | total | accuracy |", "|---|---|---|---|",
    ]  # fmt: skip
    for name, row in http.by_category().items():
        lines.append(f"| {name} | {row['passed']} | {row['total']} | {row['accuracy']:.1%} |")
    lines.append(f"| **all** | {http.passed} | {http.total} | {http.accuracy:.1%} |")
    if http.failed:
        lines += ["", "## Failing cases", ""]
        for case in http.failed:
            lines.append(f"- `{case.id}` ({case.category}) {case.question}")
            lines.extend(f"  - {failure}" for failure in case.failures)
    (RESULTS / f"answers-{args.tag}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines[: 12 + len(http.by_category())]))


if __name__ == "__main__":
    main()
