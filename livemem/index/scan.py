"""The exact two-stage top-k over a snapshot's rows (``DenseScan``), and the segments packed for its first stage.

**Top-k in two stages**: a first stage scores every row cheaply (``livemem.index.kernels.first_stage_kernel``),
with a proven error bound (``livemem.index.bounds.error_bound``); every row whose first-stage score could still
reach the top k is then scored exactly. The result is identical to ranking the exact scores of every row.

- selection: if the k rows with the best lower bounds (score − bound) have lower bounds ≥ ``L``, the k-th best
  exact score is ≥ ``L``, so every row of the true top k (ties included) has an upper bound ≥ ``L``: those rows
  are the candidates, scored exactly, and the top k of them is the top k of all. A weight per row (recency,
  attention: ``candidates(k, weight)``) scales both bounds.

Ties are broken by row (``top_order``), so the top k is one well-defined set however it is found.

**Segments with a graph** (``livemem.index.ann``: large segments, ``EngineConfig.ann`` "auto") are not scanned:
their graph gives ``max(C, min(4·k', k' + C))`` candidates (``C``: ``EngineConfig.ann_candidates``), ``k'`` the part's share of the
top k by its allowed rows (more when a filter or the version's deletions keep a fraction of the segment's rows, or
when the part holds more than its share), scored exactly; the segments without one go through the two stages above, and the
top k is taken over both. Scores stay exact; which rows are candidates is approximate (recall of the final top 10
against exact search: ``bench/results/ann.md``, ``bench/results/scale*.md``). With a weight per row, a graph is asked
for more until its lowest candidate score, at the highest weight of its rows, cannot reach the k-th best weighted
score found (``_graph_candidates``).

A segment's vectors are packed for the kernel once per process (``packed``: the int8 codes the serving copies hold
when registered with ``share_int8``, else a private copy) and dropped with the segment's array.

**Settings**: a scan reads the ``EngineConfig`` of the rows it is given (``DenseRows.config``: the kernel tried first,
the scan's threads, the ANN mode, candidates and breadth), never a module global, so two snapshots of one process
may search under different ones. The scan's thread pool is one per process and thread count (``scan_pool``).
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np

from livemem.index.bounds import F16_MAX, INT8_MAX_NORM, INT8_RHO, SLACK, error_bound, int8_terms, max_row_norm
from livemem.index.kernels import Int8Codes, Kernel, gathered_scores
from livemem.settings import EngineConfig


class ScanRows(Protocol):
    """What a scan reads of the rows it is given (``livemem.index.dense.DenseRows``): their parts and graphs, the
    engine config, and where each part's rows sit among the snapshot's."""

    config: EngineConfig
    parts: list[tuple[np.ndarray, np.ndarray]]
    graphs: list
    offsets: np.ndarray
    shape: tuple[int, int]
    size: int

    @property
    def walks(self) -> bool: ...

    def by_part(self, rows: np.ndarray) -> Any: ...

    def kernel(self) -> Kernel | None: ...

    def scan_pool(self) -> ThreadPoolExecutor | None: ...

    def inverse(self, part: int) -> np.ndarray: ...

    def block_rows(self, part: int, start: int, end: int) -> tuple[int, int, np.ndarray | bool]: ...

    def scores(self, vector: np.ndarray, rows: np.ndarray) -> np.ndarray: ...


class Beside(Protocol):
    """Work a request does beside its dense walks (``livemem.index.sparse.Pieces``): handed to a pool, and taken up
    one step at a time by a thread that would otherwise wait."""

    def submit(self, pool: Executor | None) -> Any: ...

    def help(self) -> bool: ...


def top_order(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` highest scores, best first; ties go to the lower position (NaN ranks last).

    The tie rule holds for which positions are chosen too, not only for their order, so a top k found over a
    subset that holds every position scoring at least the k-th best is the same as the top k over all."""
    n = scores.size
    if k <= 0 or n == 0:
        return np.zeros(0, dtype=np.int64)
    if k >= n:
        return np.argsort(-scores, kind="stable")
    key = -scores
    if k * 64 <= n:
        # a partition of every score costs several times a strided sample's partition and one comparison: guess a
        # bound from the sample, keep the positions within it (all of the top k when there are k of them)
        sample = key[::16]
        rank = -(-k * 5 // 64)  # ≈ the (1.25·k)-th best of all
        guess = np.partition(sample, rank - 1)[rank - 1]
        if not np.isnan(guess):
            within = np.flatnonzero(key <= guess)
            if k <= within.size <= n // 4:  # the k-th best is within: so is every position scoring at least it
                return within[top_order(scores[within], k)]
    kth = np.partition(key, k - 1)[k - 1]
    if np.isnan(kth):  # fewer than k numbers: all of them, then the first NaNs
        nan = np.isnan(key)
        pick = np.concatenate([np.flatnonzero(~nan), np.flatnonzero(nan)])[:k]
    else:
        better = np.flatnonzero(key < kth)
        pick = np.concatenate([better, np.flatnonzero(key == kth)[: k - better.size]])
    return pick[np.lexsort((pick, key[pick]))]


# The first stage reads every vector once per query: at 500k rows 192 MB of int8 codes, bound by memory bandwidth more
# than arithmetic. On large snapshots the blocks are scanned on ``EngineConfig.scan_threads`` background threads
# (simsimd and torch release the GIL) while the caller scores BM25 on its own thread, then the caller scans the blocks
# no thread has started (``DenseScan._settle``). Default (``livemem.settings.default_scan_threads``): one thread fewer
# than the cores, at most one (two on 2 cores would hold three threads on two cores while BM25 runs); small snapshots
# scan on the calling thread (a hand-off costs more than it saves). ``LIVEMEM_SCAN_THREADS=0`` scans on the calling
# thread always.
SCAN_BLOCK_ROWS = 65_536
PARALLEL_MIN_ROWS = 100_000


# Approximate first stage (``EngineConfig.ann``: "auto" uses the graphs segments have, "exact" scans every row;
# ``ann_candidates``: the candidates a graph gives at least; ``ann_breadth``: the rows a walk keeps in view). A graph
# part with at most ``GRAPH_EXACT_ROWS`` allowed rows, or whose filter would need more than ``GRAPH_MAX_COUNT``
# candidates or a walk costlier than the rows themselves (``WALK_COST``), is scored exactly over its allowed rows.
GRAPH_EXACT_ROWS = 20_000
GRAPH_MAX_COUNT = 20_000
# A walk for ``count`` candidates reads about WALK_COST times as much as scoring ``count`` rows exactly (each step
# compares a row's ~32 neighbours, int8): a filter keeping fewer rows than that is scored exactly over them (GBIM at
# 1M: a 0.5° bbox keeps ≈ 32k entities and would walk 12.6k candidates: 36 ms against ≈ 5 ms exactly).
WALK_COST = 8


_POOLS: dict[tuple[str, int], ThreadPoolExecutor] = {}
_POOL_LOCK = threading.Lock()


def _shared_pool(name: str, threads: int) -> ThreadPoolExecutor | None:
    """The process's one pool called ``name`` with ``threads`` threads (made at the first call); None for none."""
    if threads <= 0:
        return None
    with _POOL_LOCK:
        if (name, threads) not in _POOLS:
            _POOLS[name, threads] = ThreadPoolExecutor(threads, thread_name_prefix=name)
        return _POOLS[name, threads]


def scan_pool(threads: int) -> ThreadPoolExecutor | None:
    """The background threads of the dense scan (``EngineConfig.scan_threads``; None for 0): one pool per process
    and thread count, shared by every snapshot configured with it (``DenseRows.scan_pool``); the retriever also
    scores BM25 on it while the request's thread encodes the query."""
    return _shared_pool("dense-scan", threads)


def walk_pool() -> ThreadPoolExecutor | None:
    """Threads that walk the graphs of a version's other graph parts while the request's thread walks the first
    (a version that grew holds several large segments, one graph each; usearch releases the GIL while it walks):
    one thread fewer than the cores, at most three; None on one core."""
    return _shared_pool("graph-walk", min(4, os.cpu_count() or 1) - 1)


@dataclass(frozen=True)
class Packed:
    """A segment's vectors packed for the first stage, with what the error bound (``livemem.index.bounds``) needs."""

    kernel: Kernel
    blocks: list[tuple[int, int, Any]]  # (first row, end row, the kernel's packed vectors of those rows)
    max_norm: float  # an upper bound of the largest row L2 norm (of the float32 vectors), inf when not usable
    usable: bool  # finite and small enough for the kernel
    error: float = 0.0  # int8: the largest ‖v − v̂‖ of the segment's rows
    max_hat: float = 0.0  # int8: the largest ‖v̂‖
    row_error: np.ndarray | None = None  # int8: each row's ‖v − v̂‖ (rounded up), for per-row bounds


_PACKED: dict[tuple[int, str], tuple[weakref.ref, Packed]] = {}
_PACKED_LOCK = threading.Lock()


# The int8 codes of a segment's vectors that the serving copies map (so every worker shares them), registered per
# array: id(dense) -> (a weak reference to dense, the codes, max_row_norm(dense)).
_SHARED: dict[int, tuple[weakref.ref, Int8Codes, float]] = {}


def _shared(dense: np.ndarray) -> tuple[Int8Codes, float] | None:
    with _PACKED_LOCK:
        found = _SHARED.get(id(dense))
    return (found[1], found[2]) if found is not None and found[0]() is dense else None


def _forget_shared(key: int) -> None:
    with _PACKED_LOCK:
        found = _SHARED.get(key)
        if found is not None and found[0]() is None:
            del _SHARED[key]


def share_int8(dense: np.ndarray, codes: Int8Codes, max_norm: float) -> None:
    """Register ``quantize_int8(dense)`` (as the serving copies hold it) and ``max_row_norm(dense)``: the int8
    kernel scans it in place instead of quantizing a private copy."""
    if codes.codes.shape != dense.shape or codes.codes.dtype != np.int8 or codes.scales.shape != dense.shape[:1]:
        raise ValueError(
            f"int8 codes of shape {dense.shape} were expected, got {codes.codes.dtype} {codes.codes.shape}"
        )
    key = id(dense)
    with _PACKED_LOCK:
        if key not in _SHARED or _SHARED[key][0]() is not dense:
            weakref.finalize(dense, _forget_shared, key)
        _SHARED[key] = (weakref.ref(dense), codes, max_norm)


def packed(dense: np.ndarray, kernel: Kernel) -> Packed:
    """A segment's vectors packed for ``kernel``, once per array per process (segments are shared by snapshots,
    and so are their packed copies); dropped when the array is."""
    key = (id(dense), kernel.name)
    with _PACKED_LOCK:
        cached = _PACKED.get(key)
        if cached is not None and cached[0]() is dense:
            return cached[1]
    shared = _shared(dense) if kernel.reads_int8 else None
    max_norm = shared[1] if shared is not None else max_row_norm(dense)
    usable = max_norm < (INT8_MAX_NORM if kernel.reads_int8 else F16_MAX) and dense.shape[0] > 0
    blocks = []
    error = max_hat = 0.0
    row_error = None
    if usable and kernel.reads_int8:
        codes = shared[0] if shared is not None else kernel.pack(dense)
        error, max_hat, row_error = codes.error, codes.max_hat, codes.row_error
        blocks = [(a, min(a + SCAN_BLOCK_ROWS, dense.shape[0]), codes.rows(a, a + SCAN_BLOCK_ROWS))
                  for a in range(0, dense.shape[0], SCAN_BLOCK_ROWS)]  # fmt: skip
    for start in range(0, dense.shape[0], SCAN_BLOCK_ROWS) if usable and not kernel.reads_int8 else ():
        end = min(start + SCAN_BLOCK_ROWS, dense.shape[0])
        blocks.append((start, end, kernel.pack(np.ascontiguousarray(dense[start:end], np.float32))))
    result = Packed(kernel, blocks, max_norm, usable, error, max_hat, row_error)
    with _PACKED_LOCK:
        if key not in _PACKED or _PACKED[key][0]() is not dense:
            weakref.finalize(dense, _forget, key)  # the packed copy goes with the segment's vectors
        _PACKED[key] = (weakref.ref(dense), result)
    return result


def _forget(key: tuple[int, str]) -> None:
    with _PACKED_LOCK:
        cached = _PACKED.get(key)
        if cached is not None and cached[0]() is None:
            del _PACKED[key]


# Below this many allowed rows per row of the snapshot, scoring the allowed rows exactly costs less than the first
# stage, which reads every row of every segment (measured with the float16 scan: a row gathered and scored exactly
# costs about 15 of its rows, and it also rescores about k rows).
EXACT_SHARE = 0.05


def _scan_block(kernel: Kernel, query: Any, block: Any, out: np.ndarray | None, local: np.ndarray | None) -> np.ndarray:
    """One block's first-stage scores, written into ``out`` (the snapshot's rows of the block; ``local``: which
    rows of the block those are, when the snapshot does not hold them all); ``out`` None: returned whole."""
    if out is None:
        return kernel.product(block, query)
    if local is None:
        product = kernel.product(block, query, out)
        if product is not out:
            out[:] = product
    else:
        np.take(kernel.product(block, query), local, out=out)
    return out


class DenseScan:
    """One query over a snapshot's allowed rows: the first-stage scores of every row (when the bound allows them),
    and the exact scores of the rows scored so far."""

    def __init__(
        self, dense: ScanRows, query: np.ndarray, mask: np.ndarray | None, allowed: np.ndarray | None = None
    ) -> None:
        self.dense = dense
        self.query = query
        self.mask = mask
        if allowed is None:
            allowed = np.arange(dense.size) if mask is None else np.flatnonzero(mask)
        self.allowed = allowed
        # parts answered by their graph (livemem.index.ann), and the allowed rows of the others (``rest``)
        self._graph_parts = _graph_parts(dense, query) if allowed.size else []
        self.rest = allowed
        if self._graph_parts:  # the allowed rows between the graph parts' (ascending: slices, not a mask of all)
            pieces, start = [], 0
            for p in sorted(self._graph_parts):
                a, b = self._allowed_range(p)
                pieces.append(allowed[start:a])
                start = b
            pieces.append(allowed[start:])
            self.rest = np.concatenate(pieces)
        self._approx: np.ndarray | None = None  # first-stage scores (float32), -inf where not allowed
        self._pending: tuple | None = None  # blocks being scanned on the pool (``_settle``)
        self.bound: tuple[float, float] = (math.inf, 0.0)  # |approx − exact| ≤ b0 + rho·|approx|
        self._row_bounds: tuple[list[Packed], float, float] | None = None  # int8: (parts, ‖q‖, rest): int8_terms
        self.exact = np.empty(dense.size, dtype=np.float32)  # exact scores computed so far (where ``known``)
        self.known = np.zeros(dense.size, dtype=bool)
        scanned = dense.size - sum(int(dense.parts[p][1].size) for p in self._graph_parts)
        # beside graph parts, a few rows scanned are scored exactly (a first stage would still cost a pass per part)
        few = bool(self._graph_parts) and self.rest.size <= GRAPH_EXACT_ROWS
        if self.rest.size and self.rest.size > EXACT_SHARE * scanned and not few:
            self._first_stage()

    def _allowed_range(self, part: int) -> tuple[int, int]:
        """Where the allowed rows of ``part`` are in ``allowed`` (ascending): ``allowed[a:b]``."""
        start, end = self.dense.offsets[part], self.dense.offsets[part + 1]
        a, b = np.searchsorted(self.allowed, [start, end])
        return int(a), int(b)

    def _first_stage(self) -> None:
        kernel = self.dense.kernel()
        if kernel is None or not np.all(np.isfinite(self.query)):
            return
        parts = [packed(dense, kernel) for dense, _ in self.dense.parts]
        if not all(p.usable for p in parts):
            return
        query = kernel.prepare(self.query)
        bound = error_bound(kernel, self.query, parts, query)
        if bound is None:
            return
        self.bound = bound
        if kernel.reads_int8 and all(p.row_error is not None for p in parts):  # a bound per row, for candidates
            self._row_bounds = (parts, *int8_terms(kernel, self.query, parts, query))
        approx = np.empty(self.dense.size, dtype=np.float32)
        for p in self._graph_parts:  # answered by their graph: never first-stage candidates
            approx[self.dense.offsets[p] : self.dense.offsets[p + 1]] = -np.inf
        # (part, packed block, where its scores go: a slice of approx, or None: picked from the whole part later;
        # the block's rows the snapshot holds when it does not hold them all)
        jobs: list[tuple[int, Any, np.ndarray | None, np.ndarray | None]] = []
        for p, part in enumerate(parts):
            for a, b, block in part.blocks if p not in self._graph_parts else ():
                first, end, local = self.dense.block_rows(p, a, b)
                out = None if local is False else approx[self.dense.offsets[p] + first : self.dense.offsets[p] + end]
                jobs.append((p, block, out, None if local is False or local is True else local))
        pool = self.dense.scan_pool() if self.dense.size >= PARALLEL_MIN_ROWS and len(jobs) > 1 else None
        if pool is None:
            self._assemble(parts, jobs, [_scan_block(kernel, query, *job[1:]) for job in jobs], approx)
        else:  # the blocks are scanned on the pool while the caller goes on (BM25): ``_settle`` collects them
            futures = [pool.submit(_scan_block, kernel, query, *job[1:]) for job in jobs]
            self._pending = (parts, jobs, futures, approx, kernel, query)

    @property
    def approx(self) -> np.ndarray | None:
        """The first stage's scores (float32, -inf where not allowed); None: not run."""
        self._settle()
        return self._approx

    def _settle(self) -> None:
        """Collect the first stage's blocks scanned on the pool, if any. The caller, done with BM25, scans the
        blocks no pool thread has started yet itself (from the last one back, while the pool works from the
        first): every core scans, and no thread waits on the pool while its cores hold BM25 (issue 13)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            parts, jobs, futures, approx, kernel, query = pending
            products: list[np.ndarray | None] = [None] * len(jobs)
            for i in range(len(jobs) - 1, -1, -1):
                if futures[i].cancel():  # not started: scanned here
                    products[i] = _scan_block(kernel, query, *jobs[i][1:])
            scanned = [f.result() if product is None else product for f, product in zip(futures, products, strict=True)]
            self._assemble(parts, jobs, scanned, approx)

    def _assemble(self, parts: list[Packed], jobs: list, products: list[np.ndarray], approx: np.ndarray) -> None:
        scored: list[list[np.ndarray]] = [[] for _ in parts]
        for (p, _, out, _), product in zip(jobs, products, strict=True):
            if out is None:  # a part whose rows are not in segment order: picked below
                scored[p].append(product)
        for (_, rows), pieces, start in zip(self.dense.parts, scored, self.dense.offsets, strict=False):
            if pieces:
                whole = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
                approx[start : start + rows.size] = whole[rows]
        if self.allowed.size < self.dense.size:
            approx[~cast(np.ndarray, self.mask)] = -np.inf  # fewer allowed rows than all: a mask
        self._approx = approx

    def scores(self, rows: np.ndarray) -> np.ndarray:
        """The exact scores of snapshot ``rows`` (computed once per scan)."""
        return self._exact(np.asarray(rows, dtype=np.int64))

    def _exact(self, rows: np.ndarray) -> np.ndarray:
        todo = rows[~self.known[rows]]
        if todo.size:
            self.exact[todo] = self.dense.scores(self.query, todo)
            self.known[todo] = True
        return self.exact[rows]

    def candidates(
        self, k: int, weight: np.ndarray | None = None, beside: Beside | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Allowed rows (ascending) among which are all the ``k`` best by ``score × weight`` (``weight``: one
        finite, non-negative number per snapshot row, None for 1), ties included, with their exact scores. Over
        segments with a graph, "all" holds as far as the graph finds the best rows (module docstring).

        ``beside``: other work of the request (hybrid's BM25 pieces, ``livemem.index.sparse.Pieces``), handed to the
        walk threads once the graphs' walks are (so they walk first) and done on this thread while it waits for
        them: two cores hold two busy threads, not three."""
        k = min(k, self.allowed.size)
        if k <= 0:
            return self.allowed[:0], np.zeros(0, dtype=np.float32)
        if weight is not None and not _plain(weight):
            return self.allowed, self._exact(self.allowed)
        if not self._graph_parts:
            return self._scanned(k, weight, self.allowed)
        rows, _ = self._scanned(min(k, self.rest.size), weight, self.rest)
        return self._graph_candidates(k, weight, rows, beside)

    def _graph_candidates(
        self, k: int, weight: np.ndarray | None, scanned: np.ndarray, beside: Beside | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The candidates of the parts with a graph, with ``scanned`` (those of the others), ascending, with their
        exact scores. Each graph part gives ``count`` candidates (``need`` below, for its share of k, over the fraction
        of its rows allowed); while the lowest score a part gave, at its rows' highest weight, could still reach the
        k-th best weighted score of all candidates, that part is asked for four times as many."""
        # at least ``ann_candidates`` (the top 10 a user reads), 4k for a deeper ranking, and k plus ``ann_candidates``
        # for a deep one (hybrid fusion asks for 1000): a miss near its end moves no answer a user reads
        # (bench/scale.py measures the final top 10)
        margin = self.dense.config.ann_candidates
        found: dict[int, tuple[np.ndarray, float | None]] = {}  # part -> (its allowed candidates, lowest score given)
        counts: dict[int, int] = {}
        for p in self._graph_parts:
            a, b = self._allowed_range(p)
            # the part's share of the top k, in proportion to its allowed rows (a memory written as two segments of
            # 1M walks each for about half of a deep list); a part holding more than its share is asked again below
            k_part = min(k, -(-k * (b - a) // max(1, self.allowed.size)))
            need = max(margin, min(4 * k_part, k_part + margin))
            segment_rows = self.dense.parts[p][0].shape[0]
            count = min(segment_rows, -(-need * segment_rows // max(1, b - a)))
            if b - a <= max(GRAPH_EXACT_ROWS, need, WALK_COST * count) or count > GRAPH_MAX_COUNT:
                found[p] = (self.allowed[a:b], None)  # every allowed row of the part, exactly: cheaper here
            else:
                counts[p] = count
        fetched: dict[int, int] = {}
        while True:
            todo = [(p, count) for p, count in counts.items() if fetched.get(p) != count]
            pool = walk_pool() if len(todo) > 1 else None
            # the other parts' walks on the walk threads while this thread walks the first (disjoint rows written)
            walking = [(p, count, pool.submit(self._from_graph, p, count)) for p, count in todo[1:]] if pool else []
            if beside is not None:  # after the other walks: the walk threads take it up when their walk is done
                beside.submit(walk_pool())
            for p, count in todo[: 1 if pool else None]:
                found[p], fetched[p] = self._from_graph(p, count), count
            for p, count, walk in walking:
                while beside is not None and not walk.done() and beside.help():
                    pass  # this thread's walk is done and another is not: it takes up the other work meanwhile
                found[p], fetched[p] = walk.result(), count
            rows = np.unique(np.concatenate([scanned, *(r for r, _ in found.values())]))
            scores = self._exact(rows)
            weighted = scores.astype(np.float64) if weight is None else scores * weight[rows]
            kth = float(np.partition(weighted, weighted.size - k)[weighted.size - k]) if weighted.size >= k else -np.inf
            short = [p for p in counts if (low := found[p][1]) is not None and self._may_miss(p, low, weight, kth)]
            if not short:
                return rows, scores
            for p in short:
                if counts[p] * 4 > GRAPH_MAX_COUNT or counts[p] >= self.dense.parts[p][0].shape[0]:
                    # the graph is no help here (or walked all it reaches): every allowed row, exactly
                    a, b = self._allowed_range(p)
                    found[p] = (self.allowed[a:b], None)
                    del counts[p]
                else:
                    counts[p] *= 4

    def _from_graph(self, part: int, count: int) -> tuple[np.ndarray, float | None]:
        """The allowed snapshot rows among the ``count`` candidates ``part``'s graph gives, and the lowest exact
        score of those candidates (allowed or not; None: the graph gave every row of its segment)."""
        vectors, _ = self.dense.parts[part]
        keys = self.dense.graphs[part].search(self.query, count, self.dense.config.ann_breadth)
        if keys.size == 0:
            return keys, None
        exact = gathered_scores(vectors, keys, self.query)
        position = self.dense.inverse(part)[keys]
        held = position >= 0
        rows = self.dense.offsets[part] + position[held]
        if rows.size:
            self.exact[rows] = exact[held]
            self.known[rows] = True
        if self.mask is not None:
            rows = rows[self.mask[rows]]
        lowest = None if keys.size >= vectors.shape[0] else float(np.min(exact))
        return rows, lowest

    def _may_miss(self, part: int, lowest: float, weight: np.ndarray | None, kth: float) -> bool:
        """Whether a row of ``part`` its graph did not give (score ≤ ``lowest``) could still reach ``kth``."""
        if weight is None:
            return lowest > kth or not math.isfinite(kth)
        a, b = self._allowed_range(part)
        w = weight[self.allowed[a:b]]
        reach = lowest * float(w.max() if lowest >= 0 else w.min())
        return reach > kth or not math.isfinite(kth)

    def _scanned(self, k: int, weight: np.ndarray | None, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``candidates`` over the rows of the parts without a graph: ``allowed``."""
        if k <= 0:
            return allowed[:0], np.zeros(0, dtype=np.float32)
        if self.approx is None:
            return allowed, self._exact(allowed)
        a = self.approx
        # with graph parts the scanned rows are a part of the snapshot: ranked over them alone (``at`` maps back)
        at = allowed if self._graph_parts else None
        if at is not None:
            a = a[at]
        b0, rho = self.bound
        if weight is None:
            # the bound grows with |a|, so lower and upper bounds are monotone in a: one threshold on a suffices.
            # The rows of the k best first-stage scores are scored exactly first: the k-th best of their exact
            # scores is a lower bound of the k-th best of all, about one bound higher than the k-th best lower
            # bound (a − b), so the rows left to score are those within one bound of it, not two.
            kth = _kth_at_most(a, k)
            lower = kth - (b0 + rho * abs(kth))
            if math.isfinite(kth):  # then every row at or above it is allowed (the others are at -inf)
                exact = self._exact(_rows(np.flatnonzero(a >= kth), at))
                if exact.size >= k:
                    lower = max(lower, float(np.partition(exact, exact.size - k)[exact.size - k]))
            # the rows whose upper bound reaches it: a + b0 + rho·|a| ≥ lower ⇔ a ≥ limit
            gap = lower - b0
            limit = gap / (1 + rho) if gap >= 0 else gap / (1 - rho)
            limit -= SLACK * (abs(limit) + 1e-30)
            threshold = np.float32(limit)
            if threshold > limit:  # float32 rounded up: the next float32 below
                threshold = np.nextafter(threshold, np.float32(-np.inf))
            rows = _rows(np.flatnonzero(a >= threshold), at)
            if self._row_bounds is not None and rows.size:
                rows = self._within_row_bounds(rows, lower)
        else:
            a = (a if at is not None else a[allowed]).astype(np.float64)
            spread = b0 + rho * np.abs(a)
            low = (a - spread) * weight[allowed]
            high = (a + spread) * weight[allowed]
            kth = float(np.partition(low, low.size - k)[low.size - k])
            rows = allowed[high >= kth - SLACK * (abs(kth) + 1e-30)]
        return rows, self._exact(rows)

    def _within_row_bounds(self, rows: np.ndarray, lower: float) -> np.ndarray:
        """The ``rows`` whose own upper bound (their quantization error, not the segment's largest) reaches
        ``lower``: the int8 error of a row varies with its largest coordinate, about 2× between rows."""
        parts, q_norm, rest = cast(tuple[list[Packed], float, float], self._row_bounds)  # checked by the caller
        errors = np.empty(rows.size, dtype=np.float64)
        for p, where, local in self.dense.by_part(rows):
            errors[where] = parts[p].row_error[self.dense.parts[p][1][local]]
        a = cast(np.ndarray, self._approx)[rows].astype(np.float64)
        upper = a + (q_norm * errors + rest) * (1 + SLACK) + 1e-30 + INT8_RHO * np.abs(a)
        return rows[upper >= lower - SLACK * (abs(lower) + 1e-30)]

    def top(self, k: int, beside: Beside | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best allowed rows by exact score, best first, and their scores (``beside``: ``candidates``)."""
        rows, scores = self.candidates(k, beside=beside)
        order = top_order(scores, k)
        return rows[order], scores[order]


def _rows(positions: np.ndarray, at: np.ndarray | None) -> np.ndarray:
    """Snapshot rows of ``positions`` in a ranking over the rows ``at`` (None: the positions are the rows)."""
    return positions if at is None else at[positions]


def _kth_at_most(a: np.ndarray, k: int) -> float:
    """A number at most the ``k``-th largest of ``a`` (any such number gives a correct candidate set; the closer,
    the fewer candidates): from a sample, checked by counting, else the exact k-th largest (a partition of every
    row costs several times the sample and the count)."""
    if k * 64 <= a.size:
        sample = a[::16]
        rank = -(-k * 5 // 64)  # ≈ the (1.25·k)-th largest of all: below the k-th unless the sample is unlucky
        guess = float(np.partition(sample, sample.size - rank)[sample.size - rank])
        if math.isfinite(guess) and np.count_nonzero(a >= guess) >= k:  # k numbers ≥ guess: the k-th is ≥ guess
            return guess
    return float(np.partition(a, a.size - k)[a.size - k])


def _graph_parts(dense: ScanRows, query: np.ndarray) -> list[int]:
    """The parts whose graph answers this query: those with one, when ``EngineConfig.ann`` is "auto" and the query
    finite."""
    if not dense.walks or not np.all(np.isfinite(query)):
        return []
    return [p for p, g in enumerate(dense.graphs) if g is not None and dense.parts[p][1].size]


def _plain(weight: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(weight)) and np.all(weight >= 0))
