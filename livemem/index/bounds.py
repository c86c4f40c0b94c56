"""The first stage's error bounds: how far a first-stage score (int8 or float16) can be from the exact score.

``error_bound`` gives ``(b0, rho)`` with ``|first-stage score − exact score| ≤ b0 + rho·|first-stage score|`` for every
row of the segments scanned; ``livemem.index.scan`` turns it into the candidates scored exactly.

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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

F16_MAX = 60_000.0  # below float16's largest finite value (65,504): larger values would overflow the scan
U32 = 2.0**-24  # unit roundoff of float32
U16 = 2.0**-11  # unit roundoff of float16
SUB16 = 2.0**-25  # half the spacing of float16 subnormals: the absolute rounding error below 2^-14
SLACK = 1e-9  # relative slack added to every bound computed in float64 (its own rounding is ~1e-16)
INT8_MAX_NORM = 1e30  # above this the float32 scaling of an int8 product could overflow
INT8_RHO = 2 * U32 / (1 - 2 * U32) * (1 + SLACK)  # the exact integer product times two scales, rounded twice


class FirstStage(Protocol):
    """What a bound needs to know of a first-stage kernel (``livemem.index.kernels.Kernel``): whether it scans int8
    codes, whether it rounds the query and the result to float16, and the query as it takes it."""

    @property
    def reads_int8(self) -> bool: ...

    @property
    def rounds_query(self) -> bool: ...

    @property
    def rounds_output(self) -> bool: ...

    def prepare(self, query: np.ndarray) -> Any: ...


class PackedNorms(Protocol):
    """What a bound needs to know of a segment packed for the first stage (``livemem.index.scan.Packed``)."""

    @property
    def max_norm(self) -> float: ...

    @property
    def error(self) -> float: ...

    @property
    def max_hat(self) -> float: ...


def max_row_norm(dense: np.ndarray) -> float:
    """An upper bound of the largest row L2 norm of ``dense`` (inf when a row is not finite)."""
    squares = np.einsum("ij,ij->i", dense, dense, dtype=np.float64) if dense.size else np.zeros(1)
    largest = float(np.max(squares))
    # einsum sums in float64: its error is far below the slack; NaN / inf make the segment unusable
    return math.sqrt(largest) * (1 + SLACK) if math.isfinite(largest) else math.inf


def error_bound(
    kernel: FirstStage, query: np.ndarray, parts: Sequence[PackedNorms], prepared: Any = None
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


def int8_terms(
    kernel: FirstStage, query: np.ndarray, parts: Sequence[PackedNorms], prepared: Any = None
) -> tuple[float, float]:
    """The int8 bound of a row is ``(‖q‖·‖v − v̂‖ + rest)·(1 + SLACK) + 1e-30 + INT8_RHO·|a|``: ``(‖q‖, rest)``, rest
    being the query's rounding ``‖q − q̂‖·max ‖v̂‖`` and the exact score's own float32 rounding ``γ_d·‖q‖·max ‖v‖``."""
    dim = query.size
    gamma = dim * U32 / (1 - dim * U32)
    q_norm = float(np.linalg.norm(query.astype(np.float64)))
    query_error = (prepared if prepared is not None else kernel.prepare(query))[2]  # ‖q − q̂‖
    rest = query_error * max(p.max_hat for p in parts) + gamma * q_norm * max(p.max_norm for p in parts)
    return q_norm, rest
