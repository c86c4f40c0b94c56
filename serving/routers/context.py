"""POST /context: a message → route, fused evidence (kept apart by source) and the assembled prompt."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from livemem.context import ContextRequest as Message
from serving.context_models import ContextRequest, ContextResponse
from serving.context_service import context_service
from serving.deps import CallerRole, CurrentSnapshot, State
from serving.models import ErrorBody
from serving.state import Role

router = APIRouter(tags=["context"])


def message_of(body: ContextRequest, role: Role) -> Message:
    """The plain request; a body ``role`` may only name the caller's own role (roles come from API keys)."""
    if body.role is not None and body.role != role.name:
        raise HTTPException(
            403, f"role {body.role!r} is not the caller's role ({role.name}); roles come from the X-API-Key header"
        )
    profile = body.profile.model_dump(exclude_none=True) if body.profile else {}
    return Message(body.message, body.county, body.zip, profile, body.top_k, body.thread_id)


@router.post(
    "/context",
    response_model=ContextResponse,
    responses={401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 503: {"model": ErrorBody}},
)
def context(body: ContextRequest, state: State, role: CallerRole, snap: CurrentSnapshot) -> ContextResponse:
    """Route a message (intents, filters, WV scope, eligibility) and return its evidence, each source apart
    (`unstructured`, `structured_facts`, `spatial`, `registry`, `web`), with the prompt built from it."""
    service = context_service(state)
    result = service.context(snap, service.caller(role), message_of(body, role))
    return ContextResponse.model_validate(result)
