"""POST /query and POST /feedback."""

from __future__ import annotations

import ipaddress
import logging

import orjson
from anyio import to_thread
from fastapi import APIRouter, HTTPException, Request, Response

from livemem.answer.conversation import ANONYMOUS_SCOPE
from livemem.query.cache import cache_key
from livemem.query.fusion import normalized_score
from livemem.query.retrieval import Query, chunk_result, document_results, suggestion_result
from livemem.usage.traces import FEEDBACK_WAIT_S, feedback_events, retrieval_events
from serving.deps import CallerRole, CurrentSnapshot, State
from serving.models import ErrorBody, FeedbackRequest, FeedbackResponse, QueryRequest, QueryResponse
from serving.routers.memory import record_feedback, request_scope
from serving.routers.versions import readable_today, snapshot_for
from serving.state import Role, ServingState

log = logging.getLogger(__name__)
router = APIRouter(tags=["retrieval"])
FEEDBACK_RETRY_S = 5  # Retry-After of a /feedback that could not be written (a full disk, a file locked elsewhere)


@router.post(
    "/query",
    response_model=QueryResponse,
    responses={400: {"model": ErrorBody}, 401: {"model": ErrorBody}, 503: {"model": ErrorBody}},
)
async def query(body: QueryRequest, state: State, role: CallerRole, request: Request) -> Response:
    """Rank chunks (or whole parent documents) for a query, from one published version.

    Its trace events are queued and appended by a background thread: the caller does not wait for the file (a
    failed write is logged and counted, never the caller's error; /feedback, whose answer says what was recorded,
    writes before answering). The same answer to the same caller again within a minute is traced as one line
    naming the first (``livemem.usage.traces.RepeatWindow``)."""
    # One trip to the thread pool for the whole request (the version, the search, the JSON), instead of one for
    # a sync dependency, one for the endpoint, one for response validation and one for the trace (issue 15).
    return await to_thread.run_sync(answer_query, body, state, role, caller_identity(request))


def caller_identity(request: Request) -> str:
    """Who is asking, to bound what one caller can write to the traces: its API key's scope (the key's hash), or,
    without a key, its network address (as uvicorn gives it, behind a trusted proxy the client's), an IPv6 address
    by its /64 (the block one host is usually given). Only a keyed tag of it is ever written
    (``TraceSigner.caller_tag``)."""
    scope = request_scope(request)
    if scope != ANONYMOUS_SCOPE:
        return f"key:{scope}"
    host = request.client.host if request.client else ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"addr:{host}"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is None:
        return f"net:{ipaddress.ip_network((address, 64), strict=False)}"
    return f"addr:{getattr(address, 'ipv4_mapped', None) or address}"


def answer_query(body: QueryRequest, state: ServingState, role: Role, caller: str = "") -> Response:
    """The /query response: the JSON of a ``QueryResponse`` (by alias)."""
    # the version CURRENT names, or the one the request names (``version`` / ``as_of``: docs/versions.md); an older
    # one shows no collection today's version would not show the role. IndexUnavailable becomes a 503 in the app
    snap, answered_from = snapshot_for(state, role, body.version, body.as_of)
    if answered_from is None:
        visible = snap.collections_for(role.access)
    else:
        visible = readable_today(snap, state.reader.snapshot(), role)
    if body.collections:
        unknown = sorted(set(body.collections) - set(visible))
        if unknown:
            raise HTTPException(
                400,
                {
                    "message": f"unknown collection(s) {unknown}; valid collections: {visible}",
                    "unknown": unknown,
                    "valid_collections": visible,
                },
            )
    collections = sorted(set(body.collections)) if body.collections else visible
    filters = body.filters.model_dump(exclude_none=True, mode="json")
    key = cache_key(
        query=body.query,
        index_version=snap.version_id,
        model_id=state.retriever.model_id,
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
    cached = state.cache.get(key)
    if cached is None:
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
        found = state.retriever.search(snap, request, collections)
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
        fusion = state.retriever.fusion_for(snap)
        for result, found_hit in zip(results, found.chunks, strict=True):
            result["score_normalized"] = normalized_score(found_hit.relevant, fusion, best, body.mode)
            result.setdefault("parent_id", None)  # every field of QueryResult, as its model would give it
            result.setdefault("matched_chunk_ids", None)
        if body.min_score_normalized is not None:
            results = [r for r in results if r["score_normalized"] >= body.min_score_normalized]
        by_source: dict[str, list[dict]] = {}
        for result in results:
            by_source.setdefault(result["collection"], []).append(result)
        cached = {
            "results": results,
            "consider_also": [suggestion_result(snap, s) for s in found.suggestions],
            "results_by_source": by_source,
            "index_version": snap.version_id,
            "mode": body.mode,
            "return": body.return_,
            "candidates": found.candidates,
        }
        state.cache.put(key, cached)
        hit = False
    else:
        hit = True
    chunk_ids = [r["chunk_id"] for r in cached["results"]]
    trace_id = state.signer.issue(role=role.name, index_version=snap.version_id, chunk_ids=chunk_ids)
    repeat_of = state.traces.repeats.first(caller, key, chunk_ids, trace_id)
    state.traces.submit(
        retrieval_events(
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
    )
    # The body has every field of QueryResponse (by alias, in its order) and nothing else: orjson writes it in
    # 0.02 ms where validating it into the model and dumping it cost 0.2 ms (tests/api/test_serving_api.py checks
    # that the body equals the model's own dump of it, for chunks, documents and suggestions).
    answer = {
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
    return Response(orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json")


@router.post(
    "/feedback",
    response_model=FeedbackResponse,
    responses={
        400: {"model": ErrorBody},
        403: {"model": ErrorBody},
        404: {"model": ErrorBody},
        503: {"model": ErrorBody},
    },
)
def feedback(
    body: FeedbackRequest, state: State, role: CallerRole, snap: CurrentSnapshot, request: Request
) -> FeedbackResponse:
    """Record whether the results of a query (or some of its chunks) were useful, as trace events.

    Only for a trace id this service issued to the caller's role (404 otherwise, whatever the reason, so a
    trace of another role is indistinguishable from one that never existed), and only for chunks that trace
    returned (400): nothing else ever reaches the traces the attention rollup reads."""
    issued = state.signer.verify(body.trace_id, role=role.name)
    if issued is None:
        raise HTTPException(404, "unknown trace_id: send the trace_id of an answer this service gave you")
    foreign = [c for c in dict.fromkeys(body.chunk_ids) if not issued.returned(c)]
    if foreign:
        raise HTTPException(
            400, {"message": "these chunk_ids were not returned by this trace", "chunk_ids": foreign[:20]}
        )
    if body.personal:  # this caller's own ranking, nudged (serving.routers.memory)
        record_feedback(state, request, body.user_id, list(dict.fromkeys(body.chunk_ids)), body.useful)
    events = feedback_events(
        trace_id=issued.trace_id,
        chunk_ids=list(dict.fromkeys(body.chunk_ids)),
        useful=body.useful,
        role=role.name,
        breath_phase=snap.breath_phase,
        index_version=issued.index_version,
        comment=body.comment,
        caller=state.signer.caller_tag(verdict_caller(request, body.user_id)),
    )
    # On disk (fdatasync) before 200: a full disk fails the write whole (nothing torn is left behind), and the
    # caller is told to retry.
    written = state.traces.write_through(events, FEEDBACK_WAIT_S, queue=False, sync=True)
    if not written:  # False: the write failed; None: the file stayed locked elsewhere, nothing was written
        log.error("feedback on trace %s could not be written to %s", issued.trace_id, state.traces.directory)
        raise HTTPException(
            503, "feedback could not be recorded; try again later", headers={"Retry-After": str(FEEDBACK_RETRY_S)}
        )
    return FeedbackResponse(trace_id=issued.trace_id, recorded=len(events))


def verdict_caller(request: Request, user_id: str | None) -> str:
    """Whose verdict a /feedback is, for the rollup's one verdict per caller, chunk and day: the caller
    (``caller_identity``), and within an API key the ``user_id`` it names (a service answering many people with one
    key tells them apart so; an anonymous caller's ``user_id`` changes nothing: anyone may send any)."""
    caller = caller_identity(request)
    return f"{caller}/{user_id}" if user_id and caller.startswith("key:") else caller
