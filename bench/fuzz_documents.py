"""The document fuzz test run long (issue 49): N real documents mutated at random (the PDFs of
``../shared/data/docs/pdf`` and the bundled flyers: bytes flipped, cut short, slices gone or repeated, object
references pointed elsewhere, a DOCX part damaged, markup nested deep), committed beside good files and the 591-byte
PDF whose page tree holds itself, and built for real (a hash stand-in for the model: extraction is what is measured).
The build must stage and publish, every good file be indexed, every mutated file be indexed or reported skipped with
its error (never both), and ``index_complete`` pass; ``tests/pipelines/test_documents_fuzz.py`` runs 60 of them.

    .venv/bin/python -m bench.fuzz_documents                      # 1,000 mutated documents, seed 49
    .venv/bin/python -m bench.fuzz_documents --count 3000 --seed 7

Results: ``bench/results/fuzz_documents.{json,md}`` (reasons, mutations, slowest extraction, the build's timings).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import Counter

from bench.registry_bench import machine_facts
from livemem.sources.config import PROJECT_ROOT

sys.path.insert(0, str(PROJECT_ROOT / "tests"))  # the mutations are the fuzz test's (tests/support)

from support.fuzz_documents import fuzz_build, good_files, held

RESULTS = PROJECT_ROOT / "bench" / "results"
WORK = PROJECT_ROOT / "bench" / ".work" / "fuzz_documents"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="mutated documents (default 1000)")
    parser.add_argument("--seed", type=int, default=49)
    args = parser.parse_args()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    started = time.perf_counter()
    outcome = fuzz_build(WORK, args.count, seed=args.seed)
    elapsed = time.perf_counter() - started
    problems = held(outcome)
    result = outcome["result"]
    mutations = outcome["mutations"]
    skipped, indexed = outcome["skipped"], outcome["indexed"]
    by_mutation: dict[str, Counter] = {}
    for path, how in mutations.items():
        for kind in how.split("+"):
            by_mutation.setdefault(kind, Counter())["skipped" if path in skipped else "indexed"] += 1
    report = {
        "command": "python -m bench.fuzz_documents " + " ".join(sys.argv[1:]),
        "machine": machine_facts(),
        "mutated_documents": args.count,
        "seed": args.seed,
        "files_committed": len(outcome["files"]),
        "build_staged": result.staged,
        "published": outcome["home"].current() == result.version_id,
        "good_files_indexed": sum(1 for p in outcome["files"] if p in indexed and not p.startswith("fuzz/")),
        "mutated_indexed": sum(1 for p in mutations if p in indexed),
        "mutated_skipped": sum(1 for p in mutations if p in skipped),
        "skipped_reasons": dict(Counter(skipped.values()).most_common()),
        "by_mutation": {k: dict(v) for k, v in sorted(by_mutation.items())},
        "problems": problems,
        "passed": not problems and result.staged,
        "timings_s": result.timings,
        "elapsed_s": round(elapsed, 1),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "fuzz_documents.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    machine = report["machine"]
    lines = [
        "# Document fuzz run",
        "",
        f"Command: `.venv/bin/{report['command']}`  ",
        f"Machine: {machine['nproc']} cores, {machine['cpu_model']}, {machine['ram_gib']} GiB (shared with other work)",
        "",
        f"- mutated documents: {args.count} (seed {args.seed}), beside {len(good_files())} good files and the 591-byte "
        "self-referencing PDF",
        f"- build staged and published: {report['build_staged'] and report['published']}; good files indexed: "
        f"{report['good_files_indexed']}",
        f"- mutated documents indexed: {report['mutated_indexed']}, reported skipped: {report['mutated_skipped']}",
        "- skipped, by reason: " + ", ".join(f"{k} {v}" for k, v in report["skipped_reasons"].items()),
        "- by mutation (a document may have several): "
        + "; ".join(
            f"{k}: {v.get('indexed', 0)} indexed / {v.get('skipped', 0)} skipped"
            for k, v in report["by_mutation"].items()
        ),
        f"- read and chunk {result.timings.get('read_chunk_s')} s, whole build {result.timings.get('total_s')} s, "
        f"run {report['elapsed_s']} s",
        f"- result: {'held: no problem found' if report['passed'] else 'PROBLEMS: ' + '; '.join(problems[:20])}",
    ]
    (RESULTS / "fuzz_documents.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    sys.exit(0 if report["passed"] else 1)


if __name__ == "__main__":
    main()
