"""The randomized differential test, run long: many random histories, each build compared with a from-scratch one.

``make test`` runs a few histories (``tests/pipelines/test_differential.py``); this runs as many as asked, with longer
histories, and records how many histories, commits and build comparisons ran and whether any differed.

    .venv/bin/python -m bench.differential                    # 200 histories of up to 25 steps
    .venv/bin/python -m bench.differential --examples 20 --steps 12

Results: ``bench/results/differential.{json,md}``. A failure prints hypothesis's shrunk history (the rules and
their arguments) and the differences per source and file, and is recorded as such.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.registry_bench import machine_facts

RESULTS = Path("bench/results")
WORK = Path("bench/.work/differential")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=200, help="random histories")
    parser.add_argument("--steps", type=int, default=25, help="rules per history at most")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    stats = WORK / "stats.jsonl"
    stats.unlink(missing_ok=True)
    env = {
        **os.environ,
        "LIVEMEM_DIFF_EXAMPLES": str(args.examples),
        "LIVEMEM_DIFF_STEPS": str(args.steps),
        "LIVEMEM_DIFF_STATS": str(stats.resolve()),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    command = [sys.executable, "-m", "pytest", "tests/pipelines/test_differential.py", "-k", "incremental_builds", "-x", "-q",
               "-p", "no:logging", "--timeout=0"]  # fmt: skip
    started = time.perf_counter()
    run = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    histories = [json.loads(line) for line in stats.read_text(encoding="utf-8").splitlines()] if stats.exists() else []
    report = {
        "command": f"python -m bench.differential --examples {args.examples} --steps {args.steps}",
        "machine": machine_facts(),
        "examples_asked": args.examples,
        "max_steps": args.steps,
        "histories_run": len(histories),
        "commits": sum(h["commits"] for h in histories),
        "builds_compared": sum(h["compared"] for h in histories),
        "documents_written": sum(h.get("documents", 0) for h in histories),
        "extractor_upgrades": sum(h.get("upgrades", 0) for h in histories),
        "passed": run.returncode == 0,
        "elapsed_s": round(elapsed, 1),
        "output_tail": (run.stdout + run.stderr)[-4000:] if run.returncode else run.stdout.strip().splitlines()[-1:],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "differential.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    verdict = "no difference found" if report["passed"] else "DIFFERENCE FOUND (see output below)"
    lines = [
        "# Differential test, long run",
        "",
        f"Command: `{report['command']}`  ",
        f"Machine: {report['machine']['nproc']} cores, {report['machine']['cpu_model']}, "
        f"{report['machine']['ram_gib']} GiB  ",
        "",
        f"- histories run: {report['histories_run']} (asked {args.examples}, up to {args.steps} rules each; "
        "hypothesis counts shrinking attempts too)",
        f"- commits made: {report['commits']}",
        f"- incremental builds compared with from-scratch builds: {report['builds_compared']}",
        f"- documents written (PDF, DOCX, HTML, scanned PDF): {report.get('documents_written', 0)}; "
        f"extractor upgrades: {report.get('extractor_upgrades', 0)}",
        f"- result: {verdict}",
        f"- elapsed: {report['elapsed_s']} s",
    ]
    if not report["passed"]:
        lines += ["", "```", report["output_tail"], "```"]
    (RESULTS / "differential.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    sys.exit(0 if report["passed"] else 1)


if __name__ == "__main__":
    main()
