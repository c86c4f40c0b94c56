"""Dense (vector) scoring over a snapshot's rows, and an exact two-stage top-k.

``DenseRows`` holds the vectors of the rows a snapshot holds, per segment (the segment arrays are shared with other
snapshots of the same process).

**The dense score** of a row is the float32 dot product of its vector with the query vector (cast to float32),
computed by a compiled loop whose order of operations depends on the row alone (``exact_scores``: numba, the GIL
released, the same vectorised loop for every row). It is the same float for a row wherever the row sits: a BLAS
matrix–vector product rounds a row differently by its position in the matrix (tail handling, threads), so a few
rows rescored on their own would not match a full scan bit for bit, and results could change with the segment
layout of a version.

**Top-k in two stages** (``DenseRows.scan``): a first stage scores every row cheaply, with a proven error bound;
every row whose first-stage score could still reach the top k is then scored exactly. The result is identical to
ranking the exact scores of every row. The first stage (``first_stage_kernel``) is, by default, an **int8** scan
(``SimsimdInt8``: codes with a float32 scale per row, ``quantize_int8``; the serving copies hold them, so every
worker maps one copy; a quarter of the float32 bytes, and exact integer dot products), else a float16 one
(``packed``: FBGEMM's float16 GEMM, else ``torch.mv``; half the bytes). Each is checked once per process on rows
where it would break its error model (``_probe_int8``, ``_probe_half``). Error bounds (``error_bound``):

- int8, with ``v̂ = s_v·c_v`` and ``q̂ = s_q·c_q``: ``|q·v − q̂·v̂| ≤ ‖q‖·‖v − v̂‖ + ‖q − q̂‖·‖v̂‖``, the segment's
  largest ``‖v − v̂‖`` and ``‖v̂‖`` computed when it is quantized; the integer product is exact and is scaled by two
  float32 multiplications (``≤ 2u/(1 − 2u)`` relative); the exact score is within ``γ_d·‖q‖‖v‖`` of ``q·v``.
- float16, with ``v̂`` the vector rounded to float16 and ``q̂`` the query as the kernel takes
  it (float32 for FBGEMM, float16 for ``torch.mv``): ``|q·v − q̂·v̂| ≤ ‖q̂‖·‖v − v̂‖ + ‖q − q̂‖·‖v‖`` with
  ``‖v − v̂‖ ≤ 2⁻¹¹‖v‖ + 2⁻²⁵√d`` (rounding to nearest, or half the spacing of float16 subnormals); both kernels
  multiply and sum in float32 (FBGEMM's fused multiply-adds; ATen's ``fp16_gemv_trans`` unless torch allows fp16
  reduced-precision reduction, then it is not used): ``≤ γ_d·‖q̂‖·‖v̂‖`` with ``γ_d = d·2⁻²⁴/(1 − d·2⁻²⁴)``, the
  classic bound of a float32 dot product in any order; ``torch.mv`` rounds its result to float16: ``≤ 2⁻¹¹|t| + 2⁻²⁵``;
  the exact score itself is within ``γ_d·‖q‖‖v‖`` of ``q·v``. Norms are bounded by the largest row norm of the
  segments.
- selection: if the k rows with the best lower bounds (score − bound) have lower bounds ≥ ``L``, the k-th best
  exact score is ≥ ``L``, so every row of the true top k (ties included) has an upper bound ≥ ``L``: those rows
  are the candidates, scored exactly, and the top k of them is the top k of all. A weight per row (recency,
  attention: ``candidates(k, weight)``) scales both bounds.

Ties are broken by row (``top_order``), so the top k is one well-defined set however it is found.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import warnings
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from livemem.settings import DenseSettings

log = logging.getLogger(__name__)

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
# than arithmetic. On large snapshots the blocks are scanned on ``SCAN_THREADS`` background threads (simsimd and
# torch release the GIL) while the caller scores BM25 on its own thread, then the caller scans the blocks no thread
# has started (``DenseScan._settle``). Default: one thread fewer than the cores, at most one (two on 2 cores would
# hold three threads on two cores while BM25 runs); small snapshots scan on the calling thread (a hand-off costs
# more than it saves). ``LIVEMEM_SCAN_THREADS=0`` scans on the calling thread always.
SCAN_BLOCK_ROWS = 65_536
PARALLEL_MIN_ROWS = 100_000
_TUNING = DenseSettings.from_env()  # LIVEMEM_SCAN_THREADS, LIVEMEM_DENSE_KERNEL (a bad value: ConfigError)
SCAN_THREADS = _TUNING.scan_threads if _TUNING.scan_threads is not None else min(2, os.cpu_count() or 1) - 1
_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def scan_pool() -> ThreadPoolExecutor | None:
    """The background threads of the dense scan (None when ``SCAN_THREADS`` is 0); the retriever also scores BM25
    on it while the request's thread encodes the query."""
    if SCAN_THREADS <= 0:
        return None
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(SCAN_THREADS, thread_name_prefix="dense-scan"))
        return _POOL[0]


# One loop per row, compiled once for every row: LLVM may reorder the row's sum (``reassoc``: 16 float32 lanes here)
# and fuse multiply-adds (``contract``), but it does so the same way for every row, at any address (no alignment
# peeling), so a row's score is the same float in any array, at any position (tests/unit/test_dense.py). Neither
# flag assumes finite values. 3,000 rows of 384 dimensions: 0.15 ms, against 0.58 ms in a fixed order of sixteen
# running sums and 0.41 ms for numpy's gather and product.
_EXACT_MATH = {"reassoc", "contract"}


@numba.njit(nogil=True, cache=True, fastmath=_EXACT_MATH)
def _dot_rows(vectors, rows, query, out):  # pragma: no cover - compiled
    for k in range(rows.size):
        row = vectors[rows[k]]
        total = np.float32(0)
        for i in range(query.size):
            total += row[i] * query[i]
        out[k] = total


def _float32(vectors: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    vectors = vectors if vectors.dtype == np.float32 else vectors.astype(np.float32)
    return vectors, np.ascontiguousarray(query, dtype=np.float32)


def warm_up() -> None:
    """Compile (or load from numba's cache) the exact scoring loops now, for read-only (mapped) and writable
    vectors, not on a worker's first query."""
    query = np.zeros(16, dtype=np.float32)
    for writable in (True, False):
        vectors = np.zeros((1, 16), dtype=np.float32)
        vectors.flags.writeable = writable
        exact_scores(vectors, query)


def exact_scores(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The dense score of each row of ``vectors``: every row goes through the one compiled loop (``_dot_rows``),
    so a row's score is the same float in any array, at any position, scored whole or among a few rows."""
    return _gathered_scores(vectors, np.arange(vectors.shape[0]), query)


def _gathered_scores(vectors: np.ndarray, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``exact_scores(vectors[rows], query)``, without gathering the rows first."""
    vectors, query = _float32(vectors, query)
    out = np.empty(rows.size, dtype=np.float32)
    if out.size:
        _dot_rows(vectors, np.asarray(rows, dtype=np.int64), query, out)
    return out


class Kernel:
    """A float16 matrix–vector product for the first stage, and what its error bound needs to know of it: whether
    it rounds the query and the result to float16 (it always rounds the vectors, to nearest)."""

    name = "abstract"
    rounds_query = True
    rounds_output = True
    reads_plain_half = False  # can scan a plain float16 array in place (a mapped, shared copy): ``view_half``
    reads_int8 = False  # scans int8 codes with a scale per row (``Int8Codes``), shared like the float16 copy

    def __repr__(self) -> str:
        return self.name

    def available(self) -> bool:
        return True

    def pack(self, dense: np.ndarray) -> Any:
        raise NotImplementedError

    def prepare(self, query: np.ndarray) -> Any:
        """The query as ``product`` takes it (once per scan, not per block)."""
        return query

    def product(self, packed: Any, query: Any, out: np.ndarray | None = None) -> np.ndarray:
        """float32 scores of every row of the packed block (``query``: what ``prepare`` returned), written into
        ``out`` when the kernel can (it returns the array that holds them)."""
        raise NotImplementedError


class FbgemmHalf(Kernel):
    """FBGEMM's float16 GEMM (``quantized.linear_dynamic_fp16``): float16 vectors packed once, the query in
    float32, products and sums in float32 (fused multiply-add), a float32 result. The fastest here (x86)."""

    name = "fbgemm float16"
    rounds_query = False
    rounds_output = False

    def available(self) -> bool:
        import torch

        if "fbgemm" not in torch.backends.quantized.supported_engines:
            return False
        if self._rounds_to_nearest is None:  # a property of the build: probed once per process, not per scan
            self._rounds_to_nearest = self._probe_rounding()
        return self._rounds_to_nearest

    _rounds_to_nearest: bool | None = None

    def _probe_rounding(self) -> bool:
        import torch

        # the packing must round to nearest, as the bound assumes: checked on values that tell the modes apart
        probe = np.array([[1 + 2.0**-11, 1 + 3 * 2.0**-11, -(1 + 2.0**-11 + 2.0**-20), 3e-6, 70.1, 2.0**-25]])
        packed = torch.ops.quantized.linear_prepack_fp16(torch.from_numpy(probe.astype(np.float32)), None)
        unpacked = torch.ops.quantized.linear_unpack_fp16(packed)[0].numpy()
        return bool(np.array_equal(unpacked, probe.astype(np.float32).astype(np.float16).astype(np.float32)))

    def pack(self, dense: np.ndarray) -> Any:
        import torch

        with warnings.catch_warnings():  # a mapped, read-only segment array: only read (packing copies it)
            warnings.simplefilter("ignore", UserWarning)
            return torch.ops.quantized.linear_prepack_fp16(torch.from_numpy(dense), None)

    def product(self, packed: Any, query: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        import torch

        return torch.ops.quantized.linear_dynamic_fp16(torch.from_numpy(query)[None, :], packed).numpy()[0]


class TorchHalf(Kernel):
    """``torch.mv`` over float16 vectors and query: float32 products and sums (ATen's
    ``fp16_gemv_trans_fp32_arith_by_dot_products``), rounded to float16. Used where FBGEMM is not; never while
    torch allows fp16 reduced-precision reduction on CPU (float16 sums: the bound would not hold)."""

    name = "torch float16 mv"
    reads_plain_half = True

    def available(self) -> bool:
        import torch

        allow = getattr(torch._C, "_get_cpu_allow_fp16_reduced_precision_reduction", None)
        return not (allow is not None and allow())

    def pack(self, dense: np.ndarray) -> Any:
        import torch

        return torch.from_numpy(dense.astype(np.float16))

    def view_half(self, half: np.ndarray) -> Any:
        import torch

        with warnings.catch_warnings():  # a mapped, read-only float16 copy: only read
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(half)

    def product(self, packed: Any, query: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        import torch

        return torch.mv(packed, torch.from_numpy(query.astype(np.float16))).float().numpy()


@dataclass(frozen=True)
class Int8Codes:
    """Vectors quantized to int8 with one float32 scale per row: row ``r`` stands for ``scales[r] · codes[r]``
    (``v̂``); ``error`` bounds ``‖v − v̂‖`` and ``max_hat`` bounds ``‖v̂‖`` over every row (``quantize_int8``)."""

    codes: np.ndarray  # int8, (rows, dim), |code| ≤ 127
    scales: np.ndarray  # float32, (rows,)
    error: float
    max_hat: float
    row_error: np.ndarray | None = None  # float32, (rows,): an upper bound of each row's ‖v − v̂‖ (None: ``error``)

    def rows(self, start: int, end: int) -> Int8Codes:
        errors = None if self.row_error is None else self.row_error[start:end]
        return Int8Codes(self.codes[start:end], self.scales[start:end], self.error, self.max_hat, errors)


QUANT_BLOCK_ROWS = 8_192


def quantize_int8(dense: np.ndarray) -> Int8Codes:
    """``dense`` (finite float32 rows) as int8 codes and a scale per row (its largest magnitude / 127, so the codes
    use the whole range), with the largest ``‖v − v̂‖`` and ``‖v̂‖``, computed exactly enough in float64 (``SLACK``)."""
    rows, dim = dense.shape
    codes = np.empty((rows, dim), dtype=np.int8)
    scales = np.empty(rows, dtype=np.float32)
    row_error = np.empty(rows, dtype=np.float32)
    error = max_hat = 0.0
    for start in range(0, rows, QUANT_BLOCK_ROWS):
        block = np.asarray(dense[start : start + QUANT_BLOCK_ROWS], dtype=np.float32)
        scale = (np.max(np.abs(block), axis=1, initial=0.0) / np.float32(127)).astype(np.float32)
        scale[~(scale > 0)] = 1  # an all-zero row: codes 0, exact
        code = np.rint(block / scale[:, None])
        np.clip(code, -127, 127, out=code)  # a quotient that rounds up to 128 is clipped: its error is counted
        codes[start : start + block.shape[0]] = code
        scales[start : start + block.shape[0]] = scale
        hat = code.astype(np.float64) * scale[:, None]  # exact: 8-bit codes times 24-bit scales
        diff = block.astype(np.float64) - hat
        errors = np.sqrt(np.einsum("ij,ij->i", diff, diff)) * (1 + SLACK)
        rounded = errors.astype(np.float32)  # float32, rounded up where it rounded down: still an upper bound
        row_error[start : start + block.shape[0]] = np.where(rounded < errors, np.nextafter(rounded, np.inf), rounded)
        error = max(error, float(np.max(errors, initial=0.0)))
        max_hat = max(max_hat, math.sqrt(float(np.max(np.einsum("ij,ij->i", hat, hat), initial=0.0))))
    return Int8Codes(codes, scales, error, max_hat * (1 + SLACK), row_error)


class SimsimdInt8(Kernel):
    """Int8 dot products (simsimd: AVX-512 VNNI, AVX2 or NEON): the vectors as int8 codes with a scale per row
    (``quantize_int8``), the query quantized the same way per scan. The integer dot product of two code rows is
    exact (at most 384 · 127² in int32, exact in float32 below 2²⁴); it is scaled by the row's and the query's scale
    in float32. A quarter of the float32 scan's bytes: the fastest first stage here, and it reads the int8 copy that
    the serving copies map, shared by every worker.

    Error bound (``error_bound``): ``q·v − q̂·v̂ = q·(v − v̂) + (q − q̂)·v̂``, so ``|q·v − q̂·v̂| ≤ ‖q‖·E + ‖q − q̂‖·H``
    with ``E``, ``H`` the segment's largest ``‖v − v̂‖``, ``‖v̂‖``; two float32 roundings of the scaling add
    ``2u/(1 − 2u)·|a|``; the exact score's own rounding ``γ_d·‖q‖‖v‖``."""

    name = "simsimd int8"
    reads_int8 = True
    rounds_query = False
    rounds_output = False

    def available(self) -> bool:
        import simsimd

        capabilities = simsimd.get_capabilities()
        return any(on for name, on in capabilities.items() if name != "serial")  # no SIMD: slower than float16

    def pack(self, dense: np.ndarray) -> Int8Codes:
        return quantize_int8(dense)

    def view_int8(self, codes: Int8Codes) -> Int8Codes:
        return codes

    def prepare(self, query: np.ndarray) -> tuple[np.ndarray, np.float32, float]:
        """(query codes as a (1, dim) row, the query's scale, ``‖q − q̂‖``)."""
        largest = float(np.max(np.abs(query), initial=0.0))
        scale = np.float32(largest / 127) if largest > 0 else np.float32(1)
        code = np.clip(np.rint(query / scale), -127, 127)
        error = float(np.linalg.norm(query.astype(np.float64) - code.astype(np.float64) * float(scale)))
        return code.astype(np.int8)[None, :], scale, error * (1 + SLACK)

    def product(
        self, packed: Int8Codes, query: tuple[np.ndarray, np.float32, float], out: np.ndarray | None = None
    ) -> np.ndarray:
        import simsimd

        code, scale, _ = query
        scores = np.empty(packed.codes.shape[0], dtype=np.float32) if out is None else out
        if scores.size:
            simsimd.cdist(code, packed.codes, metric="dot", out=scores[None, :], threads=1)  # releases the GIL
        np.multiply(scores, packed.scales, out=scores)
        np.multiply(scores, scale, out=scores)
        return scores


# The int8 scan reads a quarter of the float32 bytes from the int8 copy the serving copies hold (``share_int8``),
# mapped and shared by every worker: the fastest here, and the least memory. FBGEMM's packed float16 is a private
# copy per worker (2 bytes per dimension and row); ``torch.mv`` scans the shared float16 copy (``share_half``).
# ``LIVEMEM_DENSE_KERNEL=int8|fbgemm|torch-half`` puts one first (docs/dense-scan.md has the trade measured).
KERNEL_ENV = "LIVEMEM_DENSE_KERNEL"
_BY_NAME: dict[str, Kernel] = {"int8": SimsimdInt8(), "fbgemm": FbgemmHalf(), "torch-half": TorchHalf()}
KERNELS: tuple[Kernel, ...] = tuple(
    sorted(_BY_NAME.values(), key=lambda k: k is not _BY_NAME.get(_TUNING.kernel or ""))
)  # the one named first (stable sort: else int8, FBGEMM, torch.mv, the fastest first)
_CHOSEN: list[Kernel | None] = []
_CHOSEN_LOCK = threading.Lock()


def first_stage_kernel() -> Kernel | None:
    """The first kernel that is available here and keeps to its error model on the probe (once per process;
    ``available`` again on every scan, as torch's flags can change). None: every top-k scores rows exactly."""
    with _CHOSEN_LOCK:
        if not _CHOSEN:
            try:
                import torch  # noqa: F401
            except ImportError:  # pragma: no cover - torch is a dependency
                _CHOSEN.append(None)
            else:
                _CHOSEN.append(next((k for k in KERNELS if _safe(k.available) and _probe(k)), None))
                if _CHOSEN[0] is None:
                    log.warning("no float16 product keeps to its error bound here: dense top-k scores every row")
        kernel = _CHOSEN[0]
    return kernel if kernel is not None and kernel.available() else None


def _safe(check: Callable[[], bool]) -> bool:
    try:
        return check()
    except Exception:  # an operator missing from this torch build: the kernel is not available
        return False


def _probe(kernel: Kernel) -> bool:
    if kernel.reads_int8:
        return _probe_int8(kernel)
    return _probe_half(kernel)


def _probe_int8(kernel: Kernel) -> bool:
    """The integer dot products must be exact: rows at the ends of the code range (the largest sums, of both signs),
    alternating signs that cancel, and random codes, against numpy's int64 sums."""
    rng = np.random.default_rng(0)
    dim = 384
    codes = np.vstack(
        [np.full(dim, 127), np.full(dim, -127), np.tile([127, -127], dim // 2), rng.integers(-127, 128, (61, dim))]
    ).astype(np.int8)
    for query in (np.full(dim, 127), np.full(dim, -127), rng.integers(-127, 128, dim)):
        query = query.astype(np.int8)
        ones = np.ones(codes.shape[0], dtype=np.float32)
        got = kernel.product(Int8Codes(codes, ones, 0.0, 0.0), (query[None, :], np.float32(1), 0.0))
        if not np.array_equal(got.astype(np.int64), codes.astype(np.int64) @ query.astype(np.int64)):
            return False
    return True


def _probe_half(kernel: Kernel) -> bool:
    """Cases where float16 partial sums, or products rounded to float16, miss by more than the kernel's error
    model allows (float32 sums of exact products; its declared roundings): large terms first in every lane then
    small ones that a float16 sum drops; pairs ``a·b − fl16(a·b)`` whose rounding errors add up while the sum nearly
    cancels; random rows of mixed magnitudes."""
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
        v32, q32 = vectors.astype(np.float32), query.astype(np.float32)
        got = np.asarray(kernel.product(kernel.pack(v32), q32), dtype=np.float64)
        v = v32.astype(np.float16).astype(np.float64)
        q = (q32.astype(np.float16) if kernel.rounds_query else q32).astype(np.float64)
        true = v @ q  # the products of float16 and float32 values are exact in float64, their sum far closer
        magnitude = np.abs(v) @ np.abs(q)
        allowed = gamma * magnitude
        if kernel.rounds_output:
            allowed = allowed + U16 * (np.abs(true) + allowed) / (1 - U16) + SUB16
        if not np.all(np.abs(got - true) <= allowed):
            return False
    return True


@dataclass(frozen=True)
class _Packed:
    """A segment's vectors packed for the first stage, with what the error bound needs."""

    kernel: Kernel
    blocks: list[tuple[int, int, Any]]  # (first row, end row, the kernel's packed vectors of those rows)
    max_norm: float  # an upper bound of the largest row L2 norm (of the float32 vectors), inf when not usable
    usable: bool  # finite and small enough for the kernel
    error: float = 0.0  # int8: the largest ‖v − v̂‖ of the segment's rows
    max_hat: float = 0.0  # int8: the largest ‖v̂‖
    row_error: np.ndarray | None = None  # int8: each row's ‖v − v̂‖ (rounded up), for per-row bounds


_PACKED: dict[tuple[int, str], tuple[weakref.ref, _Packed]] = {}
_PACKED_LOCK = threading.Lock()
INT8_MAX_NORM = 1e30  # above this the float32 scaling of an int8 product could overflow


def max_row_norm(dense: np.ndarray) -> float:
    """An upper bound of the largest row L2 norm of ``dense`` (inf when a row is not finite)."""
    squares = np.einsum("ij,ij->i", dense, dense, dtype=np.float64) if dense.size else np.zeros(1)
    largest = float(np.max(squares))
    # einsum sums in float64: its error is far below the slack; NaN / inf make the segment unusable
    return math.sqrt(largest) * (1 + SLACK) if math.isfinite(largest) else math.inf


# Copies of a segment's vectors that the serving copies map (so every worker shares them), registered per array:
# (id(dense), "half" | "int8") -> (a weak reference to dense, the copy, max_row_norm(dense)).
_SHARED: dict[tuple[int, str], tuple[weakref.ref, Any, float]] = {}


def _share(dense: np.ndarray, kind: str, copy: Any, max_norm: float) -> None:
    key = (id(dense), kind)
    with _PACKED_LOCK:
        if key not in _SHARED or _SHARED[key][0]() is not dense:
            weakref.finalize(dense, _forget_shared, key)
        _SHARED[key] = (weakref.ref(dense), copy, max_norm)


def _shared(dense: np.ndarray, kind: str) -> tuple[Any, float] | None:
    with _PACKED_LOCK:
        found = _SHARED.get((id(dense), kind))
    return (found[1], found[2]) if found is not None and found[0]() is dense else None


def _forget_shared(key: tuple[int, str]) -> None:
    with _PACKED_LOCK:
        found = _SHARED.get(key)
        if found is not None and found[0]() is None:
            del _SHARED[key]


def share_half(dense: np.ndarray, half: np.ndarray, max_norm: float) -> None:
    """Register ``half``, ``dense`` rounded to float16 (to nearest), and ``max_row_norm(dense)``: a kernel that
    reads plain float16 scans it in place instead of packing a private copy (the serving copies map it, so every
    worker shares it), and the bound needs no pass over ``dense``."""
    if half.shape != dense.shape or half.dtype != np.float16:
        raise ValueError(f"a float16 copy of shape {dense.shape} was expected, got {half.dtype} {half.shape}")
    _share(dense, "half", half, max_norm)


def share_int8(dense: np.ndarray, codes: Int8Codes, max_norm: float) -> None:
    """Register ``quantize_int8(dense)`` (as the serving copies hold it) and ``max_row_norm(dense)``: the int8
    kernel scans it in place instead of quantizing a private copy."""
    if codes.codes.shape != dense.shape or codes.codes.dtype != np.int8 or codes.scales.shape != dense.shape[:1]:
        raise ValueError(
            f"int8 codes of shape {dense.shape} were expected, got {codes.codes.dtype} {codes.codes.shape}"
        )
    _share(dense, "int8", codes, max_norm)


def packed(dense: np.ndarray, kernel: Kernel) -> _Packed:
    """A segment's vectors packed for ``kernel``, once per array per process (segments are shared by snapshots,
    and so are their packed copies); dropped when the array is."""
    key = (id(dense), kernel.name)
    with _PACKED_LOCK:
        cached = _PACKED.get(key)
        if cached is not None and cached[0]() is dense:
            return cached[1]
    shared = _shared(dense, "int8" if kernel.reads_int8 else "half")
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
        if shared is not None and kernel.reads_plain_half:
            blocks.append((start, end, kernel.view_half(shared[0][start:end])))
        else:
            blocks.append((start, end, kernel.pack(np.ascontiguousarray(dense[start:end], np.float32))))
    result = _Packed(kernel, blocks, max_norm, usable, error, max_hat, row_error)
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


def error_bound(
    kernel: Kernel, query: np.ndarray, parts: list[_Packed], prepared: Any = None
) -> tuple[float, float] | None:
    """``(b0, rho)``: ``|first-stage score − exact score| ≤ b0 + rho·|first-stage score|`` for every row of the
    segments ``parts`` (module docstring; ``SimsimdInt8`` for int8); None when the kernel could overflow."""
    norm = max(p.max_norm for p in parts)
    dim = query.size
    gamma = dim * U32 / (1 - dim * U32)
    q64 = query.astype(np.float64)
    q_norm = float(np.linalg.norm(q64))
    if kernel.reads_int8:
        if not (math.isfinite(q_norm) and q_norm * norm < INT8_MAX_NORM):
            return None
        q_norm, rest = int8_terms(kernel, query, parts, prepared)
        return (q_norm * max(p.error for p in parts) + rest) * (1 + SLACK) + 1e-30, INT8_RHO
    q_k = query.astype(np.float16).astype(np.float64) if kernel.rounds_query else q64
    qk_norm = float(np.linalg.norm(q_k))
    if not (math.isfinite(q_norm) and float(np.max(np.abs(q64), initial=0.0)) < F16_MAX):
        return None
    v_err = U16 * norm + SUB16 * math.sqrt(dim)  # ‖v − v̂‖
    v_hat = norm + v_err  # ‖v̂‖
    if qk_norm * v_hat * (1 + gamma) >= F16_MAX:
        return None
    b0 = qk_norm * v_err + float(np.linalg.norm(q64 - q_k)) * norm  # the roundings of vector and query
    b0 += gamma * qk_norm * v_hat  # float32 sums of the (exact) products
    b0 += gamma * q_norm * norm  # the exact score's own float32 rounding
    rho = 0.0
    if kernel.rounds_output:  # rounding a sum t to float16: |a − t| ≤ 2⁻¹¹|t| + 2⁻²⁵ ⇒ ≤ rho·|a| + (1 + rho)·2⁻²⁵
        rho = U16 / (1 - U16)
        b0 += (1 + rho) * SUB16
    return b0 * (1 + SLACK) + 1e-30, rho * (1 + SLACK)


INT8_RHO = 2 * U32 / (1 - 2 * U32) * (1 + SLACK)  # the exact integer product times two scales, rounded twice


def int8_terms(kernel: Kernel, query: np.ndarray, parts: list[_Packed], prepared: Any = None) -> tuple[float, float]:
    """The int8 bound of a row is ``(‖q‖·‖v − v̂‖ + rest)·(1 + SLACK) + 1e-30 + INT8_RHO·|a|``: ``(‖q‖, rest)``, rest
    being the query's rounding ``‖q − q̂‖·max ‖v̂‖`` and the exact score's own float32 rounding ``γ_d·‖q‖·max ‖v‖``."""
    dim = query.size
    gamma = dim * U32 / (1 - dim * U32)
    q_norm = float(np.linalg.norm(query.astype(np.float64)))
    query_error = (prepared if prepared is not None else kernel.prepare(query))[2]  # ‖q − q̂‖
    rest = query_error * max(p.max_hat for p in parts) + gamma * q_norm * max(p.max_norm for p in parts)
    return q_norm, rest


class DenseRows:
    """The vectors of a snapshot's rows, kept per segment (shared with other snapshots): ``rows @ vector``
    scores every row (``exact_scores``); ``scan(vector, mask)`` finds the best rows exactly without scoring every
    row in float32; ``materialize()`` is the whole matrix in row order (a copy)."""

    def __init__(self, parts: list[tuple[np.ndarray, np.ndarray]], dim: int, sentences: list | None = None) -> None:
        self.parts = parts  # (segment vectors, the segment rows this snapshot holds, in order)
        # per part, its segment's ``livemem.index.sentences.Sentences`` (None: the segment has no sentence vectors)
        self.sentences = sentences if sentences is not None else [None] * len(parts)
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
            out[where] = _gathered_scores(dense, held[local], query)  # reads only those rows, in place
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
        kernel = first_stage_kernel()
        for dense, _ in self.parts if kernel is not None else ():
            packed(dense, kernel)

    def materialize(self) -> np.ndarray:
        if not self.parts:
            return np.zeros(self.shape, dtype=np.float32)
        return np.concatenate([dense[rows] for dense, rows in self.parts])


def _query(vector: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(vector, dtype=np.float32).reshape(-1)


# Below this many allowed rows per row of the snapshot, scoring the allowed rows exactly costs less than the float16
# scan, which reads every row of every segment (measured here: a row gathered and scored exactly costs about 15 rows
# of the float16 scan, which also rescores about k rows).
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
        self._approx: np.ndarray | None = None  # float16 scores as float32, -inf where not allowed
        self._pending: tuple | None = None  # blocks being scanned on the pool (``_settle``)
        self.bound: tuple[float, float] = (math.inf, 0.0)  # |approx − exact| ≤ b0 + rho·|approx|
        self._row_bounds: tuple[list[_Packed], float, float] | None = None  # int8: (parts, ‖q‖, rest): int8_terms
        self.exact = np.full(dense.size, np.nan, dtype=np.float32)  # exact scores computed so far (NaN: not yet)
        self.known = np.zeros(dense.size, dtype=bool)
        if self.allowed.size > EXACT_SHARE * dense.size:
            self._first_stage()

    def _first_stage(self) -> None:
        kernel = first_stage_kernel()
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
        # (part, packed block, where its scores go: a slice of approx, or None: picked from the whole part later;
        # the block's rows the snapshot holds when it does not hold them all)
        jobs: list[tuple[int, Any, np.ndarray | None, np.ndarray | None]] = []
        for p, part in enumerate(parts):
            for a, b, block in part.blocks:
                first, end, local = self.dense.block_rows(p, a, b)
                out = None if local is False else approx[self.dense.offsets[p] + first : self.dense.offsets[p] + end]
                jobs.append((p, block, out, None if local is False or local is True else local))
        pool = scan_pool() if self.dense.size >= PARALLEL_MIN_ROWS and len(jobs) > 1 else None
        if pool is None:
            self._assemble(parts, jobs, [_scan_block(kernel, query, *job[1:]) for job in jobs], approx)
        else:  # the blocks are scanned on the pool while the caller goes on (BM25): ``_settle`` collects them
            futures = [pool.submit(_scan_block, kernel, query, *job[1:]) for job in jobs]
            self._pending = (parts, jobs, futures, approx, kernel, query)

    @property
    def approx(self) -> np.ndarray | None:
        """The first stage's scores (float16 products as float32, -inf where not allowed); None: not run."""
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
            products = [
                f.result() if product is None else product for f, product in zip(futures, products, strict=True)
            ]
            self._assemble(parts, jobs, products, approx)

    def _assemble(self, parts: list[_Packed], jobs: list, products: list[np.ndarray], approx: np.ndarray) -> None:
        scored: list[list[np.ndarray]] = [[] for _ in parts]
        for (p, _, out, _), product in zip(jobs, products, strict=True):
            if out is None:  # a part whose rows are not in segment order: picked below
                scored[p].append(product)
        for (_, rows), pieces, start in zip(self.dense.parts, scored, self.dense.offsets, strict=False):
            if pieces:
                whole = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
                approx[start : start + rows.size] = whole[rows]
        if self.allowed.size < self.dense.size:
            approx[~self.mask] = -np.inf
        self._approx = approx

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
            # the bound grows with |a|, so lower and upper bounds are monotone in a: one threshold on a suffices.
            # The rows of the k best first-stage scores are scored exactly first: the k-th best of their exact
            # scores is a lower bound of the k-th best of all, about one bound higher than the k-th best lower
            # bound (a − b), so the rows left to score are those within one bound of it, not two.
            kth = _kth_at_most(a, k)
            lower = kth - (b0 + rho * abs(kth))
            if math.isfinite(kth):  # then every row at or above it is allowed (the others are at -inf)
                exact = self._exact(np.flatnonzero(a >= kth))
                if exact.size >= k:
                    lower = max(lower, float(np.partition(exact, exact.size - k)[exact.size - k]))
            # the rows whose upper bound reaches it: a + b0 + rho·|a| ≥ lower ⇔ a ≥ limit
            gap = lower - b0
            limit = gap / (1 + rho) if gap >= 0 else gap / (1 - rho)
            limit -= SLACK * (abs(limit) + 1e-30)
            threshold = np.float32(limit)
            if threshold > limit:  # float32 rounded up: the next float32 below
                threshold = np.nextafter(threshold, np.float32(-np.inf))
            rows = np.flatnonzero(a >= threshold)
            if self._row_bounds is not None and rows.size:
                rows = self._within_row_bounds(rows, lower)
        else:
            allowed = self.allowed
            a = a[allowed].astype(np.float64)
            spread = b0 + rho * np.abs(a)
            low = (a - spread) * weight[allowed]
            high = (a + spread) * weight[allowed]
            kth = float(np.partition(low, low.size - k)[low.size - k])
            rows = allowed[high >= kth - SLACK * (abs(kth) + 1e-30)]
        return rows, self._exact(rows)

    def _within_row_bounds(self, rows: np.ndarray, lower: float) -> np.ndarray:
        """The ``rows`` whose own upper bound (their quantization error, not the segment's largest) reaches
        ``lower``: the int8 error of a row varies with its largest coordinate, about 2× between rows."""
        parts, q_norm, rest = self._row_bounds
        errors = np.empty(rows.size, dtype=np.float64)
        for p, where, local in self.dense.by_part(rows):
            errors[where] = parts[p].row_error[self.dense.parts[p][1][local]]
        a = self._approx[rows].astype(np.float64)
        upper = a + (q_norm * errors + rest) * (1 + SLACK) + 1e-30 + INT8_RHO * np.abs(a)
        return rows[upper >= lower - SLACK * (abs(lower) + 1e-30)]

    def top(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best allowed rows by exact score, best first, and their scores."""
        rows, scores = self.candidates(k)
        order = top_order(scores, k)
        return rows[order], scores[order]


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


def _plain(weight: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(weight)) and np.all(weight >= 0))
