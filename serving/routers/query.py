"""POST /query and POST /feedback."""

from __future__ import annotations

import ipaddress

import orjson
from anyio import to_thread
from fastapi import APIRouter, Request, Response

from livemem.answer.conversation import ANONYMOUS_SCOPE
from serving.deps import CallerRole, State, thread_scope
from serving.models import ErrorBody, FeedbackRequest, FeedbackResponse, QueryRequest, QueryResponse
from serving.state import Role, ServingState

router = APIRouter(tags=["retrieval"])


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
    # a sync dependency, one for the endpoint, one for response validation and one for the trace
    # (docs/decisions/0004-request-path.md).
    return await to_thread.run_sync(answer_query, body, state, role, caller_identity(request))


def caller_identity(request: Request) -> str:
    """Who is asking, to bound what one caller can write to the traces: its API key's scope (the key's hash), or,
    without a key, its network address (as uvicorn gives it, behind a trusted proxy the client's), an IPv6 address
    by its /64 (the block one host is usually given). Only a keyed tag of it is ever written
    (``TraceSigner.caller_tag``)."""
    scope = thread_scope(request)
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
    """The /query response: the JSON of a ``QueryResponse`` (by alias), from the query service."""
    answer = state.query.answer(body, role, caller)
    # The body has every field of QueryResponse (by alias, in its order) and nothing else: orjson writes it in
    # 0.02 ms where validating it into the model and dumping it cost 0.2 ms (tests/api/test_serving_api.py checks
    # that the body equals the model's own dump of it, for chunks, documents and suggestions).
    return Response(orjson.dumps(answer.body, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json")


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
def feedback(body: FeedbackRequest, state: State, role: CallerRole, request: Request) -> FeedbackResponse:
    """Record whether the results of a query (or some of its chunks) were useful, as trace events.

    Only for a trace id this service issued to the caller's role (404 otherwise, whatever the reason, so a
    trace of another role is indistinguishable from one that never existed), and only for chunks that trace
    returned (400): nothing else ever reaches the traces the attention rollup reads."""
    recorded = state.feedback.record(
        body.trace_id,
        body.chunk_ids,
        body.useful,
        role,
        verdict_caller(request, body.user_id),
        body.comment,
        personal_scope=thread_scope(request) if body.personal else None,  # this caller's own ranking, nudged
        user_id=body.user_id,
    )
    return FeedbackResponse(**recorded)


def verdict_caller(request: Request, user_id: str | None) -> str:
    """Whose verdict a /feedback is, for the rollup's one verdict per caller, chunk and day: the caller
    (``caller_identity``), and within an API key the ``user_id`` it names (a service answering many people with one
    key tells them apart so; an anonymous caller's ``user_id`` changes nothing: anyone may send any)."""
    caller = caller_identity(request)
    return f"{caller}/{user_id}" if user_id and caller.startswith("key:") else caller
