"""GET /chunks/{chunk_id}."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from serving.deps import CallerRole, CurrentSnapshot, State
from serving.models import UUID_PATTERN, ChunkResponse, ErrorBody
from serving.models.examples import QUERY_RESULT

router = APIRouter(tags=["chunks"])


@router.get(
    "/chunks/{chunk_id}",
    response_model=ChunkResponse,
    responses={404: {"model": ErrorBody}, 503: {"model": ErrorBody}},
)
def get_chunk(
    chunk_id: Annotated[
        str, Path(pattern=UUID_PATTERN, description="chunk id (UUID)", examples=[QUERY_RESULT["chunk_id"]])
    ],
    state: State,
    role: CallerRole,
    snap: CurrentSnapshot,
    verify: Annotated[
        bool, Query(description="check the chunk against its source repository now", examples=[True])
    ] = False,
) -> ChunkResponse:
    """The chunk record; with ``verify=true``, whether its source file still holds it."""
    return ChunkResponse.model_validate(state.chunks.chunk(chunk_id, role, verify, snap))
