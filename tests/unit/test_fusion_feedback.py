"""Pseudo-relevance feedback in hybrid fusion (livemem.query.fusion: ``feedback_query``, ``fuse(..., feedback=)``):
Rocchio on hand-made vectors, the rescoring of the first ``feedback_depth`` fused chunks against a plain
definition, and, through the real app, that hybrid answers carry the feedback term."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient
from support.serving import API_KEYS, build_and_publish, make_workspace

from livemem.index.dense import DenseRows
from livemem.query.fusion import METHODS, FusionSettings, feedback_query, fuse
from livemem.version.store import IndexHome
from serving.app import create_app
from serving.settings import Settings


def unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return (v / np.linalg.norm(v)).astype(np.float32)


def test_feedback_query_moves_the_query_towards_the_mean_of_its_hits() -> None:
    query = unit([1, 0, 0])
    hits = np.stack([unit([0, 1, 0]), unit([0, 0, 1])])
    moved = feedback_query(query, hits, beta=1.0)
    np.testing.assert_allclose(moved, unit([1, 0.5, 0.5]), atol=1e-7)
    assert moved.dtype == np.float32 and np.linalg.norm(moved) == pytest.approx(1.0)
    np.testing.assert_allclose(feedback_query(query, hits, beta=2.0), unit([1, 1, 1]), atol=1e-7)
    assert feedback_query(query, hits[:0], beta=1.0) is query  # nothing found: the query as it was


def test_feedback_is_off_by_default_and_weighted_for_linear_only_and_counted_in_the_best_score() -> None:
    assert not FusionSettings().feedback and FusionSettings().best_score == pytest.approx(1.5)
    linear = FusionSettings(feedback_chunks=1)
    assert linear.feedback and linear.feedback_weight == 0.3
    assert linear.best_score == pytest.approx(1.0 + 0.5 + 0.3)  # a cosine of 1 to both queries, the best BM25 hit
    for method in ("rrf", "minmax", "zscore"):
        assert not FusionSettings(method, feedback_chunks=1).feedback
    assert not FusionSettings(feedback_chunks=0).feedback
    assert FusionSettings(feedback_weight=0).best_score == pytest.approx(1.5)
    with pytest.raises(ValueError):
        FusionSettings(feedback_weight=-0.1)
    with pytest.raises(ValueError):
        FusionSettings(feedback_chunks=5, feedback_depth=2)


def reference(candidates, dense, sparse, cosines, fusion) -> dict[int, float]:
    """Row -> score: the fusion without feedback, then its first ``feedback_depth`` (ties: the lower row) gain
    ``feedback_weight`` × their cosine to the moved query, clipped at 0, one row at a time."""
    plain = FusionSettings(**{**vars(fusion), "feedback_weight": 0.0})
    rows, scores = fuse(candidates, dense, sparse, plain)
    out = dict(zip(rows.tolist(), scores.tolist(), strict=True))
    position = {int(r): i for i, r in enumerate(candidates)}
    for row in sorted(out, key=lambda r: (-out[r], r))[: fusion.feedback_depth]:
        out[row] += fusion.feedback_weight * max(float(cosines[position[row]]), 0.0)
    return out


@pytest.mark.parametrize("method", METHODS)
def test_feedback_rescores_the_first_fused_chunks_only(method: str) -> None:
    rng = np.random.default_rng(7)
    for depth in (3, 25, 1000):
        n = 150
        candidates = np.sort(rng.choice(10 * n, size=n, replace=False))
        dense = rng.normal(0.3, 0.15, n).astype(np.float32)
        sparse = np.where(rng.random(n) < 0.4, rng.gamma(2.0, 3.0, n), 0.0).astype(np.float32)
        cosines = rng.normal(0.2, 0.3, n).astype(np.float32)  # some below 0: no evidence, no gain
        fusion = FusionSettings(method, depth=60, feedback_chunks=1, feedback_weight=0.4, feedback_depth=depth)
        rows, scores = fuse(candidates, dense, sparse, fusion, feedback=cosines)
        expected = reference(candidates, dense, sparse, cosines, fusion)
        assert dict(zip(rows.tolist(), scores.tolist(), strict=True)) == pytest.approx(expected)
        # nothing below the rescored chunks moves: they keep their order, below every rescored one
        plain_rows, plain_scores = fuse(candidates, dense, sparse, fusion)
        order = sorted(range(plain_rows.size), key=lambda i: (-plain_scores[i], plain_rows[i]))
        below = order[depth:]
        np.testing.assert_array_equal(scores[below], plain_scores[below])
        if below:
            assert scores[order[:depth]].min() >= scores[below].max()


def test_feedback_lifts_the_chunk_that_resembles_the_best_answer() -> None:
    """Three chunks: A is the clear first hit; B and C are equally far from the question, but B says what A says."""
    query = unit([1.0, 0.0, 0.0])
    a = unit([0.8, 0.6, 0.0])
    b = unit([0.5, 0.8, 0.33])  # close to A
    c = unit([0.52, -0.3, 0.8])  # a little closer to the question, unlike A
    vectors = np.stack([a, b, c])
    dense = vectors @ query
    sparse = np.array([4.0, 1.0, 1.0], dtype=np.float32)
    candidates = np.arange(3)
    plain = FusionSettings(feedback_weight=0.0)
    rows, scores = fuse(candidates, dense, sparse, plain)
    assert rows[np.argsort(-scores, kind="stable")].tolist() == [0, 2, 1]
    fusion = FusionSettings(feedback_chunks=1)
    moved = feedback_query(query, vectors[:1], fusion.feedback_beta)  # the first hit: A
    rows, scores = fuse(candidates, dense, sparse, fusion, feedback=vectors @ moved)
    assert rows[np.argsort(-scores, kind="stable")].tolist() == [0, 1, 2]


def test_dense_vectors_reads_each_row_from_its_segment() -> None:
    rng = np.random.default_rng(1)
    first, second = rng.normal(size=(6, 4)).astype(np.float32), rng.normal(size=(5, 4)).astype(np.float32)
    dense = DenseRows([(first, np.array([0, 2, 3, 5])), (second, np.array([1, 4]))], 4)  # rows the version holds
    rows = np.array([5, 0, 3, 4, 1])
    np.testing.assert_array_equal(dense.vectors(rows), dense.materialize()[rows])


@pytest.fixture(scope="module")
def client(tmp_path_factory, embedder):
    root = tmp_path_factory.mktemp("feedback-serving")
    home = IndexHome(root / "rag_index")
    build_and_publish(make_workspace(root), home, embedder)
    settings = Settings(
        index_dir=home.root, api_keys=API_KEYS, warm_up=False, cache_size=0, fusion_feedback=True,
        fusion_sentences=False,  # the feedback term alone (the sentence blend: tests/unit/test_sentences.py)
    )  # fmt: skip
    with TestClient(create_app(settings, embedder)) as client:
        yield client


def test_hybrid_answers_through_the_api_carry_the_feedback_term(client: TestClient) -> None:
    """The first hybrid hit moved the query: for it, cos(moved, hit) = (d + 1) / |q + hit| = sqrt((1 + d) / 2),
    so its score is its cosine d + 0.5 × its BM25 over the best + 0.3 × sqrt((1 + d) / 2)."""
    question = "heating bill help in Raleigh County"
    body = {"query": question, "top_k": 3, "collections": ["wv_benefits"]}
    # hybrid's BM25 side is the chunk text (sparse mode adds the heading-path field): its best over the collection
    snap = client.app.state.serving.reader.snapshot()
    rows = np.flatnonzero(snap.columns["collection"] == "wv_benefits")
    best_bm25 = float(snap.sparse_for(frozenset({snap.access_of["wv_benefits"]})).scores(question)[rows].max())
    answer = client.post("/query", json={**body, "mode": "hybrid"})
    assert answer.status_code == 200, answer.text
    first = answer.json()["results"][0]
    assert first["provenance"]["path"] == "benefits/raleigh-county.md"
    d, s = first["scores"]["dense"], first["scores"]["sparse"]
    without = max(d, 0.0) + 0.5 * s / best_bm25
    assert first["score"] == pytest.approx(without + 0.3 * np.sqrt((1 + d) / 2), abs=1e-5)
    assert first["score_normalized"] == pytest.approx(first["score"] / 1.8, abs=1e-5)
