"""POST /context: a message → route, fused evidence (kept apart by source) and the assembled prompt."""

from __future__ import annotations

from fastapi import APIRouter

from livemem.answer.routing import ContextRequest as Message
from livemem.version.reader import Snapshot
from serving.deps import CallerRole, CurrentSnapshot, State, ThreadScope, with_persona
from serving.models import ErrorBody
from serving.models.context import ContextRequest, ContextResponse
from serving.services.context import context_service
from serving.services.memory import personal_view, remember_exchange
from serving.services.versions import narrowed_today, snapshot_for
from serving.state import Role, ServingState

router = APIRouter(tags=["context"])


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
        persona=body.role,
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


@router.post(
    "/context",
    response_model=ContextResponse,
    responses={401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 503: {"model": ErrorBody}},
)
def context(
    body: ContextRequest, state: State, role: CallerRole, snap: CurrentSnapshot, scope: ThreadScope
) -> ContextResponse:
    """Route a message (intents, filters, WV scope, eligibility, conversation) and return its evidence, each source
    apart (`unstructured`, `structured_facts`, `spatial`, `registry`, `web`), with the prompt built from it.
    `version` / `as_of`: from an older version (docs/versions.md)."""
    service = context_service(state)
    snap, answered_from = snapshot_for(state, role, body.version, body.as_of, snap)
    message, answered_as = message_of(body, role, state, snap, scope)
    message = narrowed_today(message, snap, state, answered_as, answered_from)
    result = service.context(snap, service.caller(answered_as), message)
    remember_exchange(state, message, result, "context")
    return ContextResponse.model_validate({**result, "answered_from": answered_from})
