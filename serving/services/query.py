"""The whole of a text query, whichever front door asked it (``POST /query``, the MCP ``query`` tool, ``livemem
query``): the version and the collections the role may read, the result cache, the search with the serving
fusion settings, ``score_normalized``, documents, ``consider_also`` suggestions, the grouping by source and the
usage traces. Each front door validates its arguments into a ``QueryRequest``, calls ``QueryService.answer`` and
maps its ``ServiceError``; so the same request gets the same answer through each (tests/api/test_congruence.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from livemem.answer.results import chunk_result, document_results, suggestion_result
from livemem.query.cache import cache_key
from livemem.query.fusion import normalized_score
from livemem.query.types import Query
from livemem.usage.traces import retrieval_events
from serving.models import QueryRequest
from serving.services.errors import ServiceError
from serving.services.versions import readable_today, snapshot_for

if TYPE_CHECKING:
    from serving.state import Role, ServingState


@dataclass(frozen=True)
class QueryAnswer:
    """``body``: every field of ``QueryResponse`` (by alias, in its order) and nothing else; ``collections``: those
    searched."""

    body: dict[str, Any]
    collections: list[str]


class QueryService:
    def __init__(self, state: ServingState) -> None:
        self.state = state

    def answer(self, body: QueryRequest, role: Role, caller: str = "", agent: str | None = None) -> QueryAnswer:
        """The answer to ``body`` for ``role``; ``caller`` names who asks (the repeat window of the traces),
        ``agent`` the front door its trace events name (default: the events' own, ``serving``)."""
        state = self.state
        snap, answered_from, collections = self._scope(body, role)
        filters = body.filters.model_dump(exclude_none=True, mode="json")
        key = self._cache_key(snap, body, role, collections, filters)
        cached = state.cache.get(key)
        hit = cached is not None
        if cached is None:
            cached = self._search(snap, body, collections)
            state.cache.put(key, cached)
        chunk_ids = [r["chunk_id"] for r in cached["results"]]
        trace_id = state.signer.issue(role=role.name, index_version=snap.version_id, chunk_ids=chunk_ids)
        repeat_of = state.traces.repeats.first(caller, key, chunk_ids, trace_id)
        events = retrieval_events(
            trace_id=trace_id,
            query=body.query,
            chunk_ids=chunk_ids,
            scores=[r["score"] for r in cached["results"]],
            role=role.name,
            breath_phase=snap.breath_phase,
            index_version=snap.version_id,
            mode=body.mode,
            return_=body.return_,
            filters=filters,
            collections=collections,
            cache_hit=hit,
            repeat_of=repeat_of,
        )
        if agent is not None:
            for event in events:
                event["agent"] = agent
        state.traces.submit(events)  # queued: the answer does not wait for the trace file
        return QueryAnswer(_answer_body(cached, trace_id, hit, answered_from), collections)

    def _scope(self, body: QueryRequest, role: Role) -> tuple[Any, dict | None, list[str]]:
        """The snapshot answering ``body``, which version answered (None: CURRENT) and the collections searched."""
        state = self.state
        # the version CURRENT names, or the one the request names (``version`` / ``as_of``: docs/versions.md); an
        # older one shows no collection today's version would not show the role. IndexUnavailable: a 503 in the app
        snap, answered_from = snapshot_for(state, role, body.version, body.as_of)
        if answered_from is None:
            visible = snap.collections_for(role.access)
        else:
            visible = readable_today(snap, state.reader.snapshot(), role)
        return snap, answered_from, self.collections(visible, body.collections)

    def _cache_key(
        self, snap: Any, body: QueryRequest, role: Role, collections: list[str], filters: dict[str, Any]
    ) -> str:
        """The result cache's key of ``body``: everything the cached part of its answer depends on."""
        return cache_key(
            query=body.query,
            index_version=snap.version_id,
            model_id=self.state.retriever.model_id,
            role=role.name,
            collections=collections,
            filters=filters,
            mode=body.mode,
            return_=body.return_,
            top_k=body.top_k,
            min_score=[body.min_score, body.min_score_normalized],
            recency=[body.recency_bias, body.recency_half_life_days],
            attention=[body.attention_boost, body.consider_also],
        )

    @staticmethod
    def collections(visible: list[str], wanted: list[str] | None) -> list[str]:
        """The collections to search: ``wanted`` (each one the role may read, else a 400 naming those it may),
        or every one it may read."""
        if wanted:
            unknown = sorted(set(wanted) - set(visible))
            if unknown:
                message = f"unknown collection(s) {unknown}; valid collections: {visible}"
                detail = {"message": message, "unknown": unknown, "valid_collections": visible}
                raise ServiceError(400, message, detail)
            return sorted(set(wanted))
        return visible

    def _search(self, snap: Any, body: QueryRequest, collections: list[str]) -> dict[str, Any]:
        """The cacheable part of an answer: results (chunks or documents) with ``score_normalized``, suggestions,
        the results by collection, the candidates counted."""
        retriever = self.state.retriever
        request = Query(
            text=body.query,
            top_k=body.top_k,
            mode=body.mode,
            return_=body.return_,
            collections=tuple(collections),
            filters=body.filters.to_filters(),
            min_score=body.min_score,
            recency_bias=body.recency_bias,
            recency_half_life_days=body.recency_half_life_days,
            attention_boost=body.attention_boost,
            consider_also=body.consider_also,
        )
        found = retriever.search(snap, request, collections)
        if found.documents is not None:
            results = document_results(snap, found.documents)
        else:
            results = [chunk_result(snap, hit) for hit in found.chunks]
        # the relevance part, before recency and attention: the threshold scale they do not move (fusion.py)
        best = (
            found.best_relevance
            if found.best_relevance is not None
            else max((h.relevant for h in found.chunks), default=0.0)
        )
        fusion = retriever.fusion_for(snap)
        for result, found_hit in zip(results, found.chunks, strict=True):
            result["score_normalized"] = normalized_score(found_hit.relevant, fusion, best, body.mode)
            result.setdefault("parent_id", None)  # every field of QueryResult, as its model would give it
            result.setdefault("matched_chunk_ids", None)
        if body.min_score_normalized is not None:
            results = [r for r in results if r["score_normalized"] >= body.min_score_normalized]
        by_source: dict[str, list[dict]] = {}
        for result in results:
            by_source.setdefault(result["collection"], []).append(result)
        return {
            "results": results,
            "consider_also": [suggestion_result(snap, s) for s in found.suggestions],
            "results_by_source": by_source,
            "index_version": snap.version_id,
            "mode": body.mode,
            "return": body.return_,
            "candidates": found.candidates,
        }


def _answer_body(cached: dict[str, Any], trace_id: str, hit: bool, answered_from: dict | None) -> dict[str, Any]:
    """Every field of ``QueryResponse``, in its order: the cached part, this call's trace id and cache state."""
    return {
        "results": cached["results"],
        "consider_also": cached["consider_also"],
        "results_by_source": cached["results_by_source"],
        "index_version": cached["index_version"],
        "trace_id": trace_id,
        "mode": cached["mode"],
        "return": cached["return"],
        "candidates": cached["candidates"],
        "cached": hit,
        "answered_from": answered_from,
    }
