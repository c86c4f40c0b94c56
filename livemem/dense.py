"""Dense (vector) scoring over a snapshot's rows, and an exact two-stage top-k.

``DenseRows`` holds the vectors of the rows a snapshot holds, per segment (the segment arrays are shared with other
snapshots of the same process).

**The dense score** of a row is the float32 dot product of its vector with the query vector (cast to float32),
computed as numpy's float32 product and row sum (``exact_scores``). It is the same float for a row wherever the
row sits: a BLAS matrix–vector product rounds a row differently by its position in the matrix (tail handling,
threads), so a few rows rescored on their own would not match a full scan bit for bit, and results could change
with the segment layout of a version.

**Top-k in two stages** (``DenseRows.scan``): a float16 copy of each segment (made once per segment per process,
cached beside the float32 array) is scanned with torch's float16 matrix–vector product, which reads half the bytes
of the float32 scan; every row whose float16 score could still reach the top k, given a proven error bound, is
then scored exactly. The result is identical to ranking the exact scores of every row:

- error bound, per row ``r`` (``_bound``): with ``q̂``, ``v̂`` the float16 roundings of query and vector,
  ``|q·v − q̂·v̂| ≤ ‖q̂‖·‖v − v̂‖ + ‖q − q̂‖·‖v‖`` (``‖v − v̂‖ ≤ 2⁻¹¹‖v‖ + 2⁻²⁵√d``: relative rounding, or half
  the spacing of float16 subnormals); torch multiplies the float16 values exactly in float32 and sums in float32
  (``fp16_gemv_trans_fp32_arith_by_dot_products`` in ATen; the float16-arithmetic variant is used only when
  ``torch.backends.cpu`` allows fp16 reduced-precision reduction, in which case this module never uses float16):
  ``≤ γ_d·Σ|q̂ᵢv̂ᵢ|`` with ``γ_d = d·2⁻²⁴/(1 − d·2⁻²⁴)`` for any summation order; the result is rounded to
  float16: ``≤ 2⁻¹¹|t| + 2⁻²⁵``; the exact score itself is within ``γ_d·‖q‖‖v‖`` of ``q·v``. Norms are bounded by
  the largest row norm of the segment. A probe checks the bound on adversarial rows once per process.
- selection: if the k rows with the best lower bounds (score − bound) have lower bounds ≥ ``L``, the k-th best
  exact score is ≥ ``L``, so every row of the true top k (ties included) has an upper bound ≥ ``L``: those rows
  are the candidates, scored exactly, and the top k of them is the top k of all.

Ties are broken by row (``top_order``), so the top k is one well-defined set however it is found.
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

BLOCK_ROWS = 2048  # rows per block of the exact kernel: the float32 product of a block stays in the L2 cache
F16_MAX = 60_000.0  # below float16's largest finite value (65,504): larger values would overflow the scan
U32 = 2.0**-24  # unit roundoff of float32
U16 = 2.0**-11  # unit roundoff of float16
SUB16 = 2.0**-25  # half the spacing of float16 subnormals: the absolute rounding error below 2^-14
SLACK = 1e-9  # relative slack added to every bound computed in float64 (its own rounding is ~1e-16)


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
    kth = np.partition(key, k - 1)[k - 1]
    if np.isnan(kth):  # fewer than k numbers: all of them, then the first NaNs
        nan = np.isnan(key)
        pick = np.concatenate([np.flatnonzero(~nan), np.flatnonzero(nan)])[:k]
    else:
        better = np.flatnonzero(key < kth)
        pick = np.concatenate([better, np.flatnonzero(key == kth)[: k - better.size]])
    return pick[np.lexsort((pick, key[pick]))]


def exact_scores(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The dense score of each row of ``vectors`` (float32 product and numpy's row sum: the same float for a row
    in any array, at any position), in blocks so the product stays in cache."""
    n = vectors.shape[0]
    out = np.empty(n, dtype=np.float32)
    if n == 0:
        return out
    buffer = np.empty((min(n, BLOCK_ROWS), vectors.shape[1]), dtype=np.float32)
    for start in range(0, n, BLOCK_ROWS):
        block = vectors[start : start + BLOCK_ROWS]
        product = buffer[: block.shape[0]]
        np.multiply(block, query, out=product)
        np.add.reduce(product, axis=1, out=out[start : start + block.shape[0]])
    return out


def _gathered_scores(vectors: np.ndarray, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``exact_scores(vectors[rows], query)`` without copying more than a block of rows at a time."""
    out = np.empty(rows.size, dtype=np.float32)
    for start in range(0, rows.size, BLOCK_ROWS):
        part = rows[start : start + BLOCK_ROWS]
        out[start : start + part.size] = exact_scores(np.take(vectors, part, axis=0), query)
    return out


@dataclass(frozen=True)
class _Half:
    """A segment's vectors in float16 for the first stage, with what the error bound needs."""

    vectors: torch.Tensor  # float16, shares memory with a numpy array kept alive by the tensor
    max_norm: float  # an upper bound of the largest row L2 norm (float32 data), inf when not usable
    usable: bool  # finite and small enough for float16


_HALVES: dict[int, tuple[weakref.ref, _Half]] = {}
_HALVES_LOCK = threading.Lock()


def _half_of(dense: np.ndarray) -> _Half:
    """The float16 copy of a segment's vectors, made once per array per process (segments are shared by
    snapshots, and so are their copies); dropped when the array is."""
    key = id(dense)
    with _HALVES_LOCK:
        cached = _HALVES.get(key)
        if cached is not None and cached[0]() is dense:
            return cached[1]
    import torch

    squares = np.einsum("ij,ij->i", dense, dense, dtype=np.float64) if dense.size else np.zeros(1)
    largest = float(np.max(squares)) if squares.size else 0.0
    # einsum sums in float64: relative error far below the slack; NaN / inf make the segment unusable
    max_norm = math.sqrt(largest) * (1 + SLACK) if math.isfinite(largest) else math.inf
    usable = max_norm < F16_MAX
    half = _Half(
        torch.from_numpy(dense.astype(np.float16) if usable else np.zeros((0, 0), np.float16)), max_norm, usable
    )
    with _HALVES_LOCK:
        for stale in [k for k, (ref, _) in _HALVES.items() if ref() is None]:
            del _HALVES[stale]
        _HALVES[key] = (weakref.ref(dense), half)
    return half


_PROBE: list[bool] = []


def half_product_usable() -> bool:
    """Whether torch's float16 product may be used: fp16 reduced-precision reduction off (the bound assumes float32
    sums), and a probe of adversarial rows within the bound. Checked once per process (the flag on every scan)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency; the exact scan needs no torch
        return False
    allow = getattr(torch._C, "_get_cpu_allow_fp16_reduced_precision_reduction", None)
    if allow is not None and allow():
        return False
    if not _PROBE:
        _PROBE.append(_probe(lambda m, q: torch.mv(torch.from_numpy(m), torch.from_numpy(q)).float().numpy()))
        if not _PROBE[0]:
            log.warning("torch's float16 product exceeds its error bound here: dense top-k uses the float32 scan")
    return _PROBE[0]


def _probe(product: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> bool:
    """Cases where float16 partial sums, or products rounded to float16, would miss by more than the bound: large
    terms first in every lane then small ones that a float16 sum drops; pairs ``a·b − fl16(a·b)`` whose rounding
    errors add up while the sum nearly cancels; and random rows of mixed magnitudes. ``product(matrix, vector)``:
    the float16 matrix–vector product tested."""
    rng = np.random.default_rng(0)
    dim = 384
    cases = []
    rows = np.full((2, dim), 2.0**-6)
    rows[:, :64] = 1.0
    rows[1, 64::5] = 2.0**-13  # products in float16's subnormal range
    cases.append((rows, np.concatenate([np.ones(64), np.full(dim - 64, 2.0**-6)])))
    grid = 1 + np.arange(1024) / 1024  # float16 values in [1, 2)
    products = np.multiply.outer(grid, grid)
    i, j = np.nonzero(products.astype(np.float16) - products < -(2.0**-13) * products)
    i, j = i[: dim // 2], j[: dim // 2]
    pairs = np.column_stack([grid[j], -products[i, j].astype(np.float16)]).ravel()[None, :]
    cases.append((pairs, np.column_stack([grid[i], np.ones(dim // 2)]).ravel()))
    mixed = rng.standard_normal((64, dim)) * np.exp(rng.uniform(-6, 2, (64, 1)))
    cases.append((mixed, rng.standard_normal(dim)))
    gamma = dim * U32 / (1 - dim * U32)
    for vectors, query in cases:
        v16, q16 = vectors.astype(np.float16), query.astype(np.float16)
        got = np.asarray(product(v16, q16), dtype=np.float64)
        v, q = v16.astype(np.float64), q16.astype(np.float64)
        true = v @ q  # float16 products are exact in float64; their sum is far closer than the bound
        magnitude = np.abs(v) @ np.abs(q)
        allowed = gamma * magnitude + U16 * (np.abs(true) + gamma * magnitude) / (1 - U16) + SUB16
        if not np.all(np.abs(got - true) <= allowed):
            return False
    return True


class DenseRows:
    """The vectors of a snapshot's rows, kept per segment (shared with other snapshots): ``rows @ vector``
    scores every row (``exact_scores``); ``scan(vector, mask)`` finds the best rows exactly without scoring every
    row in float32; ``materialize()`` is the whole matrix in row order (a copy)."""

    def __init__(self, parts: list[tuple[np.ndarray, np.ndarray]], dim: int) -> None:
        self.parts = parts  # (segment vectors, the segment rows this snapshot holds, in order)
        self.size = sum(int(rows.size) for _, rows in parts)
        self.shape = (self.size, dim)
        sizes = [int(rows.size) for _, rows in parts]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)  # snapshot row of each part's start

    def __matmul__(self, vector: np.ndarray) -> np.ndarray:
        return self._scores(_query(vector), np.arange(self.size))

    def scores(self, vector: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The dense scores of snapshot ``rows`` (any order), equal to ``(self @ vector)[rows]``."""
        return self._scores(_query(vector), np.asarray(rows, dtype=np.int64))

    def _scores(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        out = np.empty(rows.size, dtype=np.float32)
        if not rows.size:
            return out
        part_of = np.searchsorted(self.offsets, rows, side="right") - 1
        for p in np.unique(part_of):
            dense, held = self.parts[p]
            where = np.flatnonzero(part_of == p)
            seg_rows = held[rows[where] - self.offsets[p]]
            # most of a segment: score it whole (no gather), then pick; the scores are the same floats either way
            out[where] = (exact_scores(dense, query)[seg_rows] if 2 * seg_rows.size >= dense.shape[0] else
                          _gathered_scores(dense, seg_rows, query))  # fmt: skip
        return out

    def top(self, vector: np.ndarray, k: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` rows with the highest dense scores among ``mask`` (all rows when None), best first (ties: the
        lower row), and their scores: exactly ``top_order`` over every allowed row's score."""
        return self.scan(vector, mask).top(k)

    def scan(self, vector: np.ndarray, mask: np.ndarray | None = None, allowed: np.ndarray | None = None) -> DenseScan:
        """A query's first stage over the rows ``mask`` allows (``allowed``: ``np.flatnonzero(mask)`` when the
        caller has it), to ask for top-k candidates one or more times."""
        return DenseScan(self, _query(vector), mask, allowed)

    def materialize(self) -> np.ndarray:
        if not self.parts:
            return np.zeros(self.shape, dtype=np.float32)
        return np.concatenate([dense[rows] for dense, rows in self.parts])


def _query(vector: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(vector, dtype=np.float32).reshape(-1)


# Below this many allowed rows per row of the snapshot, scoring the allowed rows exactly costs less than the float16
# scan, which reads every row of every segment (measured by bench/dense_scan.py: a float32 row scored exactly costs
# about 5 float16 rows scanned).
EXACT_SHARE = 0.15


class DenseScan:
    """One query over a snapshot's allowed rows: the float16 scores of every row (when the bound allows them), and
    the exact scores of the rows scored so far."""

    def __init__(
        self, dense: DenseRows, query: np.ndarray, mask: np.ndarray | None, allowed: np.ndarray | None = None
    ) -> None:
        self.dense = dense
        self.query = query
        self.mask = mask
        if allowed is None:
            allowed = np.arange(dense.size) if mask is None else np.flatnonzero(mask)
        self.allowed = allowed
        self.approx: np.ndarray | None = None  # float16 scores as float32, -inf where not allowed
        self.bound: tuple[float, float] = (math.inf, 0.0)  # |approx − exact| ≤ b0 + rho·|approx|
        self.exact = np.full(dense.size, np.nan, dtype=np.float32)  # exact scores computed so far (NaN: not yet)
        self.known = np.zeros(dense.size, dtype=bool)
        if self.allowed.size > EXACT_SHARE * dense.size:
            self._first_stage()

    def _first_stage(self) -> None:
        query = self.query
        if not np.all(np.isfinite(query)) or float(np.max(np.abs(query), initial=0.0)) >= F16_MAX:
            return
        if not half_product_usable():
            return
        import torch

        halves = [_half_of(dense) for dense, _ in self.dense.parts]
        if not all(h.usable for h in halves):
            return
        q16 = query.astype(np.float16)
        dim = query.size
        q_hat = float(np.linalg.norm(q16.astype(np.float64)))
        q_err = float(np.linalg.norm(query.astype(np.float64) - q16.astype(np.float64)))
        q_norm = float(np.linalg.norm(query.astype(np.float64)))
        gamma = dim * U32 / (1 - dim * U32)
        norm = max(h.max_norm for h in halves)
        v_err = U16 * norm + SUB16 * math.sqrt(dim)  # ‖v − v̂‖
        v_hat = norm + v_err  # ‖v̂‖
        if q_hat * v_hat * (1 + gamma) >= F16_MAX:
            return
        rho = U16 / (1 - U16)  # rounding to float16 of a sum t: |a − t| ≤ 2⁻¹¹|t| + 2⁻²⁵, so ≤ rho·|a| + (1 + rho)·2⁻²⁵
        b0 = q_hat * v_err + q_err * norm + gamma * q_hat * v_hat + (1 + rho) * SUB16 + gamma * q_norm * norm
        self.bound = (b0 * (1 + SLACK) + 1e-30, rho * (1 + SLACK))
        approx = np.empty(self.dense.size, dtype=np.float32)
        q_t = torch.from_numpy(q16)
        for (dense, rows), half, start in zip(self.dense.parts, halves, self.dense.offsets, strict=False):
            scored = torch.mv(half.vectors, q_t).numpy()
            approx[start : start + rows.size] = scored if rows.size == dense.shape[0] else scored[rows]
        if self.allowed.size < self.dense.size:
            approx[~self.mask] = -np.inf
        self.approx = approx

    def scores(self, rows: np.ndarray) -> np.ndarray:
        """The exact scores of snapshot ``rows`` (computed once per scan)."""
        return self._exact(np.asarray(rows, dtype=np.int64))

    def _exact(self, rows: np.ndarray) -> np.ndarray:
        todo = rows[~self.known[rows]]
        if todo.size:
            self.exact[todo] = self.dense._scores(self.query, todo)
            self.known[todo] = True
        return self.exact[rows]

    def candidates(self, k: int, weight: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Allowed rows (ascending) among which are all the ``k`` best by ``score × weight`` (``weight``: one
        finite, non-negative number per snapshot row, None for 1), ties included, with their exact scores."""
        k = min(k, self.allowed.size)
        if k <= 0:
            return self.allowed[:0], np.zeros(0, dtype=np.float32)
        if self.approx is None or (weight is not None and not _plain(weight)):
            return self.allowed, self._exact(self.allowed)
        a = self.approx
        b0, rho = self.bound
        if weight is None:
            # the bound grows with |a|, so lower and upper bounds are monotone in a: one threshold on a suffices
            kth = float(np.partition(a, a.size - k)[a.size - k])
            lower = kth - (b0 + rho * abs(kth))
            # the rows whose upper bound reaches it: a + b0 + rho·|a| ≥ lower ⇔ a ≥ limit
            gap = lower - b0
            limit = gap / (1 + rho) if gap >= 0 else gap / (1 - rho)
            limit -= SLACK * (abs(limit) + 1e-30)
            threshold = np.float32(limit)
            if threshold > limit:  # float32 rounded up: the next float32 below
                threshold = np.nextafter(threshold, np.float32(-np.inf))
            rows = np.flatnonzero(a >= threshold)
        else:
            allowed = self.allowed
            a = a[allowed].astype(np.float64)
            spread = b0 + rho * np.abs(a)
            low = (a - spread) * weight[allowed]
            high = (a + spread) * weight[allowed]
            kth = float(np.partition(low, low.size - k)[low.size - k])
            rows = allowed[high >= kth - SLACK * (abs(kth) + 1e-30)]
        return rows, self._exact(rows)

    def top(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best allowed rows by exact score, best first, and their scores."""
        rows, scores = self.candidates(k)
        order = top_order(scores, k)
        return rows[order], scores[order]


def _plain(weight: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(weight)) and np.all(weight >= 0))
