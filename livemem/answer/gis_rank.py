"""The one ranking of GBIM entities by meaning: ``POST /gis/query``, the MCP ``gis_query`` tool and the ``spatial``
evidence of /context and /chat (``livemem.answer.evidence``) all rank with ``rank_entities``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from livemem.answer.results import gis_hit
from livemem.query.fusion import top_order
from livemem.query.gis_index import GisIndex


@dataclass(frozen=True)
class RankedEntities:
    """Rows of a ``GisIndex`` best first, their scores (cosine of query and description), and how many entities
    met the constraints (``candidates``)."""

    rows: np.ndarray
    scores: np.ndarray
    candidates: int


def rank_entities(gis: GisIndex, vector: np.ndarray, k: int, mask: np.ndarray) -> RankedEntities:
    """The ``k`` entities of ``mask`` (``GisIndex.mask``: access and constraints applied before ranking) most like
    the query ``vector``; ties go to the lower row. Exact: the chunks' two-stage top-k (``livemem.index.dense``)
    scores the kept rows exactly when they are few (a bbox, a radius, a county), else scans the int8 codes of every
    row and rescores in float32 only the rows whose error bound lets them reach the top ``k``."""
    rows = np.flatnonzero(mask)
    if not rows.size or k <= 0:
        return RankedEntities(rows[:0], np.zeros(0, dtype=np.float32), int(rows.size))
    found, scores = gis.vectors.scan(vector, mask, rows).candidates(min(k, rows.size))
    order = top_order(scores, min(k, rows.size))
    return RankedEntities(found[order], scores[order], int(rows.size))


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
