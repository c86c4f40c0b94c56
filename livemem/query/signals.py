"""The living-memory signals a ranking weighs candidates with: recency, attention matched to like past questions
and the related chunks suggested beside the results (``consider_also``; docs/attention.md). What they weigh is the
snapshot's ``MemorySignals`` (``snap.signals``: attention, related chunks and question memory, read with the
version by ``livemem.version.signals``)."""

from __future__ import annotations

import time

import numpy as np

from livemem.engine.snapshot import Snapshot
from livemem.query.types import Suggestion
from livemem.version.signals import QuestionMemory

ATTENTION_HALF = 1.0  # matched attention (≈ confirmations for like questions) giving half of that gain
QUESTION_SIMILARITY = 0.6  # cosine from which a past question counts as like this one (fully at 1)
PARENT_SHARE = 0.5  # share of the matched attention of the other chunks of its parent document a chunk carries


def recency_boost(snap: Snapshot, rows: np.ndarray, bias: float, half_life_days: float) -> np.ndarray:
    """``1 + bias * 0.5 ** (age / half_life)``: a chunk updated now gains ``bias`` × its score, one a
    half-life old half that; chunks without an update time gain nothing."""
    age_days = np.maximum(0.0, (time.time() - snap.columns["updated"][rows]) / 86_400.0)
    boost = bias * np.power(0.5, age_days / half_life_days)
    return 1.0 + np.nan_to_num(boost, nan=0.0)


def attention_multiplier(snap: Snapshot, rows: np.ndarray, boost: float, vector: np.ndarray) -> np.ndarray:
    """``1 + boost · e / (e + ATTENTION_HALF)`` per row, ``e`` its attention matched to this question
    (``matched_attention``): exactly 1 for a chunk nobody confirmed for a like question, rising with such
    confirmations towards ``1 + boost`` and never past it, and fading back to 1 as attention decays."""
    matched = matched_attention(snap, vector)[rows]
    return 1.0 + boost * matched / (matched + ATTENTION_HALF)


def matched_attention(snap: Snapshot, vector: np.ndarray) -> np.ndarray:
    """Per row of the snapshot: its attention × the share of its confirming questions that are like this one
    (cosine ``QUESTION_SIMILARITY`` → 0, 1 → fully), plus ``PARENT_SHARE`` of the same for the other chunks of
    its parent document. A chunk confirmed for other questions gains nothing here: popularity never travels."""
    memory = snap.signals.questions
    matched: np.ndarray = np.zeros(snap.size)
    if not memory.size:
        return matched
    likeness = np.clip((memory.vectors @ vector - QUESTION_SIMILARITY) / (1.0 - QUESTION_SIMILARITY), 0.0, 1.0)
    matched = np.bincount(memory.rows, weights=likeness * memory.share, minlength=snap.size)
    matched *= np.maximum(snap.signals.attention, 0.0)
    document = np.bincount(memory.parent_of, weights=matched, minlength=memory.parent_count)[memory.parent_of]
    return matched + PARENT_SHARE * np.maximum(document - matched, 0.0)


def question_memory(snap: Snapshot) -> QuestionMemory:
    """The snapshot's question memory (``snap.signals.questions``: read once per snapshot, at its first use)."""
    return snap.signals.questions


CONSIDER_ALSO_MIN_ATTENTION = 0.5


def consider_also(snap: Snapshot, result_rows: list[int], mask: np.ndarray, limit: int) -> list[Suggestion]:
    """Up to ``limit`` chunks related to the results (often retrieved together with them, per the nightly
    rollup) that are not results themselves, pass the query's filters and role, and carry attention of at least
    0.5; ranked by Σ relation weight × attention."""
    related = snap.signals.related
    if limit <= 0 or not related or not result_rows:
        return []
    shown = set(result_rows)
    attention = snap.signals.attention
    strength: dict[int, float] = {}
    sources: dict[int, list[int]] = {}
    for row in result_rows:
        for other, weight in related.get(row, ()):
            if other in shown or not mask[other] or attention[other] < CONSIDER_ALSO_MIN_ATTENTION:
                continue
            strength[other] = strength.get(other, 0.0) + weight * float(attention[other])
            sources.setdefault(other, []).append(row)
    best = sorted(strength, key=lambda r: (-strength[r], snap.ids[r]))[:limit]
    return [Suggestion(r, strength[r], sources[r]) for r in best]
