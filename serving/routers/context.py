"""POST /context: a message → route, fused evidence (kept apart by source) and the assembled prompt."""

from __future__ import annotations

from fastapi import APIRouter

from livemem.context import ContextRequest as Message
from livemem.reader import Snapshot
from serving.context_models import ContextRequest, ContextResponse
from serving.context_service import context_service
from serving.deps import CallerRole, CurrentSnapshot, State, with_persona
from serving.models import ErrorBody
from serving.state import Role, ServingState

router = APIRouter(tags=["context"])


def message_of(body: ContextRequest, role: Role, state: ServingState, snap: Snapshot) -> tuple[Message, Role]:
    """The plain request and the role it is answered as: a body ``role`` is a persona within the caller's access
    (``serving.deps.with_persona``; access itself comes from the API key)."""
    profile = body.profile.model_dump(exclude_none=True) if body.profile else {}
    message = Message(body.message, body.county, body.zip, profile, body.top_k, body.thread_id)
    return with_persona(message, body.role, role, state, snap)


@router.post(
    "/context",
    response_model=ContextResponse,
    responses={401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 503: {"model": ErrorBody}},
)
def context(body: ContextRequest, state: State, role: CallerRole, snap: CurrentSnapshot) -> ContextResponse:
    """Route a message (intents, filters, WV scope, eligibility) and return its evidence, each source apart
    (`unstructured`, `structured_facts`, `spatial`, `registry`, `web`), with the prompt built from it."""
    service = context_service(state)
    message, role = message_of(body, role, state, snap)
    result = service.context(snap, service.caller(role), message)
    return ContextResponse.model_validate(result)
