"""The one ranking of GBIM entities by meaning: ``POST /gis/query``, the MCP ``gis_query`` tool and the ``spatial``
evidence of /context and /chat (``livemem.answer.evidence``) all rank with ``rank_entities``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numba
import numpy as np

from livemem.answer.results import gis_hit
from livemem.index import scan
from livemem.index.bounds import INT8_MAX_NORM, INT8_RHO, SLACK, int8_terms
from livemem.index.kernels import BY_NAME, gathered_scores
from livemem.query.fusion import top_order
from livemem.query.gis_index import GisIndex

# Kept rows scored over themselves alone (``_few``): at most GRAPH_EXACT_ROWS, or EXACT_SHARE of the entities (the
# shares at which ``livemem.index.scan`` scores a filter's rows exactly rather than scanning or walking every row; at
# 1M, a 0.5° bbox keeps ≈ 32k). Above INT8_FEW_ROWS of them their int8 codes are scored first, in the copy's spatial
# order (``GisIndex.int8_grid``: the rows of a bbox, a radius or a county are a few runs of neighbouring rows), then
# exactly only the rows whose error bound lets them reach the top k. At 1M, 32k kept rows: 6.0 ms read one by one
# from the row-ordered codes (a page per row), 1.8 ms from the spatial order, ≈ 12 ms in float32.
INT8_FEW_ROWS = 2_000
INT8_EXACT_DIM = 1_040  # dim · 127² < 2²⁴: an int8 row product is an exact integer in float32 up to this


@dataclass(frozen=True)
class RankedEntities:
    """Rows of a ``GisIndex`` best first, their scores (cosine of query and description), and how many entities
    met the constraints (``candidates``)."""

    rows: np.ndarray
    scores: np.ndarray
    candidates: int


def rank_entities(gis: GisIndex, vector: np.ndarray, k: int, mask: np.ndarray) -> RankedEntities:
    """The ``k`` entities of ``mask`` (``GisIndex.mask``: access and constraints applied before ranking) most like
    the query ``vector``; ties go to the lower row. Exact: a few kept rows (a bbox, a radius, a county) are ranked
    over themselves alone (``_few``); more are ranked by the chunks' two-stage top-k (``livemem.index.dense``),
    which scans the int8 codes of every row, or walks the entities' graph, and rescores exactly."""
    rows = np.flatnonzero(mask)
    if not rows.size or k <= 0:
        return RankedEntities(rows[:0], np.zeros(0, dtype=np.float32), int(rows.size))
    k = min(k, int(rows.size))
    if rows.size <= max(scan.GRAPH_EXACT_ROWS, scan.EXACT_SHARE * gis.size):
        found, scores = _few(gis, np.ascontiguousarray(vector, dtype=np.float32).reshape(-1), k, rows)
    else:
        found, scores = gis.vectors.scan(vector, mask, rows).candidates(k)
    order = top_order(scores, k)
    return RankedEntities(found[order], scores[order], int(rows.size))


def _few(gis: GisIndex, query: np.ndarray, k: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows (ascending) among ``rows`` that hold every row scoring at least the ``k``-th best exact score, and their
    exact scores (``gathered_scores``, the float every path gives a row): ``top_order`` over them is the top ``k``
    of all ``rows``, ties included. Many rows: their int8 codes are scored first (``_int8_rows``, as
    ``SimsimdInt8`` scores a block) and only those whose own error bound (``livemem.index.bounds``: the row's
    quantization error, the query's, the float32 roundings) reaches the ``k``-th best lower bound are scored
    exactly; a row left out scores below the ``k``-th best, so no tie is lost."""
    # the int8 kernel's query codes and bound terms; its products are _int8_rows' own exact integer sums (no simsimd,
    # so no probe of it: ``first_stage_kernel`` would import torch in a worker that has no other use for it)
    codes, kernel = gis.int8, BY_NAME["int8"]
    if (
        rows.size <= INT8_FEW_ROWS
        or codes is None
        or codes.row_error is None
        or query.size > INT8_EXACT_DIM
        or not np.all(np.isfinite(query))
    ):
        return rows, gathered_scores(gis.dense, rows, query)
    part = scan.packed(gis.dense, kernel)  # the shared codes' bounds (max ‖v‖, max ‖v̂‖), once per process
    prepared = kernel.prepare(query)  # (query codes, the query's scale, ‖q − q̂‖)
    q_norm, rest = int8_terms(kernel, query, [part], prepared)
    if not (part.usable and math.isfinite(q_norm) and q_norm * part.max_norm < INT8_MAX_NORM):  # as error_bound
        return rows, gathered_scores(gis.dense, rows, query)
    where = rows  # the kept rows' places in ``codes``: their rows, or their positions in the spatial order
    if gis.int8_grid is not None and gis.grid_pos is not None and gis.grid_rows is not None:
        codes, seen = gis.int8_grid, np.zeros(gis.size, dtype=bool)
        seen[gis.grid_pos[rows]] = True
        where = np.flatnonzero(seen)  # ascending: read in the copy's order
    approx = np.empty(where.size, dtype=np.float32)
    _int8_rows(codes.codes, codes.scales, where, np.ascontiguousarray(prepared[0][0]), np.float32(prepared[1]), approx)
    a = approx.astype(np.float64)
    row_error = cast(np.ndarray, codes.row_error)  # checked above; the spatial order's copy always holds it
    spread = (q_norm * row_error[where].astype(np.float64) + rest) * (1 + SLACK) + 1e-30 + INT8_RHO * np.abs(a)
    lower = a - spread
    kth = float(np.partition(lower, lower.size - k)[lower.size - k])  # at most the k-th best exact score
    found = where[a + spread >= kth - SLACK * (abs(kth) + 1e-30)]
    if where is not rows and gis.grid_rows is not None:  # where is rows unless grid_rows is set
        found = np.sort(gis.grid_rows[found])
    return found, gathered_scores(gis.dense, found, query)


@numba.njit(nogil=True, cache=True)
def _int8_rows(codes, scales, rows, query, scale, out):  # pragma: no cover - compiled
    """``SimsimdInt8.product`` over the gathered ``rows`` of ``codes`` (by row, or in the spatial order): each
    row's exact integer product with the query codes, as float32, times the row's scale, times the query's (two
    float32 roundings, as the int8 bound counts)."""
    for k in range(rows.size):
        r = rows[k]
        row = codes[r]
        total = np.int32(0)
        for i in range(query.size):
            total += np.int32(row[i]) * np.int32(query[i])
        out[k] = np.float32(total) * scales[r] * scale


def ranked_hits(
    gis: GisIndex, ranked: RankedEntities, near: tuple[float, float, float] | None = None
) -> list[dict[str, Any]]:
    """The ranked entities as search results (``livemem.answer.results.gis_hit``), with the distance to ``near``'s
    point (lat, lon, radius) when a radius was searched."""
    distances = gis.distances_km(ranked.rows, near[0], near[1]) if near else [None] * ranked.rows.size
    return [
        gis_hit(gis.entities[int(row)], float(score), None if d is None else float(d))
        for row, score, d in zip(ranked.rows, ranked.scores, distances, strict=True)
    ]
