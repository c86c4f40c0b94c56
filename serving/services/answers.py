"""The whole of a /context or /chat request, for every route that answers one (``/context``, ``/chat``, the seed
routes ``/chat/sync``, ``/chat/light``, ``/gis_rag``): the version asked for, the conversation carried, the persona
within the caller's access, personal memory, the answer and the exchange remembered. Routers validate, call and
shape; none imports another router for it."""

from __future__ import annotations

from typing import Any

from livemem.answer.results import chat_body
from livemem.answer.routing import ContextRequest as Message
from livemem.engine.snapshot import Snapshot
from serving.deps import with_persona
from serving.models import ErrorBody
from serving.models.context import ContextRequest
from serving.services.context import context_service
from serving.services.memory import personal_view, remember_exchange
from serving.services.versions import narrowed_today, snapshot_for
from serving.state import Role, ServingState

# what a /context or /chat route may answer besides 200 (the OpenAPI entry of each)
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 422: {"model": ErrorBody}, 503: {"model": ErrorBody},
}  # fmt: skip


def message_of(
    body: ContextRequest, role: Role, state: ServingState, snap: Snapshot, scope: str
) -> tuple[Message, Role]:
    """The plain request, with what its conversation carries (``thread_id`` or ``history``), and the role it is
    answered as: a body ``role`` (or the thread's) is a persona within the caller's access
    (``serving.deps.with_persona``; access itself comes from the API key)."""
    profile = body.profile.model_dump(exclude_none=True) if body.profile else {}
    service = context_service(state)
    carried = service.conversation(
        scope, body.thread_id, body.history, body.message, county=body.county, zip_code=body.zip, profile=profile,
        persona=body.role, home=snap.home,
    )  # fmt: skip
    message = Message(
        carried.message, carried.county, carried.zip, profile, body.top_k, body.thread_id,
        place_from=carried.place_from, min_score=body.min_score, recency_bias=body.recency_bias,
        recency_half_life_days=body.recency_half_life_days, max_words=body.max_words, conversation=carried.notes,
        personal=personal_view(state, scope, body),
    )  # fmt: skip
    message, answered_as = with_persona(message, carried.persona, role, state, snap)
    service.remember(scope, body.thread_id, carried)  # only once the persona was accepted
    return message, answered_as


def _asked(
    body: ContextRequest, state: ServingState, role: Role, snap: Snapshot, scope: str
) -> tuple[Snapshot, dict | None, Message, Role]:
    snap, answered_from = snapshot_for(state, role, body.version, body.as_of, snap)
    message, answered_as = message_of(body, role, state, snap, scope)
    return snap, answered_from, narrowed_today(message, snap, state, answered_as, answered_from), answered_as


def answer_context(body: ContextRequest, state: ServingState, role: Role, snap: Snapshot, scope: str) -> dict[str, Any]:
    """POST /context's body: routed evidence by source and the prompt, from the version asked for."""
    service = context_service(state)
    snap, answered_from, message, answered_as = _asked(body, state, role, snap, scope)
    result = service.context(snap, service.caller(answered_as), message)
    remember_exchange(state, message, result, "context")
    return {**result, "answered_from": answered_from}


def answer_chat(body: ContextRequest, state: ServingState, role: Role, snap: Snapshot, scope: str) -> dict[str, Any]:
    """POST /chat's body: /context, then an answer with citations, from the version asked for."""
    service = context_service(state)
    snap, answered_from, message, answered_as = _asked(body, state, role, snap, scope)
    result = service.chat(snap, service.caller(answered_as), message)
    remember_exchange(state, message, result, "chat")
    return {**chat_body(result), "answered_from": answered_from}
