"""The scale benchmark (``bench.scale``) runs end to end on ~50 chunks, so it never rots before its big runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from support.bench_input import write_corpus

from bench import scale


def test_stand_in_embedder_gives_deterministic_unit_vectors_distinct_per_text() -> None:
    embedder = scale.StandInEmbedder()
    vectors = embedder.encode(["a", "b", "a"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert np.array_equal(vectors[0], vectors[2]) and not np.allclose(vectors[0], vectors[1])
    assert np.array_equal(embedder.encode_one("b"), vectors[1])


def test_benchmark_measures_every_phase_and_writes_its_report(tmp_path: Path) -> None:
    corpus, queries = write_corpus(tmp_path)
    output = tmp_path / "results" / "scale.json"
    work = tmp_path / "work"
    argv = ["--sizes", "50", "--work", str(work), "--output", str(output), "--corpus", str(corpus)]
    status = scale.main([*argv, "--queries-file", str(queries), "--queries", "20", "--label", "smoke"])
    assert status == 0
    results = json.loads(output.read_text())
    assert results["embedder"]["stand_in"] and results["machine"]["nproc"] >= 1
    (size,) = results["sizes"]
    assert "error" not in size, size.get("error")
    assert size["chunks"] == size["expected_chunks"] >= 50 and size["files"] < size["chunks"]

    full, change, attention = size["full_build"], size["one_file_change"], size["attention_publish"]
    assert full["embeddings_computed"] > 0 and full["version_bytes"] > 0  # chunks and their sentences
    assert {"embed_s", "segment_s", "tables_s", "total_s"} <= set(full["timings"])
    # the edit re-embeds only the edited file's text (its last chunk, and that chunk's sentences not embedded
    # before: the appended one, or all when it had one sentence before and so no sentence vectors); the new version
    # adds bytes, at most a full copy
    assert 1 <= change["embeddings_computed"] <= 4
    assert 0 < change["bytes_added"] <= 1.5 * full["version_bytes"]
    assert change["versions_total_bytes"] + change["parts_bytes"] >= full["version_bytes"] + change["bytes_added"] - 1
    parts = change["bytes_added_by_part"]
    assert sum(v for k, v in parts.items() if k != "total") == parts["total"] == change["bytes_added"]
    assert attention["trace_events"] >= 200 and attention["chunks_used"] > 0 and attention["bytes_added"] > 0

    worker = size["serving"]["worker"]
    assert [load["chunks"] for load in worker["loads"]] == [size["chunks"]] * 3
    assert worker["queries"]["n"] == 20 and 0 < worker["queries"]["p50_ms"] <= worker["queries"]["p99_ms"]
    assert {"filter", "dense", "sparse", "rank"} <= set(worker["query_stage_p50_ms"])
    two = size["serving"]["two_workers"]
    assert worker["vm_rss_kib"] > 0 and two["one_worker_alone_pss_kib"] > 0 and all(p > 0 for p in two["pss_kib"])

    report = output.with_suffix(".md").read_text()
    assert "Hybrid query, median ms per stage" in report
    assert "STAND-IN" in report and f"| {size['chunks']:,} | {size['files']:,} |" in report

    # the generated repository is reused, its branch reset to the base commit (the edit undone)
    repo, created = scale.ensure_repo(work, scale.read_jsonl(corpus), size["files"])
    assert not created and scale.git(repo, "rev-parse", "main").strip() == size["repo"]["head"]


def test_mixed_corpus_one_pdf_change_costs_what_it_changes(tmp_path: Path) -> None:
    """``--documents``: generated PDFs are indexed beside the markdown (page provenance), and editing one PDF's
    last page re-embeds that page's text only, not the document or the corpus."""
    corpus, queries = write_corpus(tmp_path)
    output = tmp_path / "scale.json"
    argv = ["--sizes", "50", "--work", str(tmp_path / "work"), "--output", str(output), "--corpus", str(corpus)]
    assert scale.main([*argv, "--queries-file", str(queries), "--queries", "5", "--documents", "4"]) == 0
    (size,) = json.loads(output.read_text())["sizes"]
    assert "error" not in size, size.get("error")
    assert size["documents"] == 4 and size["chunks"] >= size["expected_chunks"] + 4  # every PDF gave chunks
    pdf = size["one_pdf_change"]
    assert pdf["path"].startswith("docs/pdf/") and pdf["path"].endswith(".pdf")
    assert 1 <= pdf["embeddings_computed"] <= 4 and pdf["embeddings_reused"] > 0
    assert pdf["total_chunks"] == size["full_build"]["total_chunks"]
    assert "| 4 |" in output.with_suffix(".md").read_text()
