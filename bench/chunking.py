"""Chunking throughput on SciFact: word-piece chunks (the default) against character-only chunks, interleaved.

Each of SciFact's 5,183 abstracts is the markdown file ``bench.serving_index`` indexes (``# title`` and the text).
Per repetition, in alternating order: ``chunk_files(files, 2000, None)`` (characters only: the rules before
word-piece limits) and ``chunk_files(files, 2000, 254)``; the first word-piece run of the process counts every
distinct word with the tokenizer (``cold``), later ones find them remembered (``warm``, as in a long-running
Dagster process). Also counts the chunks whose embedded text is over the model's 254 word pieces.

    .venv/bin/python -m bench.chunking        # writes bench/results/chunking.json and .md
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time

from bench.serving_index import SCIFACT
from livemem.index.records import embed_text
from livemem.ingest import chunking
from livemem.sources.config import PROJECT_ROOT

RESULTS = PROJECT_ROOT / "bench" / "results"


def scifact_files() -> list[tuple[str, str]]:
    files = []
    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            files.append((f"docs/{doc['_id']}.md", f"# {' '.join(doc['title'].split())}\n\n{doc['text'].strip()}\n"))
    return files


def over_limit(chunks: list[list[chunking.Chunk]]) -> int:
    texts = [embed_text(c.content, c.heading_path) for cs in chunks for c in cs]
    encodings = chunking.tokenizer().encode_batch(texts, add_special_tokens=False)
    return sum(len(e.ids) > chunking.DEFAULT_CHUNK_TOKENS for e in encodings)


def main(repeats: int = 3) -> None:
    files = scifact_files()
    chunking.tokenizer()
    runs: dict[str, list[float]] = {"chars": [], "tokens_cold": [], "tokens_warm": []}
    counts: dict[str, int] = {}
    results: dict[str, list[list[chunking.Chunk]]] = {}
    for rep in range(repeats):
        order = ("chars", "tokens") if rep % 2 == 0 else ("tokens", "chars")
        for kind in order:
            started = time.perf_counter()
            out = chunking.chunk_files(files, 2000, None if kind == "chars" else chunking.DEFAULT_CHUNK_TOKENS)
            elapsed = time.perf_counter() - started
            name = kind if kind == "chars" else ("tokens_cold" if not runs["tokens_cold"] else "tokens_warm")
            runs[name].append(elapsed)
            counts[kind] = sum(map(len, out))
            results[kind] = out
    report = {
        "command": "python -m bench.chunking",
        "machine": {"platform": platform.platform(), "cpus": len(os.sched_getaffinity(0)), "load": os.getloadavg()},
        "files": len(files),
        "chunks": counts,
        "seconds": {k: [round(v, 3) for v in vs] for k, vs in runs.items()},
        "chunks_per_s": {
            "chars": round(counts["chars"] / statistics.median(runs["chars"])),
            "tokens_cold": round(counts["tokens"] / runs["tokens_cold"][0]),
            "tokens_warm": round(counts["tokens"] / statistics.median(runs["tokens_warm"])),
        },
        "files_per_s": {
            "chars": round(len(files) / statistics.median(runs["chars"])),
            "tokens_cold": round(len(files) / runs["tokens_cold"][0]),
            "tokens_warm": round(len(files) / statistics.median(runs["tokens_warm"])),
        },
        "embedded_over_254_word_pieces": {k: over_limit(v) for k, v in results.items()},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "chunking.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    lines = [
        "# Chunking throughput on SciFact",
        "",
        f"Command: `{report['command']}` — {report['machine']['platform']}, {report['machine']['cpus']} CPUs, "
        f"load average at the end {', '.join(f'{x:.1f}' for x in report['machine']['load'])} (a shared machine).",
        "",
        "| chunker | chunks | runs (s) | files/s | chunks/s | embedded text over 254 word pieces |",
        "|---|---|---|---|---|---|",
    ]
    for name, kind in (("chars", "chars"), ("tokens_cold", "tokens"), ("tokens_warm", "tokens")):
        lines.append(
            f"| {name} | {counts[kind]} | {', '.join(map(str, report['seconds'][name]))} | "
            f"{report['files_per_s'][name]} | {report['chunks_per_s'][name]} | "
            f"{report['embedded_over_254_word_pieces'][kind]} |"
        )
    (RESULTS / "chunking.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
