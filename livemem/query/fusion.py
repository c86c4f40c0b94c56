"""Hybrid fusion: one ranking from the dense (cosine) and the BM25 scores of the same candidate chunks.

Four methods, each computed from the two per-side lists alone — a side's first ``depth`` chunks by score (BM25:
matching chunks only) — so a caller can pass just the union of those lists as the candidates; a chunk absent from
a list gets 0 from that side:

- ``linear`` (the default, chosen on SciFact train, see ``docs/serving.md``): ``w_dense · cosine + w_sparse · BM25 /
  the list's best BM25`` (cosine clipped at 0). Each side keeps its natural zero: the cosine is already on a fixed
  scale, and BM25, whose scale grows with the query's length, is divided by its best hit. Scores stay proportional
  to the evidence, so the multipliers of living memory and recency act on them as they did on RRF's (nothing is
  pinned to 0 at the end of a list, as min-max does), and a query the model matches weakly leans on BM25.
- ``minmax``: each side's scores min-max normalised over its list (its best chunk 1, its ``depth``-th 0), then
  ``w_dense · dense + w_sparse · sparse``. Unlike ranks, normalised scores keep *how much* better the first hit is.
- ``zscore``: the same with each side divided by its list's standard deviation instead of its range (shifted so
  the list's last chunk is 0, which is what an absent chunk gets).
- ``rrf``: weighted reciprocal rank fusion, ``w_dense / (k + rank_dense) + w_sparse / (k + rank_sparse)``.

Sentences (on for ``linear`` when the index has sentence vectors, ``livemem.index.sentences``): the first
``sentence_depth`` fused chunks have the dense part of their score blended with their best sentence's cosine,
``w_dense · ((1 − sentence_weight) · cosine + sentence_weight · best sentence)`` (both clipped at 0; a chunk not on
the dense list had 0 for its cosine), so a chunk one of whose sentences states the answer rises (``with_sentences``).
A chunk without sentence vectors keeps its score. It needs no scan of the sentences, only those of
``sentence_depth`` chunks. The dense side being the stronger for it, BM25 weighs less on an index with sentence
vectors: ``sentence_sparse_weight`` (``FusionSettings.for_sentences``, chosen with the blend on SciFact train).

Dense mode blends the same way (``dense_with_sentences``): its first ``sentence_depth`` chunks by cosine score
``(1 − sentence_weight) · cosine + sentence_weight · best sentence``, the others their cosine (SciFact train: dense
0.6728 → 0.6984, docs/decisions/0003-dense-blend-and-heading-field.md).

Pseudo-relevance feedback (off by default; ``feedback_chunks=1`` — serving: ``RAG_FUSION_FEEDBACK=1`` — turns it on, with
weights chosen for ``linear`` on SciFact train; docs/serving.md says why it is off): the query vector moved towards
the vectors of the first ``feedback_chunks`` hits of that fusion (Rocchio, ``feedback_query``) rescores the first
``feedback_depth`` fused chunks: ``feedback_weight`` × their cosine to it (clipped at 0) is added to their fused
scores (``with_feedback``), so a chunk close to both the question and its best answer gains. It adds no chunk and
never lowers one (chunks below stay below, in their order), so it needs no second scan, only ``feedback_depth``
cosines; ``fuse(..., feedback=...)`` is the same in one call.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Literal, Protocol, cast

import numpy as np

from livemem.index.dense import top_order  # ties go to the lower position, chosen as well as ordered

if TYPE_CHECKING:
    from livemem.settings import ServingSettings

Method = Literal["linear", "minmax", "zscore", "rrf"]


class FusionMethod(Protocol):
    """One way of putting a side's list (its scores, best first) on the fused scale: a class per method below, one
    instance each in ``FUSION_METHODS``. Defaults when the settings give none: ``sparse_weight`` (BM25's weight),
    ``feedback_weight`` (the moved query's list; 0: off), ``sentence_weight`` (the best sentence's share of the
    dense part; 0: off) and ``sentence_sparse_weight`` (BM25's weight with the blend; None: ``sparse_weight``)."""

    @property
    def name(self) -> str: ...
    @property
    def sparse_weight(self) -> float: ...
    @property
    def feedback_weight(self) -> float: ...
    @property
    def sentence_weight(self) -> float: ...
    @property
    def sentence_sparse_weight(self) -> float | None: ...

    def side_scores(self, ranked: np.ndarray, k: float, side: str) -> np.ndarray:
        """The side's contribution for its list's scores (best first; RRF reads ``k``)."""
        ...

    def best_score(self, total: float, k: float) -> float | None:
        """The highest fused score of a chunk first on every side weighed ``total``; None without a fixed bound."""
        ...


class Linear:
    """A cosine (clipped at 0) plus BM25 over its best hit (0-1). BM25 at half weight balances a cosine of ≈0.3-0.7
    for the first hits of all-MiniLM-L6-v2 (SciFact train sweep, docs/serving.md); feedback 0.3 (+0.0034 nDCG@10,
    better on both halves) and the sentence blend 0.67 with BM25 0.3 (docs/decisions/0002-sentence-vectors.md) were
    tuned for it."""

    name, sparse_weight, feedback_weight, sentence_weight, sentence_sparse_weight = "linear", 0.5, 0.3, 0.67, 0.3

    def side_scores(self, ranked: np.ndarray, k: float, side: str) -> np.ndarray:
        if side == "dense":
            return np.maximum(
                ranked, 0.0
            )  # a cosine at or below 0 is no evidence; a negative one would flip multipliers
        return ranked / ranked[0]  # matched BM25 scores are > 0

    def best_score(self, total: float, k: float) -> float | None:
        return total  # a cosine of 1 (both queries) and the best BM25 hit


class _Spread:
    """Min-max and z-score: each side's list put on one scale, 1 : 1; feedback and the blend were not tuned for
    them (off)."""

    name = ""
    sparse_weight, feedback_weight, sentence_weight, sentence_sparse_weight = 1.0, 0.0, 0.0, None
    tied = 0.0  # every chunk of a list of one, or of tied scores

    def spread(self, ranked: np.ndarray) -> float:
        raise NotImplementedError

    def side_scores(self, ranked: np.ndarray, k: float, side: str) -> np.ndarray:
        low = ranked[-1]
        spread = self.spread(ranked)
        if spread <= 0:  # one chunk, or all tied: each is as good as the best
            return np.full(ranked.size, self.tied)
        return (ranked - low) / spread


class MinMax(_Spread):
    """(score - the list's lowest) / (best - lowest): the best of a list scores 1."""

    name, tied = "minmax", 1.0

    def spread(self, ranked: np.ndarray) -> float:
        return ranked[0] - ranked[-1]

    def best_score(self, total: float, k: float) -> float | None:
        return total


class ZScore(_Spread):
    """(score - the list's lowest) / the list's standard deviation: no fixed maximum."""

    name, tied = "zscore", 0.0

    def spread(self, ranked: np.ndarray) -> float:
        return ranked.std()

    def best_score(self, total: float, k: float) -> float | None:
        return None


class RRF:
    """Reciprocal rank fusion: 1 / (k + rank), whatever the scores; 1 : 1, feedback and the blend off."""

    name, sparse_weight, feedback_weight, sentence_weight, sentence_sparse_weight = "rrf", 1.0, 0.0, 0.0, None

    def side_scores(self, ranked: np.ndarray, k: float, side: str) -> np.ndarray:
        return 1.0 / (k + np.arange(1, ranked.size + 1))

    def best_score(self, total: float, k: float) -> float | None:
        return total / (k + 1)


FUSION_METHODS: dict[str, FusionMethod] = {m.name: m for m in (Linear(), MinMax(), ZScore(), RRF())}
METHODS: tuple[str, ...] = tuple(FUSION_METHODS)
DEFAULT_SPARSE_WEIGHT = {name: m.sparse_weight for name, m in FUSION_METHODS.items()}
DEFAULT_FEEDBACK_WEIGHT = {name: m.feedback_weight for name, m in FUSION_METHODS.items()}
DEFAULT_SENTENCE_WEIGHT = {name: m.sentence_weight for name, m in FUSION_METHODS.items()}
DEFAULT_SENTENCE_SPARSE_WEIGHT = {
    name: m.sentence_sparse_weight for name, m in FUSION_METHODS.items() if m.sentence_sparse_weight is not None
}


@dataclass(frozen=True)
class FusionSettings:
    """How the dense and the BM25 list are fused. ``k`` is used by ``rrf`` only; ``sparse_depth`` (None: ``depth``)
    is the length of the BM25 list; ``sparse_weight`` None is the method's default (``DEFAULT_SPARSE_WEIGHT``).

    Sentences: the first ``sentence_depth`` fused chunks blend their best sentence's cosine into their dense part,
    ``sentence_weight`` of it (None: ``DEFAULT_SENTENCE_WEIGHT``; 0 turns it off), and BM25 weighs
    ``sentence_sparse_weight`` instead of ``sparse_weight`` (None: ``sparse_weight`` when that was given, else
    ``DEFAULT_SENTENCE_SPARSE_WEIGHT``, else the same):
    ``for_sentences()`` is the fusion used on an index with sentence vectors.

    Feedback: the first ``feedback_chunks`` fused hits move the query vector by ``feedback_beta`` × their mean
    vector; each of the first ``feedback_depth`` fused chunks gains ``feedback_weight`` × its cosine to the moved
    query (None: ``DEFAULT_FEEDBACK_WEIGHT``); ``feedback_chunks`` 0 or weight 0 turns it off."""

    method: Method = "linear"
    k: float = 10.0
    dense_weight: float = 1.0
    sparse_weight: float | None = None
    depth: int = 1000
    sparse_depth: int | None = None
    feedback_chunks: int = 0  # off: +0.0025 nDCG@10 through the API, 0.4–0.8 ms, and it moves /context thresholds
    feedback_beta: float = 1.0
    feedback_weight: float | None = None
    feedback_depth: int = 200
    sentence_weight: float | None = None
    sentence_depth: int = 200
    sentence_sparse_weight: float | None = None

    @classmethod
    def from_serving(cls, settings: ServingSettings) -> FusionSettings:
        """The fusion a serving process uses: its settings' (``RAG_FUSION_*``); ``livemem eval`` and the answer gate
        rank with the same."""
        return cls(
            method=settings.fusion_method,
            k=settings.rrf_k,
            dense_weight=settings.rrf_dense_weight,
            sparse_weight=settings.rrf_sparse_weight,
            depth=settings.rrf_depth,
            feedback_chunks=1 if settings.fusion_feedback else 0,
            sentence_weight=None if settings.fusion_sentences else 0.0,
        )

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"fusion method must be one of {', '.join(METHODS)}, not {self.method!r}")
        chosen = self.sparse_weight  # a BM25 weight given explicitly holds on an index with sentences too
        sparse_weight, feedback_weight, sentence_weight = self.sparse_weight, self.feedback_weight, self.sentence_weight
        if sparse_weight is None:
            sparse_weight = DEFAULT_SPARSE_WEIGHT[self.method]
            object.__setattr__(self, "sparse_weight", sparse_weight)
        if feedback_weight is None:
            feedback_weight = DEFAULT_FEEDBACK_WEIGHT[self.method]
            object.__setattr__(self, "feedback_weight", feedback_weight)
        if sentence_weight is None:
            sentence_weight = DEFAULT_SENTENCE_WEIGHT[self.method]
            object.__setattr__(self, "sentence_weight", sentence_weight)
        if not 0.0 <= sentence_weight <= 1.0 or self.sentence_depth < 1:
            raise ValueError("sentence_weight must be between 0 and 1, sentence_depth at least 1")
        sentence_sparse_weight = self.sentence_sparse_weight
        if sentence_sparse_weight is None:
            default = DEFAULT_SENTENCE_SPARSE_WEIGHT.get(self.method, sparse_weight) if chosen is None else chosen
            sentence_sparse_weight = default
            object.__setattr__(self, "sentence_sparse_weight", default)
        if sentence_sparse_weight < 0:
            raise ValueError("sentence_sparse_weight must be at least 0")
        if self.feedback_chunks < 0 or feedback_weight < 0 or self.feedback_depth < self.feedback_chunks:
            raise ValueError("feedback_chunks and feedback_weight must be at least 0, feedback_depth at least chunks")

    @property
    def feedback(self) -> bool:
        """Whether hybrid search moves the query and adds the feedback cosines."""
        return self.feedback_chunks > 0 and cast(float, self.feedback_weight) > 0  # set by __post_init__

    @property
    def sentences(self) -> bool:
        """Whether hybrid search blends the first fused chunks' best sentence cosines into their scores."""
        return cast(float, self.sentence_weight) > 0 and self.dense_weight > 0  # set by __post_init__

    def for_sentences(self) -> FusionSettings:
        """The fusion on an index with sentence vectors: the blend on, BM25 at ``sentence_sparse_weight`` (itself
        when the blend is off or the weights are already those). Made once per settings object (a ``replace``
        costs ≈10 µs, and a request asks once per result it normalises)."""
        return self._for_sentences

    @cached_property
    def _for_sentences(self) -> FusionSettings:  # frozen, but cached_property writes the instance's __dict__
        if not self.sentences or self.sparse_weight == self.sentence_sparse_weight:
            return self
        return replace(self, sparse_weight=self.sentence_sparse_weight)

    @property
    def best_score(self) -> float | None:
        """The highest fused score a chunk can get (first on both sides); None for ``zscore`` (no fixed bound)."""
        feedback = cast(float, self.feedback_weight) if self.feedback else 0.0  # weights: set by __post_init__
        total = self.dense_weight + cast(float, self.sparse_weight) + feedback
        return FUSION_METHODS[self.method].best_score(total, self.k)


def fuse(
    candidates: np.ndarray,
    dense: np.ndarray,
    sparse: np.ndarray,
    fusion: FusionSettings,
    feedback: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, scores)``: the candidates on at least one side's list, with their fused scores (chunks with no BM25
    match are on the dense side only). ``dense`` and ``sparse`` are the candidates' scores, aligned with them;
    ``feedback`` (optional): the candidates' cosines to the moved query (``feedback_order``, ``with_feedback``)."""
    fused = np.zeros(candidates.size, dtype=np.float64)
    listed = np.zeros(candidates.size, dtype=bool)
    dense_top = top_order(dense, min(fusion.depth, candidates.size))
    matched = np.flatnonzero(sparse > 0)
    sparse_depth = fusion.depth if fusion.sparse_depth is None else fusion.sparse_depth
    sparse_top = matched[top_order(sparse[matched], min(sparse_depth, matched.size))]
    sides = [
        (dense_top, dense, fusion.dense_weight, "dense"),
        (sparse_top, sparse, cast(float, fusion.sparse_weight), "sparse"),
    ]
    for top, scores, weight, side in sides:
        if not top.size or weight <= 0:  # a side weighed 0 adds no chunk (as before: RRF kept fused > 0)
            continue
        listed[top] = True
        fused[top] += weight * side_scores(scores[top].astype(np.float64), fusion, side)
    rows, scores = candidates[listed], fused[listed]
    if feedback is not None and fusion.feedback:
        top = feedback_order(scores, fusion)
        scores[top] = with_feedback(scores[top], feedback[listed][top], fusion)
    return rows, scores


def sentence_order(fused: np.ndarray, fusion: FusionSettings) -> np.ndarray:
    """Positions of the first ``sentence_depth`` fused scores, best first (ties: the lower position): the chunks
    whose sentences are scored."""
    return top_order(fused, min(fusion.sentence_depth, fused.size))


def with_sentences(fused: np.ndarray, cosines: np.ndarray, sentences: np.ndarray, fusion: FusionSettings) -> np.ndarray:
    """Fused scores with the dense part blended with the best sentence: ``cosines`` are the chunks' cosines where
    they were on the dense list (-inf or NaN where not: they had 0), ``sentences`` their best sentence cosines (NaN:
    no sentence vectors, the score is kept)."""
    if not fusion.sentences:
        return fused
    return fused + _sentence_change(cosines, sentences, fusion.dense_weight * cast(float, fusion.sentence_weight))


def dense_with_sentences(cosines: np.ndarray, sentences: np.ndarray, fusion: FusionSettings) -> np.ndarray:
    """Dense mode's scores of its first ``sentence_depth`` chunks by cosine: the cosine blended with the best
    sentence's as hybrid blends its dense part (``with_sentences`` with a dense weight of 1),
    ``cosine + sentence_weight · (best sentence − cosine)``. Float64."""
    cosines = np.asarray(cosines, dtype=np.float64)
    weight = cast(float, fusion.sentence_weight)  # set by FusionSettings.__post_init__
    if weight <= 0:
        return cosines
    return cosines + _sentence_change(cosines, sentences, weight)


def _sentence_change(cosines: np.ndarray, sentences: np.ndarray, weight: float) -> np.ndarray:
    """What the blend adds to a score: ``weight · (best sentence − cosine)``, both clipped at 0 (a cosine of -inf or
    NaN: not on the dense list, it had 0); 0 for a chunk without sentence vectors (NaN)."""
    cosines = np.asarray(cosines, dtype=np.float64)
    had = np.where(np.isfinite(cosines), np.maximum(cosines, 0.0), 0.0)
    best = np.asarray(sentences, dtype=np.float64)
    return np.where(np.isnan(best), 0.0, np.nan_to_num(weight * (np.maximum(best, 0.0) - had)))


def feedback_order(fused: np.ndarray, fusion: FusionSettings) -> np.ndarray:
    """Positions of the first ``feedback_depth`` fused scores, best first (ties: the lower position): the first
    ``feedback_chunks`` of them move the query, all of them are rescored."""
    return top_order(fused, min(fusion.feedback_depth, fused.size))


def with_feedback(fused: np.ndarray, cosines: np.ndarray, fusion: FusionSettings) -> np.ndarray:
    """Fused scores plus ``feedback_weight`` × each chunk's cosine to the moved query, clipped at 0 (a cosine at or
    below 0 is no evidence, as on the dense side); unchanged when feedback is off."""
    if not fusion.feedback:
        return fused
    return fused + cast(float, fusion.feedback_weight) * np.maximum(np.asarray(cosines, dtype=np.float64), 0.0)


def feedback_query(vector: np.ndarray, hits: np.ndarray, beta: float) -> np.ndarray:
    """Rocchio: ``vector + beta × the mean of the hits' vectors`` (rows of ``hits``), re-normalised to length 1,
    float32. With no hits, or a sum of length 0, the query as it was."""
    if not len(hits):
        return vector
    moved = np.asarray(vector, dtype=np.float64) + beta * np.asarray(hits, dtype=np.float64).mean(axis=0)
    norm = float(np.linalg.norm(moved))
    return (moved / norm).astype(np.float32) if norm > 0 else vector


def side_scores(ranked: np.ndarray, fusion: FusionSettings, side: str = "dense") -> np.ndarray:
    """One side's (``dense`` or ``sparse``) contribution for its list's scores, best first (``fusion.method``'s
    class in ``FUSION_METHODS``)."""
    return FUSION_METHODS[fusion.method].side_scores(ranked, fusion.k, side)


def normalized_score(score: float, fusion: FusionSettings, query_best: float, mode: str = "hybrid") -> float:
    """A relevance score on the one documented scale [0, 1], whatever the mode (``score_normalized`` in responses;
    the ``min_score`` of /context and ``min_score_normalized`` of /query apply to it):

    - hybrid: relative to ``FusionSettings.best_score``, the most the fusion can give a chunk (first in both
      lists; linear 1 : 0.5 with feedback 0.3: a cosine of 1 on both dense lists and the best BM25 hit, 1.8); z-score
      has no fixed maximum: relative to the query's best score (``query_best``);
    - dense: the cosine itself;
    - sparse: relative to the query's best BM25 score (BM25 has no fixed scale).

    ``score`` and ``query_best`` are the relevance part of a score, before recency and attention multiply it
    (``Hit.relevant``, ``Retrieval.best_relevance``): those boosts reorder results but are not evidence of
    relevance, so a threshold means the same with and without them (multiplied in, they lifted every hit to the
    cap of 1.0 and ``min_score`` stopped filtering anything). Capped to [0, 1]."""
    if mode == "dense":
        best = 1.0
    elif mode == "sparse":
        best = query_best
    else:
        best = fusion.best_score or query_best
    return round(min(1.0, max(0.0, score / best)), 6) if best > 0 else 0.0
