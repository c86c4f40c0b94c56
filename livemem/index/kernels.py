"""The dense score of a row, exactly (``exact_scores``), and the first-stage kernels that approximate it.

**The dense score** of a row is the float32 dot product of its vector with the query vector (cast to float32),
computed by a compiled loop whose order of operations depends on the row alone (``exact_scores``: numba, the GIL
released, the same vectorised loop for every row). It is the same float for a row wherever the row sits: a BLAS
matrix–vector product rounds a row differently by its position in the matrix (tail handling, threads), so a few
rows rescored on their own would not match a full scan bit for bit, and results could change with the segment
layout of a version.

**First-stage kernels** score every row cheaply, within a proven bound (``livemem.index.bounds``): by default an
**int8** scan (``SimsimdInt8``: codes with a float32 scale per row, ``quantize_int8``; the serving copies hold them,
so every worker maps one copy; a quarter of the float32 bytes, and exact integer dot products), else a float16 one
(``FbgemmHalf``: FBGEMM's float16 GEMM, else ``TorchHalf``: ``torch.mv``; half the bytes, a private copy per
worker). Each is checked once per process on rows where it would break its error model (``_probe_int8``,
``_probe_half``); ``first_stage_kernel`` is the first that is available and passes.
"""

from __future__ import annotations

import logging
import math
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from livemem.index.bounds import SLACK, SUB16, U16, U32

log = logging.getLogger(__name__)

# One loop per row, compiled once for every row: LLVM may reorder the row's sum (``reassoc``: 16 float32 lanes here)
# and fuse multiply-adds (``contract``), but it does so the same way for every row, at any address (no alignment
# peeling), so a row's score is the same float in any array, at any position (tests/unit/test_dense.py). Neither
# flag assumes finite values. 3,000 rows of 384 dimensions: 0.15 ms, against 0.58 ms in a fixed order of sixteen
# running sums and 0.41 ms for numpy's gather and product.
EXACT_MATH = {"reassoc", "contract"}


@numba.njit(nogil=True, cache=True, fastmath=EXACT_MATH)
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
    return gathered_scores(vectors, np.arange(vectors.shape[0]), query)


def gathered_scores(vectors: np.ndarray, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``exact_scores(vectors[rows], query)``, without gathering the rows first."""
    vectors, query = _float32(vectors, query)
    out = np.empty(rows.size, dtype=np.float32)
    if out.size:
        _dot_rows(vectors, np.asarray(rows, dtype=np.int64), query, out)
    return out


class Kernel:
    """A first-stage matrix–vector product, and what its error bound (``livemem.index.bounds``) needs to know of it:
    whether it scans int8 codes, and for a float16 one whether it rounds the query and the result to float16 (it
    always rounds the vectors, to nearest)."""

    name = "abstract"
    rounds_query = True
    rounds_output = True
    reads_int8 = False  # scans int8 codes with a scale per row (``Int8Codes``), the copy the serving copies share

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

    def available(self) -> bool:
        import torch

        allow = getattr(torch._C, "_get_cpu_allow_fp16_reduced_precision_reduction", None)
        return not (allow is not None and allow())

    def pack(self, dense: np.ndarray) -> Any:
        import torch

        return torch.from_numpy(dense.astype(np.float16))

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
        return any(on for name, on in capabilities.items() if name != "serial")  # no SIMD: slower than float16 kernels

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


# The int8 scan reads a quarter of the float32 bytes from the int8 copy the serving copies hold
# (``livemem.index.scan.share_int8``), mapped and shared by every worker: the fastest here, and the least memory.
# FBGEMM's packed float16 and ``torch.mv``'s float16 are private copies per worker (2 bytes per dimension and row).
# ``LIVEMEM_DENSE_KERNEL=int8|fbgemm|torch-half`` (``EngineConfig.kernel``) puts one first (docs/dense-scan.md has the
# trade measured).
BY_NAME: dict[str, Kernel] = {"int8": SimsimdInt8(), "fbgemm": FbgemmHalf(), "torch-half": TorchHalf()}


def kernel_order(first: str | None = None) -> tuple[Kernel, ...]:
    """The kernels in the order they are tried: the one named ``first`` (a key of ``BY_NAME``), then int8, FBGEMM,
    ``torch.mv``, the fastest first (a stable sort)."""
    return tuple(sorted(BY_NAME.values(), key=lambda k: k is not BY_NAME.get(first or "")))


KERNELS: tuple[Kernel, ...] = kernel_order()  # every kernel, in the default order (a constant)
# the kernel chosen for each kernel named first (``EngineConfig.kernel``; None: the default order), and whether each
# kernel kept to its error model on the probe: both found once per process (the probe is a property of the build)
_CHOSEN: dict[str | None, Kernel | None] = {}
_PROBED: dict[str, bool] = {}
_CHOSEN_LOCK = threading.Lock()


def first_stage_kernel(first: str | None = None) -> Kernel | None:
    """The first kernel of ``kernel_order(first)`` that is available here and keeps to its error model on the probe
    (chosen once per process and ``first``: ``EngineConfig.kernel``, which ``DenseRows.kernel`` passes; ``available``
    again on every scan, as torch's flags can change). None: every top-k scores rows exactly."""
    with _CHOSEN_LOCK:
        if first not in _CHOSEN:
            try:
                import torch  # noqa: F401
            except ImportError:  # pragma: no cover - torch is a dependency
                _CHOSEN[first] = None
            else:
                _CHOSEN[first] = next((k for k in kernel_order(first) if _safe(k.available) and _passes(k)), None)
                if _CHOSEN[first] is None:
                    log.warning("no first-stage kernel keeps to its error bound here: dense top-k scores every row")
        kernel = _CHOSEN[first]
    return kernel if kernel is not None and kernel.available() else None


def _passes(kernel: Kernel) -> bool:
    """``_probe(kernel)``, once per kernel and process (the caller holds ``_CHOSEN_LOCK``)."""
    if kernel.name not in _PROBED:
        _PROBED[kernel.name] = _probe(kernel)
    return _PROBED[kernel.name]


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
