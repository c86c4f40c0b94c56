"""GET /chunks/{chunk_id}."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query

from livemem.ingest.provenance import verify_chunk
from livemem.version.reader import without_paths
from serving.deps import CallerRole, CurrentSnapshot
from serving.models import UUID_PATTERN, ChunkResponse, ErrorBody

router = APIRouter(tags=["chunks"])


@router.get(
    "/chunks/{chunk_id}",
    response_model=ChunkResponse,
    responses={404: {"model": ErrorBody}, 503: {"model": ErrorBody}},
)
def get_chunk(
    chunk_id: Annotated[str, Path(pattern=UUID_PATTERN, description="chunk id (UUID)")],
    role: CallerRole,
    snap: CurrentSnapshot,
    verify: Annotated[bool, Query(description="check the chunk against its source repository now")] = False,
) -> ChunkResponse:
    """The chunk record; with ``verify=true``, whether its source file still holds it."""
    row = snap.row_of.get(chunk_id)
    # A chunk the caller may not read is reported exactly like one that does not exist.
    if row is None or snap.columns["access"][row] not in role.access:
        raise HTTPException(404, f"no chunk {chunk_id} in index version {snap.version_id}")
    record = snap.record(row)
    verification = verify_chunk(record, snap.manifest) if verify else None
    if verification is not None:  # a git error names the repository's path on this server
        verification["detail"] = without_paths(verification["detail"])
    return ChunkResponse.model_validate(
        {
            **record,
            "collection": record["metadata"]["collection"],
            "index_version": snap.version_id,
            "verification": verification,
        }
    )
