"""The sparse (BM25) side of retrieval, at query time: postings written once per segment
(``livemem.index.postings``), statistics taken per version.

Tokens are ``livemem.index.postings.tokens`` (what bm25s produces: lower-cased ``\\w\\w+`` words, English stopwords
removed, Snowball-stemmed), and scores are Lucene's BM25 as bm25s computes it (k1 = 1.2, b = 0.3: chosen on SciFact
train, see docs/serving.md; ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``,
``tfc = tf / (tf + k1 (1 - b + b dl / avgdl))``; a text with no token counts as one token, as in bm25s).

``mode: sparse`` scores a second field beside the chunk text: the chunk's heading path (``postings.heading_text``),
its BM25 added at ``HEADINGS_WEIGHT``. Its postings are derived from a segment's rows when first needed and kept per
segment (``livemem.engine.snapshot``), with the same per-version, per-access-level statistics.

A version is made of immutable segments (``livemem.version``): each holds the postings of its own chunks only
(``livemem.index.postings.Postings``: per term, the rows holding it and how often), written when the segment is written
and shared by every later version that keeps those chunks. The corpus statistics BM25 needs (number of documents,
average length, document frequency of each query term) are those of the *version*, not of a segment: they are computed
per query from the postings of the query's terms, over the chunks the version holds (its membership) **and the caller
may read**. A role is scored with the statistics of the access levels it searches only, so its scores never depend on
words of chunks it may not read (issue 12), and a change costs O(change): nothing global is rebuilt.

Hybrid's BM25 list scores every posting of the query's terms, exactly, then takes the best ``depth`` rows
(``best_rows``: the best allowed score of each block of 64 rows in one vectorised pass, whose ``depth``-th largest is
a floor; only the blocks reaching it are looked into). Over graphs (2M chunks: two 1M-row segments) the scoring is
cut into pieces (``SparseScorer.split``, ``Pieces``): a piece is every query term's postings of 262,144 segment rows
of one part, so pieces hold disjoint rows, give the same floats in any order on any thread, and zero their own rows
as they start. The walk thread takes them from the first once its walk is done, the request's thread from the last
while it waits (``livemem.index.work.SharedWork``): two busy threads on two cores, not three (a third thread woken
while both cores are busy waited for a time slice, and the walks and BM25 slowed each other ≈ 1.5×). A part holding
its segment's rows in order but a few dropped ones adds by runs between them, without a position per posting.
A pruned top k (MaxScore, windowed as in Lucene) was measured and not kept: on the cycled SciFact corpus with the
fusion's depth of 1,000 it took 7.2 ms against 1.3 ms exhaustive at 518k chunks (BM25 saturates, so the
non-essential terms' bounds leave most rows in the race and each costs lookups); see docs/approximate-search.md.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import partial
from typing import cast

import numba
import numpy as np

from livemem.index.postings import Postings, tokens
from livemem.index.work import SharedWork

# segment rows per piece of one query's BM25 (``SparseScorer.split``): a 1M-row segment is scored in 4 pieces, which
# the request's thread and the scan pool share (livemem.query.retrieval)
PIECE_ROWS = 262_144

# ``mode: sparse`` adds BM25 over each chunk's heading path (a second field, ``heading_text``) at this weight: a
# later chunk of a section is found by its section's title too. SciFact train nDCG@10 0.6905 -> 0.6942, better on
# both halves (docs/decisions/0003-dense-blend-and-heading-field.md). Hybrid's BM25 side is the chunk text alone: its dense side reads the
# headings already, and the field there cost hybrid 0.002-0.005.
HEADINGS_WEIGHT = 0.2
K1 = 1.2  # chosen on SciFact train (bench.serving_quality): chunks are capped in word pieces, so
B = 0.3  # length matters less than bm25s's defaults (1.5, 0.75) assume: BM25 0.6801 -> 0.6905, hybrid +0.013
_NOTHING = np.zeros(0, dtype=bool)
_NO_SCORES = np.zeros(1, dtype=np.float32)


def _unset(size: int) -> np.ndarray:
    """Scores to be written before they are read (``Pieces``: each piece zeroes its rows first)."""
    return np.empty(size, dtype=np.float32)


# BM25's inner loop, compiled (numba, the GIL released so BM25 runs beside the dense walks and scan threads): one
# pass per posting list instead of nine numpy passes over temporaries (gather the version rows, gather their length
# terms, four arithmetic operations, gather, add, scatter): 3.4-4.5 -> 0.8-1.5 ms at 500k chunks. The same float32
# operations in the same order as the numpy expression ``out[rows] += weight * (tf / (tf + constant + scaled[rows]))``
# (no fast-math: nothing is reassociated or fused), so the scores are the same floats.
@numba.njit(nogil=True, cache=True)
def _add_piece(
    out, rows, tf, firsts, ends, weights, lo, hi, base, dropped, positions, keep, scaled, constant
):  # pragma: no cover - compiled
    """Add every query term's postings of segment rows ``[lo, hi)`` of one part, term after term (a row's terms
    add in query order, whatever the pieces: the same floats). Term ``t``'s postings are ``rows[firsts[t]:ends[t]]``
    (ascending), weighing ``weights[t]``.

    Version rows: ``base`` ≥ 0 for a part holding its segment's rows in order but the ``dropped`` ones (ascending;
    none for an intact part): version row = segment row + ``base`` − the dropped rows before it, so each run of
    postings between two dropped rows adds at a fixed offset and a dropped row's posting is skipped (no position
    gathered per posting: BM25 of a 1M-row part that lost one file's rows took 1.4x an intact one's time that way);
    ``base`` < 0: ``positions[row]`` (the version row, or the thrown-away slot past the last row). ``keep`` (empty:
    every row) is the corpus: rows outside it score nothing."""
    kept = keep.size > 0
    if base >= 0:  # this piece's version rows start at zero here (Pieces allocates them unset): on its own thread
        out[lo + base - np.searchsorted(dropped, lo) : hi + base - np.searchsorted(dropped, hi)] = 0
    for t in range(firsts.size):
        a, b = firsts[t], ends[t]
        i = a + np.searchsorted(rows[a:b], lo)
        e = a + np.searchsorted(rows[a:b], hi)
        w = weights[t]
        if base < 0:
            for x in range(i, e):
                r = positions[rows[x]]
                if not kept or keep[r]:
                    v = tf[x]
                    out[r] += w * (v / (v + constant + scaled[r]))
            continue
        j = np.searchsorted(dropped, lo)  # the dropped rows before this piece
        while i < e:
            stop = e if j >= dropped.size or dropped[j] >= hi else i + np.searchsorted(rows[i:e], dropped[j])
            shift = base - j
            for x in range(i, stop):
                r = rows[x] + shift
                if not kept or keep[r]:
                    v = tf[x]
                    out[r] += w * (v / (v + constant + scaled[r]))
            i = stop
            if i < e and rows[i] == dropped[j]:
                i += 1
            j += 1


@numba.njit(nogil=True, cache=True)
def _count_kept(local, positions, keep):  # pragma: no cover - compiled
    n = 0
    for i in range(local.size):
        if keep[positions[local[i]]]:
            n += 1
    return n


@numba.njit(nogil=True, cache=True)
def _compact(top_rows, top_scores, count, k):  # pragma: no cover - compiled
    """Keep the best ``k`` of the first ``count`` (ties: the one added first, the lower row); return the count."""
    order = np.argsort(-top_scores[:count], kind="mergesort")  # stable: equal scores keep their (row) order
    keep = min(k, count)
    chosen_rows = top_rows[order[:keep]].copy()
    chosen_scores = top_scores[order[:keep]].copy()
    top_rows[:keep] = chosen_rows
    top_scores[:keep] = chosen_scores
    return keep


BLOCK = 64  # rows per block of ``best_rows``' first pass: the second looks inside the blocks whose best can enter


@numba.njit(nogil=True, cache=True)
def _block_best(bits, allowed, every, one):  # pragma: no cover - compiled
    """The largest of each ``BLOCK`` rows' scores where allowed, as bits (a non-negative float32 orders as its int32
    bits do, and an integer max vectorises where a float one needs fast-math): 0 for a block with none. ``one`` is
    1, passed in: LLVM vectorises the loop that multiplies by it (0.18 ms at 2M rows) and not the one without (1.0)."""
    n = bits.size
    full = n // BLOCK
    out = np.zeros((n + BLOCK - 1) // BLOCK, np.int32)
    for b in range(full):
        best = 0
        base = b * BLOCK
        if every:
            for j in range(BLOCK):
                value = np.int64(bits[base + j]) * one
                best = value if value > best else best
        else:
            for j in range(BLOCK):
                value = np.int64(bits[base + j]) * np.int64(allowed[base + j])
                best = value if value > best else best
        out[b] = best
    for r in range(full * BLOCK, n):  # the last, shorter block
        if (every or allowed[r]) and bits[r] > out[full]:
            out[full] = bits[r]
    return out


@numba.njit(nogil=True, cache=True)
def _best(scores, bits, block_best, allowed, every, k, floor):  # pragma: no cover - compiled
    """The ``k`` best rows scoring above 0 and at least ``floor`` (int32 bits; of ``allowed``, unless ``every``),
    best first, ties to the lower row (as ``livemem.index.scan.top_order``): rows are taken in order into a buffer
    of ``2k``, which keeps its best ``k`` when full; from then on a row must beat the ``k``-th kept (a row tying it
    comes later: it loses). A block whose best (``block_best``) is below ``floor`` or at most the ``k``-th kept
    holds no such row and is not looked into."""
    capacity = max(2 * k, 64)
    top_rows = np.empty(capacity, np.int64)
    top_scores = np.empty(capacity, np.float32)
    count = 0
    bar = np.int32(0)
    n = scores.size
    for b in range(block_best.size):
        most = block_best[b]
        if most < floor or most <= bar:
            continue
        for r in range(b * BLOCK, min(n, (b + 1) * BLOCK)):
            value = bits[r]
            if value >= floor and value > bar and (every or allowed[r]):
                top_rows[count] = r
                top_scores[count] = scores[r]
                count += 1
                if count == capacity:
                    count = _compact(top_rows, top_scores, count, k)
                    bar = bits[top_rows[k - 1]]
    count = _compact(top_rows, top_scores, count, k)
    return top_rows[:count].copy()


def best_rows(scores: np.ndarray, allowed: np.ndarray | None, k: int) -> np.ndarray:
    """``top_order`` of the rows scoring above 0 where ``allowed`` (None: everywhere) — the same rows, same order —
    in two compiled passes: the best allowed score of each block of ``BLOCK`` rows (one vectorised pass), whose
    ``k``-th largest is a floor at most the ``k``-th best score (k rows reach it); then only the blocks holding a
    row at or above the floor are looked into (≈ k of them). BM25 scores are never negative (``SparseScorer``:
    every weight and term is), so they order as their float32 bits."""
    if k <= 0 or not scores.size:
        return np.zeros(0, dtype=np.int64)
    scores = np.ascontiguousarray(scores, dtype=np.float32)
    every = allowed is None
    mask = _NOTHING if every else allowed
    bits = scores.view(np.int32)
    block_best = _block_best(bits, mask, every, 1)
    floor = np.int32(0)
    if block_best.size > k:
        floor = np.partition(block_best, block_best.size - k)[block_best.size - k]
    return _best(scores, bits, block_best, mask, every, k, floor)


def warm_up() -> None:
    """Compile (or load from numba's cache) BM25's loops now, not on a worker's first query."""
    one, rows, tf, keep = np.zeros(2, np.float32), np.zeros(1, np.int32), np.ones(1, np.float32), np.ones(2, bool)
    starts, none = np.zeros(1, np.int64), np.zeros(0, np.int32)
    for base, dropped, kept in ((0, none, _NOTHING), (0, rows, keep), (-1, none, keep)):
        _add_piece(one, rows, tf, starts, starts + 1, tf, 0, 1, base, dropped, rows, kept, one, np.float32(1))
    _count_kept(rows, rows, keep)
    best_rows(one, None, 1)
    best_rows(one, keep, 1)


@dataclass(frozen=True)
class QueryTerms:
    """A query's terms over one corpus (``SparseScorer.terms``): ``found[t, p]`` is term ``t``'s position in part
    ``p``'s terms (-1: none); BM25's length term of row ``r`` is ``scaled[r]`` (``per_length × length``)."""

    weights: np.ndarray  # float32, per term
    found: np.ndarray  # int64, terms × parts
    constant: np.float32
    scaled: np.ndarray
    keep: np.ndarray | None  # the corpus (one slot more: the dropped rows'), None: every row


class SparseScorer:
    """BM25 over a version made of segments. ``parts`` are (postings, positions) pairs: ``positions[r]`` is the
    version row of segment row ``r`` (-1 when the version no longer holds it); ``size`` is the number of rows of the
    version. ``scores(query, corpus)`` scores every row with the statistics of the rows in ``corpus`` (a boolean
    mask: the rows of the access levels searched) and is zero outside it."""

    def __init__(self, parts: Sequence[tuple[Postings, np.ndarray]], size: int) -> None:
        # positions as int32 (half the bytes gathered per posting), and whether a part has rows the version dropped
        # a row the version dropped points at one slot past the version's rows (``size``): scored there and thrown
        # away, which costs less than filtering every posting list of a part with holes
        self.parts = [
            (postings, np.where(positions < 0, size, positions).astype(np.int32), bool((positions < 0).any()))
            for postings, positions in parts
        ]
        self.size = size
        self.lengths = np.zeros(size, dtype=np.float32)
        for postings, positions in parts:
            live = positions >= 0
            self.lengths[positions[live]] = postings.lengths[live]
        self._live = np.append(np.ones(size, dtype=bool), False)  # every row, not the dropped-row slot
        self._stats: dict[bytes, tuple[int, float, bool]] = {}
        self._scaled: dict[float, np.ndarray] = {}
        self._dropped_rows: dict[int, np.ndarray] = {}
        # how a part's segment rows become version rows (``_add_piece``): (its first version row, the rows it dropped)
        # for a part holding its segment's rows in order but the dropped ones (none: an intact part, whose postings
        # add at a fixed offset); (-1, none) for any other order (a position gathered per posting)
        self._layout: list[tuple[int, np.ndarray]] = []
        for p, (_, positions, holes) in enumerate(self.parts):
            held = positions[positions < size]
            in_order = held.size and np.array_equal(held, np.arange(held[0], held[0] + held.size))
            dropped = self._dropped(p) if holes else np.zeros(0, dtype=np.int32)
            self._layout.append((int(held[0]), dropped) if in_order else (-1, np.zeros(0, dtype=np.int32)))

    def corpus_stats(self, corpus: np.ndarray) -> tuple[int, float, bool]:
        """Number of rows in ``corpus``, their mean length, and whether the corpus is every row."""
        key = np.packbits(corpus).tobytes()
        found = self._stats.get(key)
        if found is None:
            n = int(corpus.sum())
            found = (n, float(self.lengths[corpus].mean(dtype=np.float64)) if n else 1.0, n == self.size)
            if len(self._stats) < 64:
                self._stats[key] = found
        return found

    def _scaled_lengths(self, per_length: np.float32) -> np.ndarray:
        """``per_length × lengths`` (float32, as BM25's length term multiplies them), with a 0 for the dropped-row
        slot; kept for a few corpora (one per access scope searched)."""
        found = self._scaled.get(float(per_length))
        if found is None:
            found = np.append(per_length * self.lengths, np.float32(0))
            if len(self._scaled) < 8:
                self._scaled[float(per_length)] = found
        return found

    def terms(
        self,
        query: str,
        corpus: np.ndarray,
        dfs: dict[str, int] | None = None,
        stats: tuple[int, float, bool] | None = None,
    ) -> QueryTerms | None:
        """The query's terms that some row of ``corpus`` holds, in query order, with their weights (``repeats ×
        idf`` over the corpus) and their postings in each part; None when no row can score. ``dfs``: remembered
        document frequencies of terms over this corpus, ``stats``: its ``corpus_stats`` (a caller keeping one corpus
        keeps both; ``dfs`` is bounded here)."""
        n, avgdl, everything = stats or self.corpus_stats(corpus)
        if not n:
            return None
        keep = None if everything else np.append(corpus, False)
        weights: list[np.float32] = []
        found: list[list[int]] = []  # per term, its position in each part's terms (-1: none)
        for term, repeats in Counter(tokens(query)).items():
            where = [postings.index(term) for postings, _, _ in self.parts]
            df = None if dfs is None else dfs.get(term)
            if df is None:
                df = sum(self._df(p, i, keep) for p, i in enumerate(where) if i >= 0)
                if dfs is not None:
                    if len(dfs) >= 100_000:
                        dfs.clear()
                    dfs[term] = df
            if not df:
                continue
            weights.append(np.float32(repeats * np.log(1.0 + (n - df + 0.5) / (df + 0.5))))
            found.append(where)
        if not weights:
            return None
        per_length = np.float32(K1 * B / avgdl)
        return QueryTerms(
            np.array(weights, dtype=np.float32),
            np.array(found, dtype=np.int64).reshape(len(weights), len(self.parts)),
            np.float32(K1 * (1.0 - B)),
            self._scaled_lengths(per_length),
            keep,
        )

    def _df(self, part: int, index: int, keep: np.ndarray | None) -> int:
        """How many rows of ``keep`` (None: every row the version holds) hold term ``index`` of ``part``."""
        postings, positions, holes = self.parts[part]
        a, b = postings.starts[index], postings.starts[index + 1]
        local = postings.rows[a:b]
        if keep is not None:
            return int(_count_kept(local, positions, keep))
        if not holes:
            return int(local.size)
        dropped = self._dropped(part)
        if dropped.size * 16 < local.size:  # a few rows dropped: look each up rather than test every posting
            at = np.searchsorted(local, dropped)
            inside = at < local.size
            return int(local.size - np.count_nonzero(local[at[inside]] == dropped[inside]))
        return int(_count_kept(local, positions, self._live))

    def _dropped(self, part: int) -> np.ndarray:
        """The rows of a part the version no longer holds (ascending; computed once)."""
        found = self._dropped_rows.get(part)
        if found is None:
            found = self._dropped_rows[part] = np.flatnonzero(self.parts[part][1] == self.size).astype(np.int32)
        return found

    def ranked(
        self,
        query: str,
        corpus: np.ndarray,
        allowed: np.ndarray | None,
        k: int,
        dfs: dict[str, int] | None = None,
        stats: tuple[int, float, bool] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every row's BM25 (``scores``) and the best ``k`` rows of ``allowed`` (a mask over the version's rows; None:
        every row) scoring above 0, best first, ties to the lower row: exactly ``top_order`` over the scores kept
        where ``allowed`` — found in one compiled pass (``_best``), on the thread that scored them."""
        scores = self.scores(query, corpus, dfs, stats)
        return best_rows(scores, allowed, k), scores

    def scores(
        self,
        query: str,
        corpus: np.ndarray,
        dfs: dict[str, int] | None = None,
        stats: tuple[int, float, bool] | None = None,
    ) -> np.ndarray:
        """BM25 of every row for ``query`` (float32; zero outside ``corpus``): ``split`` into one piece per part,
        scored on this thread."""
        pieces = self.split(query, corpus, dfs, stats, piece_rows=max([p.size for p, _, _ in self.parts] or [1]))
        pieces.ranked(None, 0)
        return pieces.scores

    def split(
        self,
        query: str,
        corpus: np.ndarray,
        dfs: dict[str, int] | None = None,
        stats: tuple[int, float, bool] | None = None,
        piece_rows: int | None = None,
    ) -> Pieces:
        """BM25 of ``query`` to be scored in pieces of at most ``piece_rows`` segment rows of a part (None:
        ``PIECE_ROWS``), by any threads at once (``Pieces``). Its terms are found, and its scores allocated, when
        the pieces are first wanted (``submit``, ``help``, ``ranked``): after the other walks were handed out."""
        return Pieces(self, (query, corpus, dfs, stats), piece_rows or PIECE_ROWS)


class Pieces:
    """One query's BM25 over a version, in pieces: each is the segment rows ``[lo, hi)`` of one part, every query
    term's postings there (``_add_piece``). Pieces hold disjoint version rows, so threads score them into the one
    array at once, and a row's terms add in query order within its piece: the same floats however the pieces are
    cut and whichever thread scores them. The pieces are jobs of a ``SharedWork`` (``work``): ``submit`` hands them
    to a pool, ``help`` scores one on the calling thread, ``ranked`` scores what is left, waits for the rest and
    finds the best rows. Other jobs of the request may join them (``work.add``)."""

    def __init__(self, scorer: SparseScorer, query: tuple, piece_rows: int) -> None:
        self.scorer = scorer
        self.work = SharedWork()
        self.q: QueryTerms | None = None
        self.out = _NO_SCORES
        self.pieces: list[tuple[int, int, int]] = []  # (part, lo, hi)
        self._terms: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # part -> firsts, ends, weights
        self._query = query
        self._piece_rows = piece_rows
        self._lock = threading.Lock()
        self._ready = False
        self._pool: Executor | None = None  # where ``submit`` hands the pieces (once they are found)
        self._preparing = False  # a pool finds them (``prepare_on``)

    def _prepare(self) -> None:
        """Find the query's terms, allocate the scores and add the pieces to ``work`` (once)."""
        with self._lock:
            if self._ready:
                return
            scorer = self.scorer
            self.q = q = scorer.terms(*self._query)
            # the scores are allocated unset: each piece of a part in segment order zeroes its own rows as it starts
            # (8 MB at 2M rows: a memset of 0.6 ms on the request's thread otherwise); the rest is zeroed here
            in_order = all(base >= 0 for base, _ in scorer._layout)
            self.out = _unset(scorer.size + 1) if in_order else np.zeros(scorer.size + 1, np.float32)
            self.out[scorer.size] = 0
            for part, (postings, _, _) in enumerate(scorer.parts):
                held = np.zeros(0, dtype=bool) if q is None else q.found[:, part] >= 0
                if q is None or not held.any():
                    if in_order:  # no piece: its rows (its segment's, but the dropped ones) score 0
                        base, dropped = scorer._layout[part]
                        self.out[base : base + postings.size - dropped.size] = 0
                    continue
                found = q.found[held, part]
                self._terms[part] = (postings.starts[found], postings.starts[found + 1], q.weights[held])
                step = max(1, self._piece_rows)
                self.pieces += [(part, lo, min(lo + step, postings.size)) for lo in range(0, postings.size, step)]
            for i in range(len(self.pieces)):
                self.work.add(partial(self.run, i))
            self._ready = True
            pool = self._pool
        self.work.submit(pool)  # when ``submit`` came first

    @property
    def scores(self) -> np.ndarray:
        """Every row's BM25 (what the pieces scored so far: all of them after ``ranked``)."""
        return self.out[: self.scorer.size]

    def run(self, i: int) -> None:
        """Score piece ``i``."""
        part, lo, hi = self.pieces[i]
        postings, positions, _ = self.scorer.parts[part]
        base, dropped = self.scorer._layout[part]
        firsts, ends, weights = self._terms[part]
        q = cast(QueryTerms, self.q)  # set by ``_prepare``, which found the pieces
        keep = _NOTHING if q.keep is None else q.keep
        _add_piece(self.out, postings.rows, postings.tf, firsts, ends, weights, lo, hi, base, dropped, positions,
                   keep, q.scaled, q.constant)  # fmt: skip

    def prepare_on(self, pool: Executor | None) -> Pieces:
        """Find the pieces on ``pool`` (the query's terms, its scores allocated: ≈ 0.5 ms of Python at 2M chunks,
        beside the walks instead of before this thread's); None: when first wanted."""
        if pool is not None:
            self._preparing = True
            pool.submit(self._prepare)
        return self

    def submit(self, pool: Executor | None) -> Pieces:
        """Hand every piece to ``pool`` (once; None: no pool, ``ranked`` scores them all here): found here first,
        unless a pool finds them (``prepare_on``: then handed out as soon as they are)."""
        with self._lock:
            self._pool = self._pool or pool
            ready, preparing = self._ready, self._preparing
        if ready:
            self.work.submit(pool)
        elif not preparing:
            self._prepare()
        return self

    def help(self) -> bool:
        """Score (or run) the last job of ``work`` no thread has started, here; False when none is left."""
        self._prepare()
        return self.work.help()

    def ranked(self, allowed: np.ndarray | None, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``SparseScorer.ranked``: the best ``k`` rows of ``allowed`` (None: every row) scoring above 0, best first,
        ties to the lower row, and every row's BM25 — once every piece is scored (those not started, here)."""
        self._prepare()
        self.work.finish()
        return best_rows(self.scores, allowed, k), self.scores
