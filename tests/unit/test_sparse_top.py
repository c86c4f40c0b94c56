"""BM25's list for hybrid (``SparseScorer.ranked``: the best k rows found in one compiled pass on the thread that
scored them) is exactly ``top_order`` over the scores kept where allowed: the same rows in the same order, whatever
the parts, dropped rows, corpus, filter and ties; parts that hold every row of their segment score through their
offset (no positions gathered) to the same floats."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from livemem.index import sparse
from livemem.index.postings import Postings
from livemem.index.scan import top_order
from livemem.index.sparse import SparseScorer

POOL = ThreadPoolExecutor(2, thread_name_prefix="test-bm25-pieces")
WORDS = ["river", "county", "food", "pantry", "office", "snap", "clinic", "school", "bridge", "water", "mount", "hope"]


def _texts(rng: np.random.Generator, n: int, duplicates: bool) -> list[str]:
    texts = []
    for _ in range(n):
        if duplicates and texts and rng.random() < 0.3:  # repeated texts tie exactly
            texts.append(texts[int(rng.integers(len(texts)))])
            continue
        size = int(rng.integers(0, 25))
        # a skewed vocabulary: some words in most texts (long lists, low weight), some rare
        words = rng.choice(WORDS, size=size, p=np.linspace(3, 0.2, len(WORDS)) / np.linspace(3, 0.2, len(WORDS)).sum())
        texts.append(" ".join(words))
    return texts


def _scorer(rng: np.random.Generator, sizes: list[int], drop: float, duplicates: bool) -> SparseScorer:
    parts = []
    offset = 0
    for size in sizes:
        postings = Postings.build(_texts(rng, size, duplicates))
        held = rng.random(size) >= drop
        positions = np.full(size, -1, dtype=np.int64)
        positions[held] = np.arange(offset, offset + int(held.sum()))
        offset += int(held.sum())
        parts.append((postings, positions))
    return SparseScorer(parts, offset)


def _reference(scorer: SparseScorer, query: str, corpus: np.ndarray) -> np.ndarray:
    """BM25 of every row term after term with numpy (the terms' weights and length terms from ``terms``): the same
    float32 operations in the same order as the compiled pieces."""
    out = np.zeros(scorer.size + 1, dtype=np.float32)
    q = scorer.terms(query, corpus)
    for t, weight in enumerate([] if q is None else q.weights):
        for part, (postings, positions, _) in enumerate(scorer.parts):
            i = q.found[t, part]
            if i < 0:
                continue
            a, b = postings.starts[i], postings.starts[i + 1]
            rows, tf = positions[postings.rows[a:b]], postings.tf[a:b]
            if q.keep is not None:
                rows, tf = rows[q.keep[rows]], tf[q.keep[rows]]
            out[rows] += weight * (tf / (tf + q.constant + q.scaled[rows]))
    return out[: scorer.size]


def _poisoned(size: int) -> np.ndarray:
    return np.full(size, np.nan, dtype=np.float32)  # a row a piece forgot to zero shows


def _exhaustive(scorer: SparseScorer, query: str, corpus: np.ndarray, allowed: np.ndarray, k: int):
    with patch.object(sparse, "_unset", _poisoned):
        scores = scorer.scores(query, corpus)
    assert scores.tobytes() == _reference(scorer, query, corpus).tobytes()
    masked = np.where(allowed, scores, 0)
    best = top_order(masked, min(k, masked.size))
    best = best[masked[best] > 0]
    return best, scores[best], scores


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    sizes=st.lists(st.integers(1, 400), min_size=1, max_size=4),
    drop=st.sampled_from([0.0, 0.0, 0.05, 0.5]),
    corpus_share=st.sampled_from([1.0, 1.0, 0.7]),
    allowed_share=st.sampled_from([1.0, 0.9, 0.2]),
    k=st.sampled_from([1, 3, 10, 50, 1000]),
    duplicates=st.booleans(),
    query=st.lists(st.sampled_from([*WORDS, "absent"]), min_size=1, max_size=6).map(" ".join),
    piece_rows=st.sampled_from([1, 7, 64, 1000]),
)
def test_the_list_is_the_exhaustive_ranking(
    seed, sizes, drop, corpus_share, allowed_share, k, duplicates, query, piece_rows
):
    rng = np.random.default_rng(seed)
    scorer = _scorer(rng, sizes, drop, duplicates)
    if not scorer.size:
        return
    corpus = rng.random(scorer.size) < corpus_share
    allowed = corpus & (rng.random(scorer.size) < allowed_share)
    want_rows, _, every = _exhaustive(scorer, query, corpus, allowed, k)
    rows, scores = scorer.ranked(query, corpus, allowed, k)
    assert rows.tolist() == want_rows.tolist()
    assert scores.tobytes() == every.tobytes()
    if allowed.all():  # None: every row allowed
        assert scorer.ranked(query, corpus, None, k)[0].tolist() == want_rows.tolist()
    # cut in pieces scored by two pool threads and this one at once: the same list, the same floats
    split = scorer.split(query, corpus, piece_rows=piece_rows)
    cut = sum(-(-scorer.parts[part][0].size // piece_rows) for part in split._terms)
    assert len(split.pieces) == cut  # every part holding a query term, in pieces of at most piece_rows rows
    with patch.object(sparse, "_unset", _poisoned):
        rows, scores = split.submit(POOL).ranked(allowed, k)
    assert rows.tolist() == want_rows.tolist()
    assert scores.tobytes() == every.tobytes()


def test_parts_scored_through_their_offset_give_the_same_floats():
    rng = np.random.default_rng(3)
    texts = [_texts(rng, 300, True), _texts(rng, 200, False)]
    whole = SparseScorer(
        [(Postings.build(texts[0]), np.arange(300)), (Postings.build(texts[1]), np.arange(300, 500))], 500
    )
    assert [base for base, _ in whole._layout] == [0, 300]
    # the same parts through their positions (a part with a row dropped and given back is not contiguous)
    positions = np.arange(500)[::-1].copy()
    gathered = SparseScorer([(Postings.build(texts[0] + texts[1]), positions)], 500)
    assert [base for base, _ in gathered._layout] == [-1]
    corpus = np.ones(500, dtype=bool)
    for query in ["food pantry", "county river water school", "hope hope mount"]:
        got = whole.scores(query, corpus)
        want = gathered.scores(query, corpus)[::-1]
        # the same rows, the same statistics: the same floats (the part split does not change BM25 of a row)
        assert got.tobytes() == want.tobytes()


def test_document_frequencies_remembered_per_corpus_give_the_same_scores():
    rng = np.random.default_rng(7)
    scorer = _scorer(rng, [300, 40], 0.1, True)
    corpus = np.ones(scorer.size, dtype=bool)
    dfs: dict[str, int] = {}
    first = scorer.scores("food pantry mount hope", corpus, dfs)
    assert set(dfs) == {"food", "pantri", "mount", "hope"}
    assert scorer.scores("food pantry mount hope", corpus, dfs).tobytes() == first.tobytes()
    assert scorer.scores("food pantry mount hope", corpus).tobytes() == first.tobytes()


@pytest.mark.parametrize("k", [1, 10, 100])
def test_ties_go_to_the_lower_row_past_the_buffer(k):
    # 5,000 rows scoring the same: the list is the first k rows, however often the buffer fills and is cut
    scorer = SparseScorer([(Postings.build(["county water"] * 5000), np.arange(5000))], 5000)
    everything = np.ones(5000, dtype=bool)
    assert scorer.ranked("water", everything, None, k)[0].tolist() == list(range(k))
    allowed = np.arange(5000) % 7 == 3
    assert scorer.ranked("water", everything, allowed, k)[0].tolist() == list(range(3, 7 * k, 7))


def test_every_filter_narrows_the_rows():
    """A query without a filter shares its collections' mask and rows; each filter field, set, is applied."""
    import dataclasses
    from datetime import datetime

    from livemem.query.types import Filters

    assert not Filters().narrows()
    samples = {str: "x", float: 0.0, datetime: datetime(2020, 1, 1, tzinfo=UTC)}
    for f in dataclasses.fields(Filters):
        value = ("x",) if f.default == () else next(v for t, v in samples.items() if t.__name__ in str(f.type))
        assert Filters(**{f.name: value}).narrows(), f.name


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 200_000),
    nonzero=st.sampled_from([0.0, 0.001, 0.3, 1.0]),
    levels=st.sampled_from([3, 50, 0]),
    allowed_share=st.sampled_from([None, 1.0, 0.5, 0.01]),
    k=st.sampled_from([1, 10, 1000]),
)
def test_best_rows_is_top_order_over_large_score_arrays(seed, n, nonzero, levels, allowed_share, k):
    """``best_rows`` (block maxima, then only the blocks that can enter) over arrays long enough for the floor:
    the same rows in the same order as ``top_order`` of the positive allowed scores, with many exact ties."""
    from livemem.index.sparse import best_rows

    rng = np.random.default_rng(seed)
    scores = np.zeros(n, dtype=np.float32)
    hit = rng.random(n) < nonzero
    # few distinct values (levels > 0): ties everywhere; 0: continuous
    values = rng.integers(1, levels + 1, n) / 7 if levels else rng.gamma(2.0, 1.0, n)
    scores[hit] = values[hit].astype(np.float32)
    allowed = None if allowed_share is None else rng.random(n) < allowed_share
    kept = scores if allowed is None else np.where(allowed, scores, 0)
    want = top_order(kept, min(k, n))
    want = want[kept[want] > 0]
    assert best_rows(scores, allowed, k).tolist() == want.tolist()
