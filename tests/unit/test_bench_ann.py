"""The ANN benchmark (``bench.ann``) runs end to end on a small segment, so it never rots before its big runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench import ann


def fake_index(root: Path, chunks: int = 400, sentences: int = 800) -> Path:
    """An index home whose one segment holds clustered unit vectors (chunk vectors and int8 sentence vectors)."""
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((20, 384)).astype(np.float32)

    def clustered(n: int) -> np.ndarray:
        v = centres[rng.integers(0, 20, n)] + 0.5 * rng.standard_normal((n, 384)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    seg = root / "parts" / "seg-test"
    seg.mkdir(parents=True)
    np.save(seg / "dense.npy", clustered(chunks))
    sent = clustered(sentences)
    scales = np.abs(sent).max(axis=1) / 127
    np.savez(seg / "sentences.npz", codes=np.round(sent / scales[:, None]).astype(np.int8), scales=scales)
    return root


def test_ann_benchmark_measures_recall_and_latency_per_candidate(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ann, "QUERIES", 50)
    monkeypatch.setattr(ann, "PROJECT_ROOT", tmp_path)
    (tmp_path / "bench/.work").mkdir(parents=True)
    output = tmp_path / "ann.json"
    argv = ["--sizes", "600,1500", "--index", str(fake_index(tmp_path / "index")), "--output", str(output)]
    assert ann.main([*argv, "--candidates", "usearch-i8,faiss-sq8"]) == 0
    results = json.loads(output.read_text())
    small, grown = results["sizes"]
    assert small["copy_cosine"] is None and 0.5 < grown["copy_cosine"] < 1  # 1,500 needs perturbed copies
    for size in results["sizes"]:
        for name in ("usearch HNSW i8", "faiss HNSW sq8"):
            entry = size[name]
            assert entry["build_s"] >= 0 and entry["bytes"] > 0
            # rescoring more candidates never loses recall; on a small clustered set the graph finds nearly all
            assert entry["k10"]["recall_at_10"] <= entry["k100"]["recall_at_10"] + 1e-9
            assert entry["k100"]["recall_at_10"] >= 0.9 and 0 < entry["k40"]["p50_ms"] <= entry["k40"]["p99_ms"]
    assert "| 1,500 |" in output.with_suffix(".md").read_text()
