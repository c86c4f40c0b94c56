"""The exact two-stage dense top-k (livemem.index.dense) and the candidate-only search path (Retriever.search).

The two-stage scan must give exactly what scoring every row exactly and ranking gives (rows, order, scores), on
random and adversarial vectors; ``Retriever.search`` must return exactly what the full-scan path returns (kept here
as ``reference_search``) for every mode, return kind, filter, recency and attention setting.
"""

from __future__ import annotations

import itertools
import os
from datetime import UTC, datetime

import numpy as np
import pytest
from fastapi.testclient import TestClient
from support.serving import API_KEYS, build_and_publish, commit_files, make_workspace

from livemem.engine.snapshot import load_snapshot
from livemem.index import dense as dense_module
from livemem.index import kernels
from livemem.index import scan as scan_module
from livemem.index.dense import DenseRows, exact_scores, top_order
from livemem.query import retrieval, signals, types
from livemem.query.fusion import (
    FusionSettings,
    dense_with_sentences,
    feedback_order,
    feedback_query,
    fuse,
    sentence_order,
    with_feedback,
    with_sentences,
)
from livemem.query.retrieval import Retriever
from livemem.query.signals import question_memory
from livemem.query.types import Filters, Query
from livemem.settings import CacheSettings, DenseSettings, EngineConfig
from livemem.sources.breath import Breath
from livemem.usage.attention import AttentionConfig, rollup_day
from livemem.version.store import IndexHome
from serving.app import create_app
from serving.settings import Settings

DIM = 384


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def segmented(rng: np.random.Generator, vectors: np.ndarray, sizes: list[int], deleted: float = 0.0) -> DenseRows:
    """``vectors`` cut into segments of ``sizes`` rows, each holding all but a share ``deleted`` of its rows."""
    parts, start = [], 0
    for size in sizes:
        segment = np.ascontiguousarray(vectors[start : start + size])
        held = np.flatnonzero(rng.random(size) >= deleted)
        parts.append((segment, held))
        start += size
    return DenseRows(parts, vectors.shape[1])


def expected_top(rows: DenseRows, query: np.ndarray, k: int, mask: np.ndarray | None) -> tuple:
    """Every row scored exactly, then ranked: what the two-stage scan must return."""
    scores = rows @ query
    allowed = np.arange(rows.size) if mask is None else np.flatnonzero(mask)
    order = allowed[top_order(scores[allowed], k)]
    return order, scores[order]


def near(rng: np.random.Generator, vector: np.ndarray, n: int, spread: float) -> np.ndarray:
    out = vector + spread * rng.standard_normal((n, vector.size)).astype(np.float32)
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def datasets(rng: np.random.Generator) -> dict[str, tuple[DenseRows, np.ndarray]]:
    """Vectors and a query for each case: random, near-ties float16 cannot tell apart, exact duplicates, vectors
    of very different lengths (not normalised), tiny components (float16 subnormals), rows with one large coordinate
    (int8 errors that differ by row: per-row bounds)."""
    out = {}
    vectors = unit(rng, 6000)
    query = near(rng, vectors[7], 1, 0.05)[0]
    out["random"] = (segmented(rng, vectors, [5000, 700, 250, 40, 10], deleted=0.02), query)
    centre = unit(rng, 1)[0]
    ties = np.concatenate([near(rng, centre, 3000, 2e-4), unit(rng, 1000)])  # 3,000 rows within float16's error
    out["near-ties"] = (segmented(rng, ties, [2500, 1500]), centre)
    duplicates = np.repeat(unit(rng, 40), 100, axis=0)  # 100 copies of each: exact ties at every rank
    rng.shuffle(duplicates)
    out["duplicates"] = (segmented(rng, duplicates, [3000, 1000], deleted=0.1), duplicates[5])
    lengths = unit(rng, 3000) * np.exp(rng.uniform(-4, 4, (3000, 1))).astype(np.float32)
    out["lengths"] = (segmented(rng, lengths.astype(np.float32), [2000, 1000]), 3 * unit(rng, 1)[0])
    tiny = unit(rng, 2000) * np.float32(1e-3)
    tiny[:, ::3] *= np.float32(1e-3)
    out["subnormal"] = (segmented(rng, tiny.astype(np.float32), [2000]), unit(rng, 1)[0])
    spiky = unit(rng, 3000)  # a third of the rows have one large coordinate: coarse int8 steps, errors 10× the rest
    spiky[np.arange(0, 3000, 3), rng.integers(0, DIM, 1000)] = 3.0
    spiky /= np.linalg.norm(spiky, axis=1, keepdims=True)
    out["spiky"] = (segmented(rng, spiky, [2000, 1000], deleted=0.05), near(rng, spiky[4], 1, 0.1)[0])
    return out


@pytest.mark.parametrize("case", ["random", "near-ties", "duplicates", "lengths", "subnormal", "spiky"])
def test_two_stage_top_k_equals_the_exact_scan(case: str) -> None:
    rng = np.random.default_rng(7)
    rows, query = datasets(rng)[case]
    masks = {
        "all": None,
        "half": rng.random(rows.size) < 0.5,
        "few": rng.random(rows.size) < 0.01,  # few rows allowed: scored exactly without the first stage
        "one": np.eye(1, rows.size, rows.size // 2, dtype=bool)[0],
        "none": np.zeros(rows.size, dtype=bool),
    }
    for (name, mask), k in itertools.product(masks.items(), [1, 10, 100, 1000, rows.size, rows.size + 5]):
        got_rows, got_scores = rows.top(query, k, mask)
        want_rows, want_scores = expected_top(rows, query, k, mask)
        assert np.array_equal(got_rows, want_rows), (case, name, k)
        assert np.array_equal(got_scores, want_scores), (case, name, k)
    scan = rows.scan(query)
    assert scan.approx is not None  # the first stage ran: the equality above is not the fallback's


@pytest.mark.parametrize("kernel_name", ["simsimd int8", "fbgemm float16", "torch float16 mv"])
@pytest.mark.parametrize("case", ["random", "near-ties", "duplicates"])
def test_a_first_stage_scanned_in_blocks_on_the_pool_gives_the_same_top_k(case, kernel_name, monkeypatch) -> None:
    """Large snapshots scan their first-stage blocks on threads while the caller scores BM25 (the blocks are
    collected when the first candidates are asked for): the same rows and scores as the exact scan, with each kernel,
    over private packed copies or the shared int8 copy (``share_int8``)."""
    from livemem.index import dense

    kernel = next(k for k in kernels.KERNELS if k.name == kernel_name)
    assert kernel.available(), f"{kernel_name} is not available in this torch build"
    monkeypatch.setattr(kernels, "_CHOSEN", {None: kernel})
    monkeypatch.setattr(scan_module, "PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(scan_module, "SCAN_BLOCK_ROWS", 256)
    rng = np.random.default_rng(11)
    rows, query = datasets(rng)[case]
    rows = rows.with_config(EngineConfig.defaults(scan_threads=2))
    for segment, _ in rows.parts[:1]:  # one segment scanned from a shared copy, as the serving copies do
        dense.share_int8(segment, dense.quantize_int8(segment), dense.max_row_norm(segment))
    masks = {"all": None, "half": rng.random(rows.size) < 0.5}
    for (name, mask), k in itertools.product(masks.items(), [1, 10, 1000]):
        scan = rows.scan(query, mask)
        assert scan._pending is not None  # the blocks went to the pool
        got_rows, got_scores = scan.top(k)
        want_rows, want_scores = expected_top(rows, query, k, mask)
        assert np.array_equal(got_rows, want_rows), (case, name, k)
        assert np.array_equal(got_scores, want_scores), (case, name, k)
    candidates, _ = scan.candidates(10)
    assert candidates.size < rows.size / 2 or case in ("near-ties", "duplicates")


@pytest.mark.parametrize(("kernel_name", "tight"), [("simsimd int8", 3e-2), ("fbgemm float16", 2e-3)])
def test_the_bound_holds_for_every_row(kernel_name, tight, monkeypatch) -> None:
    monkeypatch.setattr(kernels, "_CHOSEN", {None: next(k for k in kernels.KERNELS if k.name == kernel_name)})
    rng = np.random.default_rng(11)
    for case, (rows, query) in datasets(rng).items():
        scan = rows.scan(query)
        exact = (rows @ query).astype(np.float64)
        b0, rho = scan.bound
        error = np.abs(scan.approx.astype(np.float64) - exact)
        assert np.all(error <= b0 + rho * np.abs(scan.approx)), case
        assert b0 < tight * max(1.0, float(np.linalg.norm(query))) or case in ("lengths", "spiky")  # tight enough


def test_weighted_candidates_hold_the_top_k_of_reweighed_scores() -> None:
    rng = np.random.default_rng(3)
    vectors = unit(rng, 5000)
    rows = segmented(rng, vectors, [4000, 1000])
    query = near(rng, vectors[1], 1, 0.1)[0]
    weight = 1 + rng.uniform(0, 2, rows.size) * (rng.random(rows.size) < 0.05)  # a few rows lifted up to 3×
    mask = rng.random(rows.size) < 0.8
    scan = rows.scan(query, mask)
    final = (rows @ query).astype(np.float64) * weight
    allowed = np.flatnonzero(mask)
    for k in (1, 10, 200):
        candidates, scores = scan.candidates(k, weight)
        best = allowed[top_order(final[allowed], k)]
        assert set(best) <= set(candidates) and set(candidates) <= set(allowed)
        assert np.array_equal(scores, (rows @ query)[candidates])
        assert np.array_equal(candidates[top_order(scores * weight[candidates], k)], best)
    negative = weight.copy()
    negative[0] = -1.0  # not a bound-preserving weight: every allowed row is a candidate
    assert np.array_equal(scan.candidates(5, negative)[0], allowed)


def test_a_row_scores_the_same_in_any_segment_layout() -> None:
    """BLAS rounds a row by its position in the matrix; the dense score must not depend on it."""
    rng = np.random.default_rng(5)
    vectors = unit(rng, 3001)
    query = unit(rng, 1)[0]
    whole = DenseRows([(vectors, np.arange(3001))], DIM) @ query
    pieces = DenseRows([(vectors[:1], np.arange(1)), (vectors[1:], np.arange(3000))], DIM) @ query
    assert np.array_equal(whole, pieces)
    rows = rng.choice(3001, 77, replace=False)
    assert np.array_equal(DenseRows([(vectors, np.arange(3001))], DIM).scores(query, rows), whole[rows])
    assert np.array_equal(exact_scores(vectors[rows], query), whole[rows])
    # the compiled loop may vectorise a row's sum, but the same way at any address: rows 1 float off alignment
    misaligned = np.zeros(vectors.size + 1, dtype=np.float32)[1:].reshape(vectors.shape)
    misaligned[:] = vectors
    assert np.array_equal(exact_scores(misaligned, query), whole)
    assert np.allclose(whole, vectors @ query, atol=1e-6)  # the same cosine as the BLAS product, within rounding


def test_unusable_vectors_fall_back_to_the_exact_scan() -> None:
    rng = np.random.default_rng(9)
    vectors = unit(rng, 2000)
    vectors[17] = np.nan
    rows = DenseRows([(vectors, np.arange(2000))], DIM)
    query = vectors[3]
    scan = rows.scan(query)
    assert scan.approx is None
    assert np.array_equal(rows.top(query, 50)[0], expected_top(rows, query, 50, None)[0])
    from livemem.index.dense import first_stage_kernel

    huge = DenseRows([(unit(rng, 2000) * np.float32(1e5), np.arange(2000))], DIM)  # beyond float16's range
    assert (huge.scan(query).approx is None) == (not first_stage_kernel().reads_int8)  # int8 codes scale per row
    assert np.array_equal(huge.top(query, 5)[0], expected_top(huge, query, 5, None)[0])
    vast = DenseRows([(unit(rng, 2000) * np.float32(1e32), np.arange(2000))], DIM)  # its products overflow float32
    assert vast.scan(query).approx is None
    assert np.array_equal(vast.top(query, 5)[0], expected_top(vast, query, 5, None)[0])
    empty = DenseRows([], DIM)
    assert empty.top(query, 5)[0].size == 0 and (empty @ query).size == 0


def test_the_first_stage_copy_is_made_once_per_segment() -> None:
    rng = np.random.default_rng(1)
    shared = unit(rng, 3000)
    first = DenseRows([(shared, np.arange(3000))], DIM)
    second = DenseRows([(shared, np.arange(0, 3000, 2))], DIM)  # another snapshot holding part of the segment
    kernel = dense_module.first_stage_kernel()
    first.prepare()
    assert dense_module.packed(shared, kernel) is dense_module.packed(shared, kernel)
    query = shared[4]
    assert np.array_equal(second.top(query, 10)[0], expected_top(second, query, 10, None)[0])
    assert np.array_equal(first.top(query, 10)[0], expected_top(first, query, 10, None)[0])
    gone = unit(rng, 100)
    dense_module.packed(gone, kernel)
    key = (id(gone), kernel.name)
    assert key in scan_module._PACKED
    del gone  # a segment no snapshot holds any more: its packed copy is dropped with it
    assert key not in scan_module._PACKED


class Simulated(kernels.Kernel):
    """A float16 product computed in numpy, rounding as told: the probe must catch the ones breaking the model."""

    def __init__(self, product) -> None:
        self.name, self.simulated = product.__name__, product

    def pack(self, dense: np.ndarray) -> np.ndarray:
        return dense.astype(np.float16)

    def product(self, packed: np.ndarray, query: np.ndarray) -> np.ndarray:
        return self.simulated(packed.astype(np.float32), query.astype(np.float16).astype(np.float32))


def test_the_probe_rejects_float16_sums_and_products() -> None:
    """Kernels that sum in float16, or round products to float16, miss by more than the error model allows."""

    def exact16(m: np.ndarray, q: np.ndarray) -> np.ndarray:
        return (m.astype(np.float64) @ q.astype(np.float64)).astype(np.float16)

    def sums16(m: np.ndarray, q: np.ndarray) -> np.ndarray:  # 16 float16 lanes, as a vectorised float16 kernel
        lanes = np.zeros((m.shape[0], 16), dtype=np.float16)
        for i in range(0, m.shape[1], 16):
            lanes = (lanes + (m[:, i : i + 16] * q[i : i + 16]).astype(np.float16)).astype(np.float16)
        return lanes.astype(np.float32).sum(axis=1).astype(np.float16)

    def products16(m: np.ndarray, q: np.ndarray) -> np.ndarray:
        return (m * q).astype(np.float16).astype(np.float32).sum(axis=1).astype(np.float16)

    assert kernels._probe(Simulated(exact16))
    assert not kernels._probe(Simulated(sums16))
    assert not kernels._probe(Simulated(products16))
    for kernel in kernels.KERNELS:  # the real ones here keep to their models
        if kernel.available():
            assert kernels._probe(kernel), kernel.name
    assert dense_module.first_stage_kernel() is not None


# FBGEMM is in x86 builds of torch only: the kernels this build has
@pytest.mark.parametrize("kernel", [k for k in kernels.KERNELS if kernels._safe(k.available)], ids=str)
def test_each_first_stage_kernel_gives_the_exact_top_k(kernel, monkeypatch) -> None:
    monkeypatch.setattr(kernels, "_CHOSEN", {None: kernel})
    rng = np.random.default_rng(2)
    for case, (rows, query) in datasets(rng).items():
        mask = rng.random(rows.size) < 0.7
        scan = rows.scan(query, mask)
        assert scan.approx is not None, (kernel.name, case)
        b0, rho = scan.bound
        allowed = np.flatnonzero(mask)
        error = np.abs(scan.approx[allowed].astype(np.float64) - (rows @ query)[allowed])
        assert np.all(error <= b0 + rho * np.abs(scan.approx[allowed])), (kernel.name, case)
        for k in (1, 25, 500):
            got = scan.top(k)
            want = expected_top(rows, query, k, mask)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), (kernel.name, case, k)


# --- Retriever.search against the full-scan path ----------------------------------------------------------------

TOPICS = ["heating", "food", "housing", "transport", "medicine", "school", "water", "jobs", "childcare", "legal"]
PLACES = ["Fayette", "Raleigh", "Kanawha", "Mercer", "Wyoming"]


def extra_files(rng: np.random.Generator) -> dict[str, str]:
    """Forty pages on a few topics and places (many near one another), three identical copies of one page."""
    files = {}
    for i in range(40):
        topic, other = rng.choice(TOPICS, 2, replace=False)
        place = rng.choice(PLACES)
        files[f"benefits/pages/page-{i:02d}.md"] = (
            f"# {topic.title()} help in {place}\n\n{topic.title()} assistance in {place} County: apply at the "
            f"county office. Questions about {other} go to the {other} desk.\n\n## Details {i}\n\n"
            f"Bring proof of residence for {topic} programs. Offices near {place} open weekdays.\n"
        )
    copy = "# SNAP copy\n\nSNAP food assistance: the same page, published three times.\n"
    files |= {f"benefits/copies/copy-{i}.md": copy for i in range(3)}
    for name in ("heating", "food"):  # two long documents: dozens of chunks each, so few documents fill many ranks
        sections = [
            f"## {name.title()} rule {i}\n\n" + " ".join(rng.choice(TOPICS, 40)) + f" {name} assistance.\n"
            for i in range(30)
        ]
        files[f"benefits/handbooks/{name}.md"] = f"# {name.title()} handbook\n\n" + "\n".join(sections)
    return files


@pytest.fixture(scope="module")
def used_index(tmp_path_factory, embedder):
    """A small index, queried with feedback and rolled up (so living memory has questions to match)."""
    root = tmp_path_factory.mktemp("dense-search")
    sources = make_workspace(root)
    commit_files(root / "repo", extra_files(np.random.default_rng(0)), "more pages")
    home = IndexHome(root / "rag_index")
    build_and_publish(sources, home, embedder)
    settings = Settings(index_dir=home.root, api_keys=API_KEYS, warm_up=False, cache_size=0)
    with TestClient(create_app(settings, embedder)) as client:
        for question in ("heating assistance in Fayette", "SNAP food assistance", "housing help Raleigh"):
            data = client.post("/query", json={"query": question, "top_k": 3}).json()
            useful = [r["chunk_id"] for r in data["results"][1:3]]  # not the first: the ranking must change
            client.post("/feedback", json={"trace_id": data["trace_id"], "chunk_ids": useful, "useful": True})
    result = rollup_day(home, datetime.now(UTC).date(), AttentionConfig(), Breath("Δ3", "normal"), embedder=embedder)
    assert result.staged, result.reason
    home.publish(result.version_id, result.base_version, 5)
    snap = load_snapshot(home, home.current())
    assert question_memory(snap).size and snap.size > 60
    yield snap
    snap.close()


def reference_search(retriever: Retriever, snap, query: Query, collections: list[str], vector: np.ndarray):
    """The full-scan path: every candidate scored (dense and BM25) and fused, then reweighed and ranked."""
    mask = retrieval.filter_mask(snap, collections, query.filters)
    candidates = np.flatnonzero(mask)
    dense_all = snap.dense @ vector if query.mode != "sparse" else None
    index = snap.sparse_for(frozenset(snap.access_of[c] for c in collections if c in snap.access_of))
    sparse_all = None
    if query.mode != "dense" and index is not None:  # sparse mode: the chunk text and its heading-path field
        sparse_all = index.field_scores(query.text) if query.mode == "sparse" else index.scores(query.text)
    sparse = None if sparse_all is None else sparse_all[candidates]
    if not candidates.size:
        rows, scores = candidates, np.zeros(0)
    elif query.mode == "dense":
        rows, scores = candidates, dense_all[candidates].astype(np.float64)
        if retriever.dense_blend(snap) and rows.size:  # the first chunks by cosine blend in their best sentence
            top = top_order(scores, min(retriever.fusion.sentence_depth, rows.size))
            best = snap.dense.best_sentences(vector, rows[top])
            scores[top] = dense_with_sentences(scores[top], best, retriever.fusion)
    elif query.mode == "sparse":
        matched = sparse > 0 if sparse is not None else np.zeros(candidates.size, dtype=bool)
        rows, scores = candidates[matched], sparse[matched].astype(np.float64) if sparse is not None else np.zeros(0)
    else:
        sparse = sparse if sparse is not None else np.zeros(candidates.size)
        fusion = retriever.fusion_for(snap)
        rows, scores = fuse(candidates, dense_all[candidates], sparse, fusion)
        if fusion.sentences and rows.size:  # the first fused chunks blend in their best sentence
            listed = np.full(snap.size, -np.inf)
            on_list = candidates[top_order(dense_all[candidates], min(fusion.depth, candidates.size))]
            listed[on_list] = dense_all[on_list]
            top = sentence_order(scores, fusion)
            best = snap.dense.best_sentences(vector, rows[top])
            scores[top] = with_sentences(scores[top], listed[rows[top]], best, fusion)
        if fusion.feedback and rows.size:  # pseudo-relevance feedback over the fused ranking of every candidate
            top = feedback_order(scores, fusion)
            moved = feedback_query(vector, snap.dense.materialize()[rows[top[: fusion.feedback_chunks]]],
                                   fusion.feedback_beta)  # fmt: skip
            scores[top] = with_feedback(scores[top], (snap.dense @ moved)[rows[top]], fusion)
    if rows.size and query.recency_bias:
        half_life = query.recency_half_life_days or retriever.recency_half_life_days
        scores = scores * signals.recency_boost(snap, rows, query.recency_bias, half_life)
    if rows.size and query.attention_boost and question_memory(snap).size:
        scores = scores * signals.attention_multiplier(snap, rows, query.attention_boost, vector)
    if query.min_score is not None:
        keep = scores >= query.min_score
        rows, scores = rows[keep], scores[keep]

    def hit(row: int, score: float):
        return types.Hit(
            row,
            score,
            None if dense_all is None else float(dense_all[row]),
            None if sparse_all is None else float(sparse_all[row]),
        )

    if query.return_ == "documents":
        documents = retrieval.top_documents(snap, rows, scores, query.top_k, hit)
        return [d.hits[0] for d in documents], documents
    return [hit(int(rows[i]), float(scores[i])) for i in top_order(scores, query.top_k)], None


def as_tuples(hits) -> list[tuple]:
    return [(h.row, h.score, h.dense, h.sparse) for h in hits]


FILTERS = {
    "none": Filters(),
    "county": Filters(county=("Fayette",)),
    "path": Filters(path_prefix="benefits/pages/page-1"),
    "source": Filters(source=("wv-benefits",)),
    "nothing": Filters(county=("Nowhere",)),
}


@pytest.mark.parametrize("exact_share", [0.0, scan_module.EXACT_SHARE])
def test_search_returns_what_the_full_scan_returns(used_index, embedder, monkeypatch, exact_share) -> None:
    snap = used_index
    monkeypatch.setattr(scan_module, "EXACT_SHARE", exact_share)  # 0: the first stage runs even for few rows
    monkeypatch.setattr(retrieval.time, "time", lambda: 1.8e9)  # one "now" for recency in both paths
    texts = ["SNAP food assistance", "heating help Fayette County", "legal questions desk", "zebra", "heating rule"]
    vectors = {t: embedder.encode_one(t) for t in texts}
    retrievers = [Retriever(embedder), Retriever(embedder, FusionSettings(method="rrf", depth=4)),
                  Retriever(embedder, FusionSettings(method="minmax", depth=6, sparse_depth=3)),
                  Retriever(embedder, FusionSettings(method="zscore", depth=5, sparse_depth=8, sentence_weight=0.5,
                                                     sentence_depth=3))]  # fmt: skip
    roles = [snap.collections_for(frozenset({"public"})), snap.collections_for(frozenset({"public", "internal"}))]
    deeper = []  # dense rankings that had to look past their first candidates
    original = retrieval.top_documents

    def counting(*args, **kwargs):
        documents = original(*args, **kwargs)
        deeper.append(documents is None)
        return documents

    monkeypatch.setattr(retrieval, "top_documents", counting)
    compared = 0
    for mode, return_, (name, filters), recency, attention, min_score, top_k in itertools.product(
        ["dense", "sparse", "hybrid"], ["chunks", "documents"], FILTERS.items(), [0.0, 3.0], [0.0, 1.0],
        [None, 0.3], [1, 13, 40],  # 13, 40: more documents than the first rounds of the dense ranking hold
    ):  # fmt: skip
        text = texts[compared % len(texts)]
        retriever = retrievers[compared % len(retrievers)]
        collections = roles[compared % 2]
        if mode == "dense" and min_score is not None:
            min_score = 0.1  # cosines: a threshold some rows pass
        query = Query(
            text, top_k, mode, return_, filters=filters, min_score=min_score, recency_bias=recency,
            attention_boost=attention,
        )  # fmt: skip
        got = retriever.search(snap, query, collections, vector=vectors[text])
        want_chunks, want_documents = reference_search(retriever, snap, query, collections, vectors[text])
        label = (mode, return_, name, recency, attention, min_score, top_k)
        assert as_tuples(got.chunks) == as_tuples(want_chunks), label
        if want_documents is not None:
            assert [(d.parent_id, d.score, as_tuples(d.hits)) for d in got.documents] == [
                (d.parent_id, d.score, as_tuples(d.hits)) for d in want_documents
            ], label
        compared += 1
    assert compared == 3 * 2 * 5 * 2 * 2 * 2 * 3
    assert any(deeper)


def test_attention_and_recency_change_the_dense_ranking(used_index, embedder) -> None:
    """The reweighed dense ranking is not the plain one (so the test above compares rankings that differ)."""
    snap = used_index
    collections = snap.collections_for(frozenset({"public"}))
    vector = embedder.encode_one("heating assistance in Fayette")
    plain = Query("heating assistance in Fayette", 5, "dense", attention_boost=0.0)
    lifted = Query("heating assistance in Fayette", 5, "dense", attention_boost=3.0, recency_bias=5.0)
    retriever = Retriever(embedder)
    first = [h.row for h in retriever.search(snap, plain, collections, vector).chunks]
    second = retriever.search(snap, lifted, collections, vector).chunks
    assert first != [h.row for h in second]
    everything = Query("heating assistance in Fayette", snap.size, "dense", attention_boost=0.0)
    before = {h.row: h.score for h in retriever.search(snap, everything, collections, vector).chunks}
    assert all(h.score > before[h.row] for h in second)  # every shown row gained from recency or attention


def test_dense_mode_blends_each_first_chunks_best_sentence(used_index, embedder) -> None:
    """On an index with sentence vectors, dense mode scores its first ``sentence_depth`` chunks by cosine as hybrid
    blends its dense part: ``(1 - w) * cosine + w * best sentence``; the others keep their cosine, and
    ``sentence_weight=0`` gives the plain cosine ranking back."""
    snap = used_index
    assert snap.dense.has_sentences
    collections = snap.collections_for(frozenset({"public", "internal"}))
    changed = 0
    for text in ("SNAP food assistance", "heating help Fayette County", "legal questions desk", "housing help"):
        vector = embedder.encode_one(text)
        query = Query(text, snap.size, "dense", attention_boost=0.0)
        plain = Retriever(embedder, FusionSettings(sentence_weight=0.0)).search(snap, query, collections, vector)
        assert all(h.score == h.dense and h.sentence is None for h in plain.chunks)
        shallow = Retriever(embedder, FusionSettings(sentence_depth=20))
        found = shallow.search(snap, query, collections, vector)
        assert "sentences" in found.timings_ms
        first = {h.row for h in plain.chunks[:20]}  # the first 20 by cosine are blended, no other
        w = shallow.fusion.sentence_weight
        for h in found.chunks:
            if h.row in first and h.sentence is not None:
                assert h.score == pytest.approx((1 - w) * max(h.dense, 0) + w * max(h.sentence, 0), abs=1e-9)
            else:
                assert h.score == h.dense
        assert sum(h.row in first and h.sentence is not None for h in found.chunks) >= 3
        changed += [h.row for h in found.chunks] != [h.row for h in plain.chunks]
    assert changed  # the blend reorders some ranking


def test_top_order_on_large_arrays_equals_a_full_sort_ties_and_nan_included() -> None:
    """``top_order`` on many scores looks only among those within a bound guessed from a sample: the same positions,
    in the same order, as a stable sort of every score (ties to the lower position, NaN last)."""
    rng = np.random.default_rng(7)
    for trial in range(24):
        n = int(rng.integers(5_000, 80_000))
        scores = rng.standard_normal(n).astype(np.float32)
        if trial % 3 == 0:
            scores = np.round(scores, 1)  # many ties
        if trial % 4 == 0:
            scores[rng.integers(0, n, n // 5)] = np.nan
        if trial % 5 == 0:
            scores[: n - 3] = 0.0  # almost all equal: the guess cannot narrow anything
        for k in (1, 10, 64, 500):
            want = np.lexsort((np.arange(n), -np.where(np.isnan(scores), -np.inf, scores)))[:k]
            assert np.array_equal(top_order(scores, k), want), (trial, k)


def test_int8_bounds_per_row_prune_rows_with_small_errors(monkeypatch) -> None:
    """Rows with one large coordinate quantize coarsely; the others' own (smaller) errors leave fewer rows to score
    exactly than the segment's largest error would, and the top k stays exact."""
    monkeypatch.setattr(kernels, "_CHOSEN", {None: next(k for k in kernels.KERNELS if k.reads_int8)})
    rng = np.random.default_rng(5)
    rows, query = datasets(rng)["spiky"]
    per_row = rows.scan(query)
    got = per_row.candidates(100)[0]
    uniform = rows.scan(query)
    uniform._row_bounds = None
    assert got.size < uniform.candidates(100)[0].size
    assert np.isin(expected_top(rows, query, 100, None)[0], got).all()


def test_the_engine_config_is_passed_down_to_the_kernels_and_the_scan() -> None:
    """``LIVEMEM_DENSE_KERNEL`` and ``LIVEMEM_SCAN_THREADS`` are read once into the entry point's ``EngineConfig``,
    which rows are given: the named kernel is tried first and the scan gets that many threads; rows made without one
    keep the defaults, in the same process."""
    configured = EngineConfig.from_settings(
        DenseSettings.defaults(kernel="torch-half", scan_threads=0), CacheSettings.defaults()
    )
    order = [k.name for k in kernels.kernel_order(configured.kernel)]
    assert order == ["torch float16 mv", "simsimd int8", "fbgemm float16"]
    rng = np.random.default_rng(3)
    rows = DenseRows([(unit(rng, 50), np.arange(50))], DIM, config=configured)
    assert rows.config is configured and rows.scan_pool() is None
    if kernels._safe(kernels.BY_NAME["torch-half"].available):
        assert rows.kernel().name == "torch float16 mv"
    plain = DenseRows(rows.parts, DIM)
    assert plain.config == EngineConfig.defaults() == EngineConfig()
    assert [k.name for k in kernels.kernel_order(plain.config.kernel)] == [k.name for k in kernels.KERNELS]
    assert [k.name for k in kernels.KERNELS] == ["simsimd int8", "fbgemm float16", "torch float16 mv"]
    default_threads = min(2, os.cpu_count() or 1) - 1  # one fewer than the cores, at most one
    assert plain.config.scan_threads == default_threads
    assert (plain.scan_pool() is None) == (default_threads == 0)
    assert plain.kernel() is kernels.first_stage_kernel()
    assert rows.with_config(EngineConfig.defaults(scan_threads=2)).scan_pool() is scan_module.scan_pool(2)
