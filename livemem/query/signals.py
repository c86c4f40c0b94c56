"""The living-memory signals a ranking weighs candidates with: recency, attention matched to like past questions
(``QuestionMemory``, loaded once per snapshot) and the related chunks suggested beside the results
(``consider_also``; docs/attention.md)."""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass

import numpy as np

from livemem.query.types import Suggestion
from livemem.version.reader import Snapshot

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
    memory = question_memory(snap)
    matched = np.zeros(snap.size)
    if not memory.size:
        return matched
    likeness = np.clip((memory.vectors @ vector - QUESTION_SIMILARITY) / (1.0 - QUESTION_SIMILARITY), 0.0, 1.0)
    matched = np.bincount(memory.rows, weights=likeness * memory.share, minlength=snap.size)
    matched *= np.maximum(snap.columns["attention"], 0.0)
    document = np.bincount(memory.parent_of, weights=matched, minlength=memory.parent_count)[memory.parent_of]
    return matched + PARENT_SHARE * np.maximum(document - matched, 0.0)


@dataclass(frozen=True)
class QuestionMemory:
    """The questions chunks were confirmed useful for (``attention_questions``, written by the nightly rollup)."""

    rows: np.ndarray  # per remembered question: the row of its chunk
    vectors: np.ndarray  # per remembered question: its embedding (the index's model), float32
    share: np.ndarray  # per remembered question: its weight / the summed weights of its chunk's questions
    parent_of: np.ndarray  # per snapshot row: its parent document's number
    parent_count: int

    @property
    def size(self) -> int:
        return int(self.rows.size)


_MEMORY: dict[int, tuple[weakref.ref, QuestionMemory]] = {}
_MEMORY_LOCK = threading.Lock()


def question_memory(snap: Snapshot) -> QuestionMemory:
    """The snapshot's question memory, read once per snapshot (empty for versions without one)."""
    with _MEMORY_LOCK:
        cached = _MEMORY.get(id(snap))
        if cached is not None and cached[0]() is snap:
            return cached[1]
    memory = _load_question_memory(snap)
    with _MEMORY_LOCK:
        for key in [k for k, (ref, _) in _MEMORY.items() if ref() is None]:
            del _MEMORY[key]  # snapshots no longer served
        _MEMORY[id(snap)] = (weakref.ref(snap), memory)
    return memory


def _load_question_memory(snap: Snapshot) -> QuestionMemory:
    import duckdb

    empty = QuestionMemory(np.zeros(0, np.int64), np.zeros((0, 1), np.float32), np.zeros(0), np.zeros(0, np.int64), 0)
    path = snap.path / "tables.duckdb"
    if not snap.size or not path.is_file():
        return empty
    # Its own read-only connection: the question memory is a table of the version like any other
    con = duckdb.connect(str(path), read_only=True)
    try:
        if not con.execute(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'attention_questions'"
        ).fetchone()[0]:
            return empty
        table = con.execute("SELECT chunk_id, vector, weight FROM attention_questions ORDER BY chunk_id").fetchnumpy()
    finally:
        con.close()
    model = (snap.manifest.get("attention") or {}).get("question_model")
    dim = snap.dense.shape[1]
    keep = [
        i for i, (c, v) in enumerate(zip(table["chunk_id"], table["vector"], strict=True))
        if c in snap.row_of and len(v) == dim
    ]  # fmt: skip
    if not keep or (model and model != snap.model_id):
        return empty
    index = np.array([snap.row_of[table["chunk_id"][i]] for i in keep], dtype=np.int64)
    weight = np.asarray(table["weight"], dtype=np.float64)[keep]
    total = np.bincount(index, weights=weight, minlength=snap.size)
    _, parent_of = np.unique(np.asarray(snap.columns["parent_id"]).astype(str), return_inverse=True)
    return QuestionMemory(
        rows=index,
        vectors=np.stack([table["vector"][i] for i in keep]).astype(np.float32),
        share=weight / total[index],
        parent_of=parent_of.astype(np.int64),
        parent_count=int(parent_of.max()) + 1,
    )


CONSIDER_ALSO_MIN_ATTENTION = 0.5


def consider_also(snap: Snapshot, result_rows: list[int], mask: np.ndarray, limit: int) -> list[Suggestion]:
    """Up to ``limit`` chunks related to the results (often retrieved together with them, per the nightly
    rollup) that are not results themselves, pass the query's filters and role, and carry attention of at least
    0.5; ranked by Σ relation weight × attention."""
    if limit <= 0 or not snap.related or not result_rows:
        return []
    shown = set(result_rows)
    attention = snap.columns["attention"]
    strength: dict[int, float] = {}
    sources: dict[int, list[int]] = {}
    for row in result_rows:
        for other, weight in snap.related.get(row, ()):
            if other in shown or not mask[other] or attention[other] < CONSIDER_ALSO_MIN_ATTENTION:
                continue
            strength[other] = strength.get(other, 0.0) + weight * float(attention[other])
            sources.setdefault(other, []).append(row)
    best = sorted(strength, key=lambda r: (-strength[r], snap.ids[r]))[:limit]
    return [Suggestion(r, strength[r], sources[r]) for r in best]
