"""Hybrid fusion (livemem.query.fusion): each method equals a plain reference, RRF equals the fusion serving used before,
and fusing only the union of the two lists equals fusing every candidate."""

from __future__ import annotations

import numpy as np
import pytest

from livemem.query.fusion import METHODS, FusionSettings, fuse


def old_rrf(candidates, dense, sparse, fusion):
    """The weighted RRF serving used before livemem.query.fusion (retrieval.fuse at 7a9c722), verbatim but for top_order."""

    def top_order(scores, k):
        return np.argsort(-scores, kind="stable")[:k]

    depth = min(fusion.depth, candidates.size)
    fused = np.zeros(candidates.size, dtype=np.float64)
    dense_top = top_order(dense, depth)
    fused[dense_top] += fusion.dense_weight / (fusion.k + np.arange(1, dense_top.size + 1))
    matched = np.flatnonzero(sparse > 0)
    sparse_top = matched[top_order(sparse[matched], depth)]
    fused[sparse_top] += fusion.sparse_weight / (fusion.k + np.arange(1, sparse_top.size + 1))
    keep = fused > 0
    return candidates[keep], fused[keep]


def reference(candidates, dense, sparse, fusion) -> dict[int, float]:
    """Row -> fused score, written out one row at a time from the method's definition."""
    depth = fusion.depth
    sparse_depth = fusion.sparse_depth or depth
    dense_list = sorted(range(len(dense)), key=lambda i: (-dense[i], i))[:depth]
    sparse_list = sorted((i for i in range(len(sparse)) if sparse[i] > 0), key=lambda i: (-sparse[i], i))
    sparse_list = sparse_list[:sparse_depth]
    out: dict[int, float] = {}
    for listed, scores, weight in (
        (dense_list, dense, fusion.dense_weight),
        (sparse_list, sparse, fusion.sparse_weight),
    ):
        values = [float(scores[i]) for i in listed]
        for rank, i in enumerate(listed, start=1):
            if fusion.method == "rrf":
                part = 1.0 / (fusion.k + rank)
            elif fusion.method == "linear":
                part = max(values[rank - 1], 0.0) if scores is dense else values[rank - 1] / max(values)
            elif fusion.method == "minmax":
                part = (values[rank - 1] - min(values)) / (max(values) - min(values))
            else:
                part = (values[rank - 1] - min(values)) / float(np.std(values))
            row = int(candidates[i])
            out[row] = out.get(row, 0.0) + weight * part
    return out


def random_case(rng: np.random.Generator, n: int):
    candidates = np.sort(rng.choice(10 * n, size=n, replace=False))
    dense = rng.normal(0.3, 0.15, n).astype(np.float32)
    sparse = np.where(rng.random(n) < 0.4, rng.gamma(2.0, 3.0, n), 0.0).astype(np.float32)
    return candidates, dense, sparse


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("depth", [5, 40, 1000])
def test_each_method_equals_its_plain_definition(method: str, depth: int) -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        candidates, dense, sparse = random_case(rng, 120)
        fusion = FusionSettings(method, k=30, dense_weight=0.8, sparse_weight=0.6, depth=depth)
        rows, scores = fuse(candidates, dense, sparse, fusion)
        assert dict(zip(rows.tolist(), scores.tolist(), strict=True)) == pytest.approx(
            reference(candidates, dense, sparse, fusion)
        )


def test_rrf_equals_the_fusion_serving_used_before() -> None:
    rng = np.random.default_rng(11)
    for depth in (10, 1000):
        for weights in ((1.0, 1.0), (0.75, 1.0), (1.0, 0.0)):
            candidates, dense, sparse = random_case(rng, 300)
            fusion = FusionSettings("rrf", k=60, dense_weight=weights[0], sparse_weight=weights[1], depth=depth)
            rows, scores = fuse(candidates, dense, sparse, fusion)
            old_rows, old_scores = old_rrf(candidates, dense, sparse, fusion)
            np.testing.assert_array_equal(rows, old_rows)
            np.testing.assert_allclose(scores, old_scores)


@pytest.mark.parametrize("method", METHODS)
def test_fusing_the_union_of_both_lists_equals_fusing_every_candidate(method: str) -> None:
    """What search does: only the dense top-depth and the BM25-matched rows reach ``fuse``."""
    rng = np.random.default_rng(5)
    candidates, dense, sparse = random_case(rng, 2000)
    fusion = FusionSettings(method, depth=50)
    top = np.argsort(-dense, kind="stable")[:50]
    union = np.union1d(top, np.flatnonzero(sparse > 0))
    outside = np.setdiff1d(union, top)
    dense_union = dense[union].copy()
    dense_union[np.searchsorted(union, outside)] = -np.inf  # as search passes them: below every listed score
    rows, scores = fuse(candidates[union], dense_union, sparse[union], fusion)
    all_rows, all_scores = fuse(candidates, dense, sparse, fusion)
    np.testing.assert_array_equal(rows, all_rows)
    np.testing.assert_allclose(scores, all_scores)


def test_first_on_both_sides_gets_the_best_score_and_ranks_first() -> None:
    candidates = np.arange(6)
    dense = np.array([0.9, 0.1, 0.5, 0.2, 0.3, 0.4], dtype=np.float32)
    sparse = np.array([7.0, 0.0, 3.0, 1.0, 0.0, 0.0], dtype=np.float32)
    for method in ("rrf", "minmax"):
        fusion = FusionSettings(method, dense_weight=1.0, sparse_weight=0.5)
        rows, scores = fuse(candidates, dense, sparse, fusion)
        assert rows[np.argmax(scores)] == 0
        assert scores.max() == pytest.approx(fusion.best_score)
    linear = FusionSettings("linear")
    rows, scores = fuse(candidates, dense, sparse, linear)
    assert rows[np.argmax(scores)] == 0
    assert scores.max() == pytest.approx(0.9 + 0.5)  # a cosine of 0.9 and the best BM25 hit
    assert scores.max() <= linear.best_score
    assert FusionSettings("zscore").best_score is None


def test_min_max_keeps_how_far_ahead_the_first_hit_is() -> None:
    """Where RRF sees only ranks, min-max sees that BM25's first hit is far ahead and the dense scores are close."""
    candidates = np.arange(4)
    dense = np.array([0.50, 0.51, 0.49, 0.10], dtype=np.float32)  # rows 0-2 nearly tied
    sparse = np.array([20.0, 2.0, 1.0, 0.5], dtype=np.float32)  # row 0 far ahead
    _, rrf_scores = fuse(candidates, dense, sparse, FusionSettings("rrf", k=1))
    mm_rows, mm_scores = fuse(candidates, dense, sparse, FusionSettings("minmax", sparse_weight=0.5))
    assert mm_rows[np.argmax(mm_scores)] == 0
    assert rrf_scores[0] == pytest.approx(rrf_scores[1])  # ranks 2+1 and 1+2: RRF cannot tell them apart


def test_unknown_method_is_refused() -> None:
    with pytest.raises(ValueError, match="fusion method must be one of linear, minmax, zscore, rrf, not 'sum'"):
        FusionSettings("sum")  # type: ignore[arg-type]


def test_each_method_has_its_default_bm25_weight() -> None:
    assert FusionSettings().method == "linear"
    assert FusionSettings().sparse_weight == 0.5
    assert FusionSettings("rrf").sparse_weight == FusionSettings("minmax").sparse_weight == 1.0
    assert FusionSettings("linear", sparse_weight=0.8).sparse_weight == 0.8


def test_linear_keeps_each_sides_zero_so_multipliers_still_lift() -> None:
    """The last chunk of a list keeps a score proportional to its evidence (min-max gives it 0), so a ×1.5 from
    living memory lifts it; a query the model matches weakly leans on BM25, one it matches well on the cosine."""
    candidates = np.arange(4)
    sparse = np.array([9.0, 6.0, 5.0, 0.0], dtype=np.float32)
    weak = np.array([0.10, 0.12, 0.11, 0.09], dtype=np.float32)  # the model sees nothing: BM25 decides
    rows, scores = fuse(candidates, weak, sparse, FusionSettings("linear"))
    assert rows[np.argsort(-scores)].tolist() == [0, 1, 2, 3]
    bm25_only = FusionSettings("minmax", dense_weight=0.0)
    assert fuse(candidates, weak, sparse, bm25_only)[1].tolist() == [1.0, 0.25, 0.0]  # min-max: the last hit is 0
    assert scores.min() == pytest.approx(0.09)  # linear: the cosine of a chunk with no BM25 match
    assert scores[2] * 1.5 > scores[1]  # a confirmed third chunk rises past the second
    sure = np.array([0.85, 0.30, 0.32, 0.31], dtype=np.float32)  # the model is sure of row 0 and BM25 is not
    rows, scores = fuse(candidates, sure, np.array([1.0, 3.0, 2.0, 0.0], dtype=np.float32), FusionSettings("linear"))
    assert rows[np.argmax(scores)] == 0


def test_a_negative_cosine_adds_nothing() -> None:
    candidates = np.arange(3)
    dense = np.array([0.4, -0.2, -0.5], dtype=np.float32)
    _, scores = fuse(candidates, dense, np.zeros(3, dtype=np.float32), FusionSettings("linear"))
    assert scores.tolist() == pytest.approx([0.4, 0.0, 0.0])


def test_serving_defaults_to_linear_and_rag_fusion_picks_another_with_its_weight(
    monkeypatch, tmp_path, embedder
) -> None:
    from serving.settings import Settings
    from serving.state import ServingState

    monkeypatch.delenv("RAG_FUSION", raising=False)
    state = ServingState.from_settings(Settings.from_env(index_dir=tmp_path), embedder=embedder)
    assert (state.retriever.fusion.method, state.retriever.fusion.sparse_weight) == ("linear", 0.5)
    monkeypatch.setenv("RAG_FUSION", "rrf")
    state = ServingState.from_settings(Settings.from_env(index_dir=tmp_path), embedder=embedder)
    assert (state.retriever.fusion.method, state.retriever.fusion.sparse_weight, state.retriever.fusion.k) == (
        "rrf",
        1.0,
        10.0,
    )
