"""Dense, sparse (BM25) and hybrid retrieval over one index snapshot, with filters, recency and parent documents.

Everything is exact and in memory: the query vector is dotted with every chunk vector (vectors are L2-normalised,
so that is cosine similarity), BM25 scores every chunk, and the filters are a boolean mask over all chunks
applied *before* ranking, so ``top_k`` results come back whenever that many chunks match.

BM25 uses the index of the access levels of the collections searched (``Snapshot.sparse_for``), so a role's scores
never reflect term statistics of chunks it may not read. Hybrid fuses the two lists (each side's first ``depth``
chunks) with ``livemem.query.fusion.fuse``: by default the cosine plus half the BM25 score over the list's best
(``linear``). On an index with sentence vectors (``livemem.index.sentences``) BM25 weighs 0.3 instead and the first
200 fused chunks blend their best sentence's cosine into their dense part (``Retriever.fusion_for``,
``FusionSettings.sentence_*``). Pseudo-relevance feedback (off by default): the query vector moved towards its first
hit's (Rocchio) adds its cosine to the first 200 chunks found (``FusionSettings.feedback_*``); reciprocal rank
fusion, min-max and z-score selectable (see ``docs/serving.md`` for the SciFact numbers behind the defaults).
Dense mode blends the same way: its first 200 chunks by cosine score ``0.33 · cosine + 0.67 · best sentence``
(``Retriever.dense_blend``). Sparse mode adds BM25 over each chunk's heading path, a second field at 0.2
(``LevelSparse.field_scores``); hybrid's BM25 side is the chunk text alone.

Living memory then re-weighs the candidates found: each score is multiplied by ``attention_multiplier``, at most
``1 + attention_boost`` (default ``DEFAULT_ATTENTION_BOOST``), for chunks people confirmed useful for questions
like this one (``docs/attention.md``, ``bench/memory_helps.py``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import cast, overload

import numpy as np

from livemem.dates import date_mask
from livemem.engine.snapshot import LevelSparse, Snapshot, breath_number
from livemem.index.dense import DenseScan
from livemem.index.scan import walk_pool
from livemem.index.work import SharedWork
from livemem.model.embedding import Embedder
from livemem.query.fusion import (
    FusionSettings,
    dense_with_sentences,
    feedback_order,
    feedback_query,
    fuse,
    sentence_order,
    top_order,
    with_feedback,
    with_sentences,
)
from livemem.query.signals import attention_multiplier, consider_also, recency_boost
from livemem.query.types import MULTI_VALUE_FILTERS, DocumentHit, Filters, Hit, Query, Retrieval


@dataclass
class _Sides:
    """What one search found on each side (``Retriever._sides``): the dense scan and hybrid's dense top, BM25's list
    and scores of every row, and the query vector (encoded there when the caller had none)."""

    scan: DenseScan | None
    dense_top: tuple[np.ndarray, np.ndarray] | None
    sparse_rows: np.ndarray | None
    sparse_all: np.ndarray | None
    vector: np.ndarray | None


class Retriever:
    """Answers queries against snapshots with one shared embedder (encoding is serialised: one torch thread)."""

    def __init__(
        self, embedder: Embedder, fusion: FusionSettings | None = None, recency_half_life_days: float = 90.0
    ) -> None:
        self.embedder = embedder
        self.fusion = fusion or FusionSettings()
        self.recency_half_life_days = recency_half_life_days
        self._encode_lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self.embedder.model_id

    def fusion_for(self, snap: Snapshot) -> FusionSettings:
        """The fusion hybrid search uses on ``snap``: with sentence vectors, the blend and its BM25 weight
        (``FusionSettings.for_sentences``); scores are normalised with the same (``normalized_score``)."""
        return self.fusion.for_sentences() if snap.dense.has_sentences else self.fusion

    def encode(self, text: str) -> np.ndarray:
        with self._encode_lock:
            return self.embedder.encode_one(text)

    def search(
        self, snap: Snapshot, query: Query, collections: list[str], vector: np.ndarray | None = None
    ) -> Retrieval:
        """Rank the chunks of ``collections`` (already checked against the caller's role) matching the filters.

        ``vector`` is the query's embedding when the caller already has it (benchmarks encode in batches).
        """
        timings: dict[str, float] = {}
        t = time.perf_counter()
        mask, candidates = allowed_rows(snap, collections, query.filters)
        t = _tick(timings, "filter", t)
        # Term statistics of only the access levels searched: scores never depend on chunks the caller may not read.
        index = snap.sparse_for(frozenset(snap.access_of[c] for c in collections if c in snap.access_of))
        sides, t = self._sides(snap, query, index, mask, candidates, vector, timings, t)
        made, chunks, documents, best_relevance, t = self._rank(snap, query, sides, candidates, timings, t)
        if sides.scan is not None and made:  # the exact dense scores of the rows shown (most are known already)
            self._shown_scores(snap, query, sides, made)
        suggestions = consider_also(snap, [h.row for h in chunks], mask, query.consider_also)
        _tick(timings, "rank", t)
        return Retrieval(chunks, documents, int(candidates.size), timings, suggestions, best_relevance)

    def _sides(
        self,
        snap: Snapshot,
        query: Query,
        index: LevelSparse | None,
        mask: np.ndarray,
        candidates: np.ndarray,
        vector: np.ndarray | None,
        timings: dict[str, float],
        t: float,
    ) -> tuple[_Sides, float]:
        """The two sides of the query: the dense scan (and hybrid's dense top) and BM25's scores (and hybrid's list),
        the query encoded when ``vector`` is None, each phase timed; returns them and the clock."""
        scan = sparse_all = sparse_rows = dense_top = None
        sparse_wanted = bool(candidates.size) and query.mode in ("sparse", "hybrid") and index is not None
        sparse_index = cast(LevelSparse, index)  # read only where ``sparse_wanted``: not None
        bm25 = None
        # hybrid's BM25 side: every row's score and the list fused (its best ``sparse_depth`` allowed rows), scored in
        # pieces (livemem.index.sparse.Pieces) on the scan pool while this thread encodes, or on the walk thread
        # after its walk; this thread scores the pieces no pool thread has started, then finds the list
        fusion = self.fusion_for(snap)
        allowed = None if candidates.size == snap.size else mask
        bm25_list = (query.text, allowed, fusion.depth if fusion.sparse_depth is None else fusion.sparse_depth)
        if candidates.size and query.mode in ("dense", "hybrid"):
            pool = snap.dense.scan_pool() if sparse_wanted else None
            # with graphs (livemem.index.ann) the dense side is a walk on this thread, not a scan on the pool
            walk = query.mode == "hybrid" and snap.dense.walks
            if vector is None:
                if pool is not None:  # BM25 is found and scored on the scan pool while this thread encodes
                    bm25 = sparse_index.split(query.text).prepare_on(pool).submit(pool)
                vector = self.encode(query.text)
            elif pool is not None and walk:  # BM25 in pieces beside the walks (DenseScan.candidates: ``beside``;
                # found there, on this thread: on the scan pool, a third busy thread, p50 +2 ms at 2M)
                bm25 = sparse_index.split(query.text)
            t = _tick(timings, "encode", t)
            # on a large snapshot the first stage runs on the scan pool while BM25 is scored here (livemem.index.dense)
            scan = snap.dense.scan(vector, mask, candidates)
            if walk:  # the graphs' candidates now, while BM25 is scored beside them
                dense_top = scan.top(min(self.fusion.depth, candidates.size), beside=bm25)
            t = _tick(timings, "dense", t)
        if sparse_wanted:
            if query.mode == "sparse":  # BM25 of the chunk text and of its heading path (LevelSparse.field_scores)
                sparse_all = sparse_index.field_scores(query.text)
            else:
                ranked = sparse_index.ranked(*bm25_list) if bm25 is None else bm25.ranked(*bm25_list[1:])
                sparse_rows, sparse_all = ranked
            t = _tick(timings, "sparse", t)
        if scan is not None and query.mode == "hybrid" and dense_top is None:
            dense_top = scan.top(min(self.fusion.depth, candidates.size))
            now = time.perf_counter()  # the dense side's wait and top, after BM25
            timings["dense"] = round(timings["dense"] + (now - t) * 1000, 3)
            t = now
        return _Sides(scan, dense_top, sparse_rows, sparse_all, vector), t

    def _rank(
        self, snap: Snapshot, query: Query, sides: _Sides, candidates: np.ndarray, timings: dict[str, float], t: float
    ) -> tuple[list[Hit], list[Hit], list[DocumentHit] | None, float | None, float]:
        """The results from the two sides: dense mode's ranking, or the fused (or BM25) scores reweighed by recency
        and attention; returns every hit made, the chunks and documents shown, the best relevance and the clock."""
        made: list[Hit] = []
        scan, sparse_all, vector = sides.scan, sides.sparse_all, sides.vector

        def hit(row: int, score: float) -> Hit:
            made.append(Hit(row, score, None, None if sparse_all is None else float(sparse_all[row])))
            return made[-1]

        best_relevance = None
        if query.mode == "dense" and scan is not None:
            dense_vector = cast(np.ndarray, vector)  # encoded with the scan
            chunks, documents, weight = self._dense_ranking(
                snap, query, scan, dense_vector, candidates.size, hit, timings
            )
            if weight is not None:  # recency and attention multiplied each row's score by its weight
                for h in made:
                    h.relevance = h.score / float(weight[h.row])
            t = _tick(timings, "score", t)
        else:
            if sides.dense_top is not None:
                dense_vector = cast(np.ndarray, vector)  # encoded with the scan
                rows, scores = self._hybrid(snap, dense_vector, sides.dense_top, sides.sparse_rows, sparse_all, timings)
            else:
                sparse = None if sparse_all is None else sparse_all[candidates]
                rows, scores = self._score(query, candidates, None, sparse)
            relevance, rows_scored = scores, rows
            best_relevance = float(relevance.max()) if relevance.size else None
            scores = self._reweigh(snap, query, rows, scores, vector)
            if query.min_score is not None:
                keep = scores >= query.min_score
                rows, scores = rows[keep], scores[keep]
            t = _tick(timings, "score", t)
            if query.return_ == "documents":
                documents = top_documents(snap, rows, scores, query.top_k, hit)
                chunks = [d.hits[0] for d in documents]
            else:
                documents = None
                chunks = [hit(int(rows[i]), float(scores[i])) for i in top_order(scores, query.top_k)]
            if scores is not relevance and made:  # boosted: each hit keeps its relevance part (rows ascend)
                found = relevance[np.searchsorted(rows_scored, [h.row for h in made])]
                for h, value in zip(made, found, strict=True):
                    h.relevance = float(value)
        return made, chunks, documents, best_relevance, t

    def _shown_scores(self, snap: Snapshot, query: Query, sides: _Sides, made: list[Hit]) -> None:
        """Each hit made gains its exact dense score (most are known already) and, where the mode blends sentences,
        its best sentence's cosine."""
        shown = np.array([h.row for h in made])
        scan, vector = cast(DenseScan, sides.scan), cast(np.ndarray, sides.vector)  # called with a scan: encoded
        for h, dense in zip(made, scan.scores(shown), strict=True):
            h.dense = float(dense)
        blends = self.dense_blend(snap) if query.mode == "dense" else self.fusion_for(snap).sentences
        if blends and snap.dense.has_sentences:
            for h, best in zip(made, snap.dense.best_sentences(vector, shown), strict=True):
                h.sentence = None if np.isnan(best) else float(best)

    def _hybrid(
        self,
        snap: Snapshot,
        vector: np.ndarray,
        dense_top: tuple[np.ndarray, np.ndarray],
        sparse_rows: np.ndarray | None,
        sparse_all: np.ndarray | None,
        timings: dict[str, float],
    ) -> tuple[np.ndarray, np.ndarray]:
        """Fusion over the union of the two lists only: the dense top ``depth`` and the BM25 top ``sparse_depth``
        (``sparse_rows``: the allowed rows scoring above 0, best first, ties to the lower row —
        ``LevelSparse.ranked``) (``livemem.query.fusion``: every method computes a side's contribution from its own
        list, so this equals fusing every candidate). The union holds every row either list would take (ties go to
        the lower row on both sides); rows outside the dense top carry a dense score of -inf, below every score of
        its list.

        With feedback on (``FusionSettings.feedback``), the first fused chunks move the query vector (Rocchio) and
        the first ``feedback_depth`` fused chunks gain their cosine to the moved query
        (``livemem.query.fusion.with_feedback``): exact scores of those rows only, no second scan
        (``timings["feedback"]``)."""
        fusion = self.fusion_for(snap)
        top_rows, top_scores = dense_top
        if sparse_rows is None:
            sparse_rows = top_rows[:0]
        union = sorted_union(top_rows, sparse_rows)
        dense = np.full(union.size, -np.inf, dtype=np.float32)
        dense[np.searchsorted(union, top_rows)] = top_scores
        sparse = sparse_all[union] if sparse_all is not None else np.zeros(union.size)
        rows, scores = fuse(union, dense, sparse, fusion)
        if fusion.sentences and snap.dense.has_sentences and rows.size:
            started = time.perf_counter()
            top = sentence_order(scores, fusion)  # ties: the lower row (rows ascend)
            cosines = dense[np.searchsorted(union, rows[top])]  # -inf: not on the dense list
            scores[top] = with_sentences(scores[top], cosines, best_sentences(snap, vector, rows[top]), fusion)
            timings["sentences"] = round((time.perf_counter() - started) * 1000, 3)
        if not fusion.feedback or not rows.size:
            return rows, scores
        started = time.perf_counter()
        top = feedback_order(scores, fusion)  # ties: the lower row (rows ascend)
        first = rows[top[: fusion.feedback_chunks]]
        moved = feedback_query(vector, snap.dense.vectors(first), fusion.feedback_beta)
        scores[top] = with_feedback(scores[top], snap.dense.scores(moved, rows[top]), fusion)
        timings["feedback"] = round((time.perf_counter() - started) * 1000, 3)
        return rows, scores

    def _reweigh(
        self, snap: Snapshot, query: Query, rows: np.ndarray, scores: np.ndarray, vector: np.ndarray | None
    ) -> np.ndarray:
        """Recency and living memory multiply the scores of the rows found (they never add a row)."""
        if rows.size and query.recency_bias:
            scores = scores * recency_boost(
                snap, rows, query.recency_bias, query.recency_half_life_days or self.recency_half_life_days
            )
        if rows.size and query.attention_boost and snap.signals.questions.size:
            # after the candidates are found: living memory reorders them, never adds one
            if vector is None:
                vector = self.encode(query.text)
            scores = scores * attention_multiplier(snap, rows, query.attention_boost, vector)
        return scores

    def dense_blend(self, snap: Snapshot) -> bool:
        """Whether dense mode blends the best sentence into its first chunks (``dense_with_sentences``): on an index
        with sentence vectors, unless the blend is off (``sentence_weight`` 0, ``RAG_FUSION_SENTENCES=0``)."""
        return snap.dense.has_sentences and cast(float, self.fusion.sentence_weight) > 0

    def _dense_ranking(
        self,
        snap: Snapshot,
        query: Query,
        scan: DenseScan,
        vector: np.ndarray,
        allowed: int,
        hit,
        timings: dict[str, float],
    ) -> tuple[list[Hit], list[DocumentHit] | None, np.ndarray | None]:
        """Dense mode: the ranking of every allowed row (and each row's recency × attention weight, None when
        neither applies), found from the candidates of the best ``depth``
        (``DenseScan.candidates``), looking deeper until it is settled.

        Recency and attention can lift a row past better dense scores, so candidates are chosen on the reweighed
        score: each row's multiplier (computed for every row: one vector operation each) scales the bounds of its
        dense score, so a row left out can never reach the ``depth`` best.

        With sentence vectors (``dense_blend``), the first ``sentence_depth`` allowed rows by cosine score their
        cosine blended with their best sentence's (``dense_with_sentences``), the others their cosine. Those rows
        are always candidates, and each round takes ``sentence_depth`` more candidates than it needs: a blended row
        may score below its cosine, so only the unblended candidates bound the rows left out."""
        recency, attention, weight = self._row_weights(snap, query, vector)
        depth = query.top_k if query.return_ == "chunks" else max(query.top_k * 4, 50)
        blended_rows = blended = None
        if self.dense_blend(snap):
            blended_rows, blended = self._blended_top(snap, scan, vector, allowed, timings)
        while True:
            if blended_rows is None:
                rows, dense = scan.candidates(depth, weight)
                scores = dense.astype(np.float64)
            else:
                rows, _ = scan.candidates(min(depth + blended_rows.size, allowed), weight)
                rows = sorted_union(rows, blended_rows)
                scores = scan.scores(rows).astype(np.float64)
                scores[np.searchsorted(rows, blended_rows)] = blended
            # the operations of _reweigh, in its order, on the same multipliers
            if recency is not None:
                scores = scores * recency[rows]
            if attention is not None:
                scores = scores * attention[rows]
            known: int | None = depth if depth < allowed else None  # the best `known` here are the best of all
            if query.min_score is not None:
                keep = scores >= query.min_score
                if known is not None and not keep[top_order(scores, known)].all():
                    known = None  # the results end among the best known rows: every one of them is here
                rows, scores = rows[keep], scores[keep]
            if query.return_ == "documents":
                documents = top_documents(snap, rows, scores, query.top_k, hit, known)
                if documents is not None:
                    return [d.hits[0] for d in documents], documents, weight
            elif known is None or known >= query.top_k:
                return [hit(int(rows[i]), float(scores[i])) for i in top_order(scores, query.top_k)], None, weight
            depth *= 4

    def _row_weights(
        self, snap: Snapshot, query: Query, vector: np.ndarray
    ) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
        """Dense mode's multipliers of every row: (recency, attention, their product), each None when off."""
        every = np.arange(snap.size)
        recency = attention = weight = None
        if query.recency_bias:
            half_life = query.recency_half_life_days or self.recency_half_life_days
            recency = weight = recency_boost(snap, every, query.recency_bias, half_life)
        if query.attention_boost and snap.signals.questions.size:
            attention = attention_multiplier(snap, every, query.attention_boost, vector)
            weight = attention if weight is None else weight * attention
        return recency, attention, weight

    def _blended_top(
        self, snap: Snapshot, scan: DenseScan, vector: np.ndarray, allowed: int, timings: dict[str, float]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The first ``sentence_depth`` allowed rows by cosine (ascending) and their cosine blended with their best
        sentence's (``dense_with_sentences``), timed as ``sentences``."""
        started = time.perf_counter()
        top_rows, cosines = scan.top(min(self.fusion.sentence_depth, allowed))  # ties: the lower row
        order = np.argsort(top_rows)
        blended_rows = top_rows[order]
        best = snap.dense.best_sentences(vector, blended_rows)
        blended = dense_with_sentences(cosines[order], best, self.fusion)
        timings["sentences"] = round((time.perf_counter() - started) * 1000, 3)
        return blended_rows, blended

    def _score(
        self, query: Query, candidates: np.ndarray, dense: np.ndarray | None, sparse: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of the chunks that are results in this mode, before recency and thresholds."""
        if query.mode == "dense":
            if dense is None:
                return candidates[:0], np.zeros(0)
            return candidates, dense.astype(np.float64)
        matched = sparse > 0 if sparse is not None else np.zeros(candidates.size, dtype=bool)
        if query.mode == "sparse":
            return candidates[matched], sparse[matched].astype(np.float64) if sparse is not None else np.zeros(0)
        if dense is None:
            return candidates[:0], np.zeros(0)
        return fuse(candidates, dense, sparse if sparse is not None else np.zeros(candidates.size), self.fusion)


SHARED_SENTENCE_ROWS = 64  # from this many rows, a walk thread scores half their sentences (read from memory)


def best_sentences(snap: Snapshot, vector: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``DenseRows.best_sentences`` of ``rows``; over graphs, half of them on a walk thread (idle while the fusion
    runs): at 2M chunks a row's sentence codes come from memory, not cache (≈ 4 µs a row), and the 200 rows blended
    cost ≈ 1 ms on the request's thread alone. The same floats (a row's score does not depend on the others)."""
    pool = walk_pool() if snap.dense.walks and rows.size >= SHARED_SENTENCE_ROWS else None
    if pool is None:
        return snap.dense.best_sentences(vector, rows)
    out = np.empty(rows.size, dtype=np.float32)

    def score(part: slice) -> None:
        out[part] = snap.dense.best_sentences(vector, rows[part])

    work = SharedWork()
    for part in (slice(0, rows.size // 2), slice(rows.size // 2, None)):  # the pool takes the first, this thread
        work.add(partial(score, part))  # the second
    work.submit(pool)
    work.finish()
    return out


def sorted_union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.union1d`` of two integer arrays by one sort (``np.unique``'s hash table costs ≈4× as much for the
    two lists of a hybrid query: 135 against 35 µs for 2 × 1,000 rows)."""
    union = np.concatenate([a, b])
    if union.size < 2:
        return union
    union.sort()
    keep = np.empty(union.size, dtype=bool)
    keep[0] = True
    np.not_equal(union[1:], union[:-1], out=keep[1:])
    return union[keep]


@overload
def top_documents(
    snap: Snapshot, rows: np.ndarray, scores: np.ndarray, top_k: int, hit, known: None = None
) -> list[DocumentHit]: ...
@overload
def top_documents(
    snap: Snapshot, rows: np.ndarray, scores: np.ndarray, top_k: int, hit, known: int | None
) -> list[DocumentHit] | None: ...
def top_documents(
    snap: Snapshot, rows: np.ndarray, scores: np.ndarray, top_k: int, hit, known: int | None = None
) -> list[DocumentHit] | None:
    """Parent documents ranked by their best chunk, each once (looks deeper until ``top_k`` parents are found).

    ``known``: only the best ``known`` of ``rows`` are known to be the best results of all (more results exist
    beyond those given); None is returned when the ranking would need to look deeper. None: ``rows`` are all
    the results."""
    parents = snap.columns["parent_id"]
    depth = max(top_k * 4, 50)
    while True:
        if known is None:
            depth = min(depth, scores.size)
        elif depth > known:
            return None
        order = top_order(scores, depth)
        documents: dict[str, DocumentHit] = {}
        for i in order:
            row, score = int(rows[i]), float(scores[i])
            pid = parents[row]
            doc = documents.get(pid)
            if doc is None:
                if len(documents) == top_k:
                    continue
                documents[pid] = DocumentHit(pid, score, [hit(row, score)])
            else:
                doc.hits.append(hit(row, score))
        if len(documents) >= top_k or (known is None and depth >= scores.size):
            return list(documents.values())
        depth *= 4


MAX_CACHED_MASKS = 64


def filter_mask(snap: Snapshot, collections: list[str], filters: Filters) -> np.ndarray:
    """Which chunks (in snapshot order) are in ``collections`` and meet every filter."""
    return allowed_rows(snap, collections, filters)[0]


def allowed_rows(snap: Snapshot, collections: list[str], filters: Filters) -> tuple[np.ndarray, np.ndarray]:
    """``filter_mask`` and its rows (``np.flatnonzero``). Without a filter both are the collections' own, computed
    once per snapshot and set of collections and shared read-only (at 2M chunks a copy of the mask and its 16 MB of
    rows per query were a millisecond)."""
    cols = snap.columns
    # The mask of a set of collections depends only on the (immutable) snapshot: computed once per role's set
    # (np.isin over an object array of every chunk was 8 ms a query at 123k chunks), copied for the filters.
    key = tuple(sorted(collections))
    found = snap.collection_masks.get(key)
    if found is None:
        base = np.isin(cols["collection"], np.array(collections, dtype=object))
        rows = np.flatnonzero(base)
        base.flags.writeable = rows.flags.writeable = False
        if len(snap.collection_masks) >= MAX_CACHED_MASKS:
            snap.collection_masks.clear()
        found = snap.collection_masks[key] = (base, rows)
    base = found[0]
    if not filters.narrows():
        return found
    mask = base.copy()
    for name in MULTI_VALUE_FILTERS:
        wanted = getattr(filters, name)
        if wanted:
            mask &= np.isin(cols[name], np.array(wanted, dtype=object))
    if filters.path_prefix:
        prefix = filters.path_prefix
        mask &= np.fromiter((p.startswith(prefix) for p in cols["path"]), dtype=bool, count=snap.size)
    if filters.seal_state:
        mask &= cols["seal_state"] == filters.seal_state
    if filters.min_attention is not None:
        mask &= cols["attention"] >= filters.min_attention
    if filters.last_seen_breath:
        # NaN (never seen) compares False, so unseen chunks drop out.
        mask &= cols["breath"] >= breath_number(filters.last_seen_breath)
    if filters.updated_after is not None:
        mask &= cols["updated"] >= filters.updated_after.timestamp()
    if filters.updated_before is not None:
        mask &= cols["updated"] <= filters.updated_before.timestamp()
    if filters.dated_after is not None or filters.dated_before is not None:
        mask &= date_mask(snap, filters.dated_after, filters.dated_before)
    return mask, np.flatnonzero(mask)


def _tick(timings: dict[str, float], name: str, since: float) -> float:
    now = time.perf_counter()
    timings[name] = round((now - since) * 1000, 3)
    return now
