"""The approximate first stage (``livemem.index.ann`` + ``DenseScan`` over parts with a graph): candidates from the
graph are scored exactly, filters, deletions and weights are honoured, and the final top k matches exact search
(recall of the final top 10, as bench/results/ann.md reports it)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from livemem.index import scan
from livemem.index.ann import GRAPH_FILE, Graph, GraphError, build_graph
from livemem.index.dense import DenseRows
from livemem.index.scan import top_order
from livemem.settings import EngineConfig

DIM = 384


def clustered(rng: np.random.Generator, n: int, centres: int = 40) -> np.ndarray:
    """Unit vectors around a few centres: near neighbours that matter, as real chunk vectors have."""
    base = rng.standard_normal((centres, DIM)).astype(np.float32)
    v = base[rng.integers(0, centres, n)] + 0.6 * rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two segments: a large one with a graph (of which the version deletes a few rows) and a small one scanned."""
    rng = np.random.default_rng(7)
    big, small = clustered(rng, 6000), clustered(rng, 1500)
    path = tmp_path_factory.mktemp("ann") / GRAPH_FILE
    meta = build_graph(big, path, threads=2)
    held = np.setdiff1d(np.arange(6000), rng.choice(6000, 300, replace=False))  # deleted rows: not in the version
    # questions near what the corpus holds (a random direction has no near neighbours: every row ties)
    near = big[rng.integers(0, 6000, 60)] + 0.08 * rng.standard_normal((60, DIM)).astype(np.float32)
    queries = near / np.linalg.norm(near, axis=1, keepdims=True)
    return big, small, held, Graph.open(path, meta), meta, path, queries


@pytest.fixture
def small_limits(monkeypatch) -> EngineConfig:
    """The graph path even for a few thousand rows (by default a part with ≤ 20k allowed rows is scored exactly),
    and the engine config of these rows: graphs on, 40 candidates (the recall these few thousand rows need)."""
    monkeypatch.setattr(scan, "GRAPH_EXACT_ROWS", 50)
    return EngineConfig.defaults(ann="auto", ann_candidates=40)


def rows_of(corpus, with_graph: bool = True, config: EngineConfig | None = None) -> DenseRows:
    big, small, held, graph, *_ = corpus
    return DenseRows(
        [(big, held), (small, np.arange(small.shape[0]))],
        DIM,
        graphs=[graph if with_graph else None, None],
        config=config,
    )


def exact_top(dense: DenseRows, query: np.ndarray, k: int, mask=None, weight=None) -> np.ndarray:
    scores = (dense @ query).astype(np.float64)
    if weight is not None:
        scores = scores * weight
    if mask is not None:
        scores[~mask] = -np.inf
    return top_order(scores, k)


def test_a_graph_finds_the_nearest_rows_and_is_memory_mapped(corpus) -> None:
    big, _, _, graph, meta, path, queries = corpus
    assert meta["rows"] == 6000 and meta["dim"] == DIM and meta["size"] == path.stat().st_size
    found = graph.search(queries[0], 40)
    exact = np.argsort(-(big @ queries[0]), kind="stable")[:10]
    assert found.size == 40 and len(set(exact) & set(found)) >= 9
    assert 5900 <= graph.search(queries[0], 10**6).size <= 6000  # at most every row (a walk may miss a few)


def test_a_graph_that_is_not_what_the_segment_recorded_is_refused(corpus, tmp_path) -> None:
    _, _, _, _, meta, path, _ = corpus
    with pytest.raises(GraphError, match="missing"):
        Graph.open(tmp_path / GRAPH_FILE, meta)
    cut = tmp_path / "cut.usearch"
    cut.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(GraphError, match="bytes"):
        Graph.open(cut, meta)
    with pytest.raises(GraphError, match="rows"):
        Graph.open(path, {**meta, "rows": 5999})
    assert json.dumps(meta)  # what segment.json records is plain JSON


def test_candidates_are_scored_exactly_and_the_top_ten_matches_exact_search(corpus, small_limits) -> None:
    dense, exact_dense = rows_of(corpus, config=small_limits), rows_of(corpus, with_graph=False)
    *_, queries = corpus
    overlap = total = 0
    for q in queries:
        got_rows, got_scores = dense.top(q, 10)
        want = exact_top(exact_dense, q, 10)
        assert np.array_equal(got_scores, exact_dense.scores(q, got_rows))  # every score is the exact one
        overlap += len(set(got_rows) & set(want))
        total += 10
    assert overlap / total >= 0.99
    scan_ = dense.scan(queries[0])
    assert scan_.rest.size == 1500  # only the part without a graph is scanned


def test_filters_deletions_and_weights_are_honoured(corpus, small_limits) -> None:
    dense, exact_dense = rows_of(corpus, config=small_limits), rows_of(corpus, with_graph=False)
    *_, queries = corpus
    rng = np.random.default_rng(3)
    overlap = total = 0
    for i, q in enumerate(queries[:30]):
        keep = rng.random(dense.size) < (0.5 if i % 3 else 0.05)  # a broad filter and a narrow one
        weight = rng.uniform(0.2, 1.0, dense.size) if i % 2 else None
        rows, scores = dense.scan(q, keep).candidates(10, weight)
        assert np.all(keep[rows]) and np.array_equal(rows, np.sort(rows))  # only allowed rows, ascending
        assert np.array_equal(scores, exact_dense.scores(q, rows))
        best = rows[top_order(scores * (1 if weight is None else weight[rows]), 10)]
        want = exact_top(exact_dense, q, 10, keep, weight)
        overlap += len(set(best) & set(want))
        total += 10
    assert overlap / total >= 0.99


def test_exact_mode_ignores_the_graphs(corpus, small_limits) -> None:
    dense = rows_of(corpus, config=small_limits.replace(ann="exact"))
    exact_dense = rows_of(corpus, with_graph=False)
    assert not dense.walks and rows_of(corpus, config=small_limits).walks
    *_, queries = corpus
    for q in queries[:10]:
        assert np.array_equal(dense.top(q, 10)[0], exact_top(exact_dense, q, 10))
    assert dense.scan(queries[0]).rest.size == dense.size


def test_a_part_with_few_allowed_rows_is_scored_exactly(corpus) -> None:
    """Below ``GRAPH_EXACT_ROWS`` allowed rows (the default 20k here: the whole test corpus) a graph part is scored
    over its allowed rows: the top k is then exactly that of exact search."""
    dense, exact_dense = rows_of(corpus), rows_of(corpus, with_graph=False)
    *_, queries = corpus
    for q in queries[:10]:
        assert np.array_equal(dense.top(q, 10)[0], exact_top(exact_dense, q, 10))


def test_a_version_with_several_graph_parts_walks_them_at_once_and_answers_the_same(corpus, small_limits, monkeypatch):
    """A memory that grew holds several large segments, each with its graph: their walks run on the walk threads
    beside the request's own (``scan.walk_pool``) and give exactly the candidates, scores and top 10 of walking
    them one after another; the rows between the graph parts are the ones scanned."""
    from concurrent.futures import ThreadPoolExecutor

    big, small, held, graph, *_ = corpus
    *_, queries = corpus
    three = DenseRows(
        [(big, held), (small, np.arange(small.shape[0])), (big, np.arange(big.shape[0]))],
        DIM,
        graphs=[graph, None, graph],
        config=small_limits,
    )
    submitted = []

    class Counting(ThreadPoolExecutor):
        def submit(self, fn, *args, **kwargs):
            submitted.append(args)
            return super().submit(fn, *args, **kwargs)

    walks = Counting(2)
    monkeypatch.setattr(scan, "walk_pool", lambda: walks)
    keep = np.random.default_rng(5).random(three.size) < 0.7
    together = [three.scan(q, keep).candidates(10) for q in queries[:20]]
    assert len(submitted) >= 20  # one walk a query on the walk threads (the first part on the caller's)
    monkeypatch.setattr(scan, "walk_pool", lambda: None)
    apart = [three.scan(q, keep).candidates(10) for q in queries[:20]]
    for (rows, scores), (rows2, scores2) in zip(together, apart, strict=True):
        assert np.array_equal(rows, rows2) and np.array_equal(scores, scores2)
    start, end = held.size, held.size + small.shape[0]
    assert np.array_equal(three.scan(queries[0], keep).rest, np.flatnonzero(keep[start:end]) + start)
    walks.shutdown()


def test_a_graph_holding_more_than_its_share_of_a_deep_list_is_asked_again(corpus, small_limits, tmp_path) -> None:
    """Each graph part walks for its share of k (by its allowed rows): two 1M-row segments walk for about half of a
    hybrid query's 1,000-deep dense list each. When the question's neighbours all lie in one part, that part's
    lowest candidate still beats the k-th score found, and it is asked again: the deep list is the exact one."""
    big, *_ = corpus
    *_, queries = corpus
    # a segment pointing away from every question: none of its rows is among their neighbours
    away = -queries[:5].sum(axis=0) + 0.02 * np.random.default_rng(11).standard_normal((3000, DIM)).astype(np.float32)
    far = away / np.linalg.norm(away, axis=1, keepdims=True)
    path = tmp_path / GRAPH_FILE
    two = DenseRows(
        [(big, np.arange(big.shape[0])), (far, np.arange(far.shape[0]))],
        DIM,
        graphs=[corpus[3], Graph.open(path, build_graph(far, path, threads=2))],
        config=small_limits.replace(ann_candidates=200),  # the default margin (40 is too tight for a deep list)
    )
    asked: list[int] = []
    search = Graph.search

    def counting(self, query, count, breadth=0):
        asked.append(int(count))
        return search(self, query, count, breadth)

    k, share = 1000, -(-1000 * big.shape[0] // two.size)  # the big part's share: 667 of hybrid's 1,000
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Graph, "search", counting)
        mp.setattr(scan, "WALK_COST", 1)  # walk these 6,000 rows for 867 candidates (a 1M-row segment would)
        found = [two.scan(q).top(k)[0] for q in queries[:5]]
    assert max(asked) > share + 200  # asked again, for more than its first share
    for q, rows in zip(queries[:5], found, strict=True):
        exact = exact_top(two, q, k)
        assert exact.max() < big.shape[0]  # the whole deep list lies in the big part
        assert len(set(rows.tolist()) & set(exact.tolist())) >= 0.98 * k


def test_walks_of_one_graph_run_at_once_on_views_of_their_own(corpus) -> None:
    """usearch keeps a walk's breadth in the index, so one view walks for one query at a time: a walk that finds
    every view busy opens another of the same file (kept for later), and threads walking at once get what one
    thread walking them in turn gets."""
    from concurrent.futures import ThreadPoolExecutor

    _, _, _, _, meta, path, queries = corpus
    graph = Graph.open(path, meta)  # a graph of its own: the module's is shared with other tests
    alone = [graph.search(q, 40, 200) for q in queries[:40]]
    busy = graph._free.pop()  # as if a walk for another query held the only view
    assert np.array_equal(graph.search(queries[0], 40, 200), alone[0]) and graph.views == 2
    graph._free.append(busy)
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda q: graph.search(q, 40, 200), queries[:40]))
    assert all(np.array_equal(a, b) for a, b in zip(alone, together, strict=True))
    assert graph.views == len(graph._free) <= 1 + 4  # every view back, at most one per thread walking at once
