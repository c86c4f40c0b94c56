"""Input for the benchmarks' smoke tests: a small SciFact-shaped corpus and query file (the benchmarks' input
format), some abstracts long enough to make two chunks."""

from __future__ import annotations

import json
from pathlib import Path

WORDS = ["cell", "protein", "immune", "tumour", "signal", "receptor", "gene", "cohort", "trial", "dose", "risk"]


def write_corpus(tmp_path: Path, docs: int = 40) -> tuple[Path, Path]:
    """``corpus.jsonl`` and ``queries.jsonl`` under ``tmp_path``: every fourth abstract 400 words, the rest 40."""
    corpus, queries = tmp_path / "corpus.jsonl", tmp_path / "queries.jsonl"
    with open(corpus, "w", encoding="utf-8") as fh:
        for i in range(docs):
            words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(40 if i % 4 else 400)]
            fh.write(json.dumps({"_id": str(100 + i), "title": f"Study {i}", "text": " ".join(words) + "."}) + "\n")
    queries.write_text(
        "".join(json.dumps({"_id": str(i), "text": f"{w} {WORDS[i]}"}) + "\n" for i, w in enumerate(WORDS))
    )
    return corpus, queries
