"""Dense (vector) scoring over a snapshot's rows: ``DenseRows``, and where its parts live.

``DenseRows`` holds the vectors of the rows a snapshot holds, per segment (the segment arrays are shared with other
snapshots of the same process). ``rows @ vector`` is every row's exact dense score; ``rows.top(vector, k, mask)``
the exact top k, found in two stages. The parts, each one job:

- ``livemem.index.kernels``: the exact score of a row (one compiled loop, the same float wherever the row sits) and
  the first-stage kernels (int8 by default, float16 as fallbacks), each probed once per process;
- ``livemem.index.bounds``: the proven error bound of a first-stage score;
- ``livemem.index.scan``: the two-stage top-k (``DenseScan``, ``top_order``), the scan's threads, and the segments
  packed for the first stage (once per array per process; the serving copies' int8 codes via ``share_int8``).

The knobs (``LIVEMEM_DENSE_KERNEL``, ``LIVEMEM_SCAN_THREADS``, ``LIVEMEM_ANN*``) are read once by the entry point into
its ``livemem.settings.EngineConfig`` and handed by the loader (``livemem.engine.snapshot.load_snapshot``) to the
``DenseRows`` it builds: ``rows.config``, which the kernel choice, the scan pool and the graph walk read (made without
one: ``EngineConfig.defaults()``). No module global holds them (docs/dense-scan.md).
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from livemem.index import scan
from livemem.index.bounds import INT8_MAX_NORM, max_row_norm
from livemem.index.kernels import (
    Int8Codes,
    Kernel,
    exact_scores,
    first_stage_kernel,
    gathered_scores,
    quantize_int8,
    warm_up,
)
from livemem.index.scan import DenseScan, packed, share_int8, top_order
from livemem.settings import EngineConfig

__all__ = [
    "INT8_MAX_NORM",
    "DenseRows",
    "DenseScan",
    "Int8Codes",
    "exact_scores",
    "first_stage_kernel",
    "max_row_norm",
    "packed",
    "quantize_int8",
    "share_int8",
    "top_order",
    "warm_up",
]


class DenseRows:
    """The vectors of a snapshot's rows, kept per segment (shared with other snapshots): ``rows @ vector``
    scores every row (``exact_scores``); ``scan(vector, mask)`` finds the best rows exactly without scoring every
    row in float32; ``materialize()`` is the whole matrix in row order (a copy). ``config``: the engine config its
    scans read (the loader's; None: ``EngineConfig.defaults()``)."""

    def __init__(
        self,
        parts: list[tuple[np.ndarray, np.ndarray]],
        dim: int,
        sentences: list | None = None,
        graphs: list | None = None,
        inverse: dict[int, np.ndarray] | None = None,
        config: EngineConfig | None = None,
    ) -> None:
        self.config = config if config is not None else _DEFAULT
        self.parts = parts  # (segment vectors, the segment rows this snapshot holds, in order)
        # per part, its segment's ``livemem.index.sentences.Sentences`` (None: the segment has no sentence vectors)
        self.sentences = sentences if sentences is not None else [None] * len(parts)
        # per part, its segment's approximate-search graph (``livemem.index.ann.Graph``; None: scanned exactly)
        self.graphs = graphs if graphs is not None else [None] * len(parts)
        self._inverse: dict[int, np.ndarray] = dict(inverse or {})  # given where the caller has it (``inverse``)
        self.has_sentences = any(s is not None and s.count for s in self.sentences)
        self.size = sum(int(rows.size) for _, rows in parts)
        self.shape = (self.size, dim)
        sizes = [int(rows.size) for _, rows in parts]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)  # snapshot row of each part's start

        self._blocks: dict[tuple[int, int, int], tuple[int, int, np.ndarray | bool]] = {}

    def by_part(self, rows: np.ndarray):
        """``(part, positions in rows, those rows' positions within the part)`` for each part holding some of the
        snapshot ``rows`` (a single part, the common case, without grouping: ``np.unique`` costs ≈50 µs)."""
        if len(self.parts) == 1:
            return [(0, slice(None), rows)]
        part_of = np.searchsorted(self.offsets, rows, side="right") - 1
        groups = []
        for p in np.flatnonzero(np.bincount(part_of, minlength=len(self.parts))):
            where = np.flatnonzero(part_of == p)
            groups.append((int(p), where, rows[where] - self.offsets[p]))
        return groups

    def with_config(self, config: EngineConfig) -> DenseRows:
        """The same rows (the same arrays, graphs and derived maps) scanned under ``config``: for a benchmark that
        compares settings on one loaded version; this one unchanged."""
        other = copy.copy(self)
        other.config = config
        return other

    @property
    def walks(self) -> bool:
        """Whether a query's candidates come from graphs (a part has one and ``config.ann`` is auto): a walk on
        the calling thread, not a scan on the pool."""
        return self.config.ann == "auto" and any(g is not None for g in self.graphs)

    def kernel(self) -> Kernel | None:
        """The first-stage kernel of this config (``first_stage_kernel(config.kernel)``; None: rows scored exactly)."""
        return first_stage_kernel(self.config.kernel)

    def scan_pool(self) -> ThreadPoolExecutor | None:
        """The dense scan's background threads for this config (``scan.scan_pool``: one pool per process and thread
        count; None for 0)."""
        return scan.scan_pool(self.config.scan_threads)

    def inverse(self, part: int) -> np.ndarray:
        """For each row of ``part``'s segment, its position among the part's rows in this snapshot (-1: the
        snapshot does not hold it): a graph's keys are segment rows. Built once per part."""
        found = self._inverse.get(part)
        if found is None:
            vectors, held = self.parts[part]
            found = np.full(vectors.shape[0], -1, dtype=np.int64)
            found[held] = np.arange(held.size, dtype=np.int64)
            self._inverse[part] = found
        return found

    def block_rows(self, part: int, start: int, end: int) -> tuple[int, int, np.ndarray | bool]:
        """Where segment rows ``[start, end)`` of ``part`` go in the snapshot: ``(first, end)`` positions within the
        part, and True when the snapshot holds every one of them, else the offsets of those it holds within the
        block; False when the part's rows are not in segment order (then its scores are gathered whole)."""
        key = (part, start, end)
        found = self._blocks.get(key)
        if found is None:
            held = self.parts[part][1]
            if held.size > 1 and not bool(np.all(held[1:] > held[:-1])):
                found = (0, 0, False)
            else:
                first, last = (int(i) for i in np.searchsorted(held, [start, end]))
                local = held[first:last] - start
                found = (first, last, True if local.size == end - start else local)
            self._blocks[key] = found
        return found

    def __matmul__(self, vector: np.ndarray) -> np.ndarray:
        return self._scores(_query(vector), np.arange(self.size))

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """The float32 vectors of snapshot ``rows`` (in that order), read from their segments."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((rows.size, self.shape[1]), dtype=np.float32)
        for p, where, local in self.by_part(rows):
            vectors, held = self.parts[p]
            out[where] = vectors[held[local]]
        return out

    def scores(self, vector: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The dense scores of snapshot ``rows`` (any order), equal to ``(self @ vector)[rows]``."""
        return self._scores(_query(vector), np.asarray(rows, dtype=np.int64))

    def _scores(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        out = np.empty(rows.size, dtype=np.float32)
        if not rows.size:
            return out
        for p, where, local in self.by_part(rows):
            dense, held = self.parts[p]
            out[where] = gathered_scores(dense, held[local], query)  # reads only those rows, in place
        return out

    def best_sentences(self, vector: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Each of snapshot ``rows``' best sentence cosine (float32; NaN for a row without sentence vectors)."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.full(rows.size, np.nan, dtype=np.float32)
        if not self.has_sentences or not rows.size:
            return out
        query = _query(vector)
        for p, where, local in self.by_part(rows):
            found = self.sentences[p]
            if found is not None:
                out[where] = found.best(query, self.parts[p][1][local])
        return out

    def sentence_vectors(self, row: int) -> np.ndarray:
        """The sentence vectors of one snapshot row, float32 from their codes (none: shape ``(0, dim)``)."""
        ((p, _, local),) = self.by_part(np.array([row], dtype=np.int64))
        found = self.sentences[p]
        if found is None:
            return np.zeros((0, self.shape[1]), dtype=np.float32)
        return found.of(int(self.parts[p][1][local][0]))

    def top(self, vector: np.ndarray, k: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` rows with the highest dense scores among ``mask`` (all rows when None), best first (ties: the
        lower row), and their scores: exactly ``top_order`` over every allowed row's score."""
        return self.scan(vector, mask).top(k)

    def scan(self, vector: np.ndarray, mask: np.ndarray | None = None, allowed: np.ndarray | None = None) -> DenseScan:
        """A query's first stage over the rows ``mask`` allows (``allowed``: ``np.flatnonzero(mask)`` when the
        caller has it), to ask for top-k candidates one or more times."""
        return DenseScan(self, _query(vector), mask, allowed)

    def prepare(self) -> None:
        """Pack every segment for the first stage now (else the first query that needs a segment packs it)."""
        kernel = self.kernel()
        if kernel is None:
            return
        for dense, _ in self.parts:
            packed(dense, kernel)

    def materialize(self) -> np.ndarray:
        if not self.parts:
            return np.zeros(self.shape, dtype=np.float32)
        return np.concatenate([dense[rows] for dense, rows in self.parts])


_DEFAULT = EngineConfig.defaults()  # the config of rows made without one (tests, tools): never the environment


def _query(vector: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(vector, dtype=np.float32).reshape(-1)
