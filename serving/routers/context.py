"""POST /context: a message → route, fused evidence (kept apart by source) and the assembled prompt."""

from __future__ import annotations

from fastapi import APIRouter

from serving.deps import CallerRole, CurrentSnapshot, State, ThreadScope
from serving.models import ErrorBody
from serving.models.context import ContextRequest, ContextResponse
from serving.services.answers import answer_context

router = APIRouter(tags=["context"])


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
    return ContextResponse.model_validate(answer_context(body, state, role, snap, scope))
