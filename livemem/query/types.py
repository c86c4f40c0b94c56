"""What a query is and what it finds: the filters, the query, the hits (chunks, parent documents, suggestions) and
the retrieval result with its timings (``livemem.query.retrieval.Retriever`` ranks; ``livemem.query.signals`` holds
the living-memory signals; ``livemem.answer.results`` shapes results for the front doors)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

Mode = Literal["dense", "sparse", "hybrid"]
Return = Literal["chunks", "documents"]
MULTI_VALUE_FILTERS = ("source", "type", "county", "dataset", "worldview_id", "local_resource_id")
# Living memory in the default ranking (tuned on SciFact by bench/memory_helps.py; docs/attention.md).
DEFAULT_ATTENTION_BOOST = 1.0  # the most a chunk's score can gain: ×(1 + boost), never more


@dataclass(frozen=True)
class Filters:
    """Metadata conditions a chunk must meet (all of them). Multi-valued fields match any listed value."""

    source: tuple[str, ...] = ()
    path_prefix: str | None = None
    type: tuple[str, ...] = ()
    county: tuple[str, ...] = ()
    dataset: tuple[str, ...] = ()
    worldview_id: tuple[str, ...] = ()
    local_resource_id: tuple[str, ...] = ()
    seal_state: str | None = None
    min_attention: float | None = None
    last_seen_breath: str | None = None
    updated_after: datetime | None = None
    updated_before: datetime | None = None
    # the document's own date (front matter, heading, file name: ``livemem.dates``), else its commit time;
    # ``dated_before`` is exclusive
    dated_after: datetime | None = None
    dated_before: datetime | None = None

    def narrows(self) -> bool:
        """Whether any condition is set (as ``livemem.query.retrieval.allowed_rows`` applies them)."""
        if any(getattr(self, name) for name in MULTI_VALUE_FILTERS):
            return True
        if self.path_prefix or self.seal_state or self.last_seen_breath:
            return True
        dates = (self.updated_after, self.updated_before, self.dated_after, self.dated_before)
        return self.min_attention is not None or any(d is not None for d in dates)


@dataclass(frozen=True)
class Query:
    text: str
    top_k: int = 10
    mode: Mode = "hybrid"
    return_: Return = "chunks"
    collections: tuple[str, ...] = ()
    filters: Filters = field(default_factory=Filters)
    min_score: float | None = None
    recency_bias: float = 0.0
    recency_half_life_days: float | None = None
    attention_boost: float = DEFAULT_ATTENTION_BOOST
    consider_also: int = 0


@dataclass
class Hit:
    """One ranked chunk (``row`` in snapshot order) with its score and the scores it was fused from."""

    row: int
    score: float
    dense: float | None = None
    sparse: float | None = None
    sentence: float | None = None  # hybrid and dense: the best sentence's cosine (a chunk with sentence vectors)
    relevance: float | None = None  # the score before recency and attention multiplied it (None: nothing did)

    @property
    def relevant(self) -> float:
        """The score's relevance part, before recency and attention: what ``normalized_score`` scales."""
        return self.score if self.relevance is None else self.relevance


@dataclass
class DocumentHit:
    """One parent document, ranked by its best chunk; ``hits`` are its matching chunks, best first."""

    parent_id: str
    score: float
    hits: list[Hit]


@dataclass
class Suggestion:
    """A chunk often retrieved together with the results, carrying high attention: "consider also"."""

    row: int
    strength: float
    related_to: list[int]


@dataclass
class Retrieval:
    chunks: list[Hit]
    documents: list[DocumentHit] | None
    candidates: int
    timings_ms: dict[str, float]
    suggestions: list[Suggestion] = field(default_factory=list)
    best_relevance: float | None = None  # the best relevance score of the query's matches (before boosts)
