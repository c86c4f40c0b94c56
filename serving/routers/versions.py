"""GET /versions and GET /versions/{a}/diff/{b}: the index's history as the caller's role may see it
(docs/versions.md). Versions are named by id, ``current``, an ISO date-time or a source commit. The version a
retrieval request (``version`` / ``as_of`` on POST /query, /context, /chat) answers from:
``serving.services.versions``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query

from livemem.version.diff import diff_versions
from livemem.version.history import (
    BadVersionReference,
    VersionNotFound,
    disk_usage,
    list_versions,
    lookup,
)
from serving.deps import CallerRole, State
from serving.models import ErrorBody
from serving.models.examples import VERSION
from serving.models.versions import DiffResponse, VersionsResponse

router = APIRouter(tags=["versions"])
Ref = Annotated[
    str,
    Path(
        min_length=1,
        max_length=64,
        description="a version id, 'current', a date-time or a commit",
        examples=["current", VERSION, "2026-11-01T00:00:00Z"],
    ),
]


@router.get("/versions", response_model=VersionsResponse, responses={503: {"model": ErrorBody}})
def versions(state: State, role: CallerRole) -> VersionsResponse:
    """Kept versions, oldest first: id, when published, each readable source's commit, counts; the disk they take
    for a role that may read every source."""
    home = state.reader.home
    listed = list_versions(home, role.access)
    whole = all(v["version_size_mb"] is not None for v in listed)
    return VersionsResponse(current=home.current(), versions=listed, disk=disk_usage(home) if whole else None)


@router.get(
    "/versions/{a}/diff/{b}",
    response_model=DiffResponse,
    response_model_by_alias=True,
    responses={404: {"model": ErrorBody}, 422: {"model": ErrorBody}, 503: {"model": ErrorBody}},
)
def diff(
    a: Ref,
    b: Ref,
    state: State,
    role: CallerRole,
    top: Annotated[int, Query(ge=1, le=100, description="attention movers listed", examples=[10])] = 10,
    limit: Annotated[int, Query(ge=1, le=1000, description="ids and files listed per kind", examples=[50])] = 50,
) -> DiffResponse:
    """What changed from version ``a`` to ``b``: files and chunks per source, registry rows, GBIM entities and
    attention's top movers, over only what the caller's role may read."""
    home = state.reader.home
    try:
        old, new = lookup(home, a, role.access), lookup(home, b, role.access)
    except VersionNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except BadVersionReference as exc:
        raise HTTPException(422, str(exc)) from None
    result = diff_versions(home, old.version_id, new.version_id, access=role.access, top=top, limit=limit)
    result["from"]["asked"], result["to"]["asked"] = a, b
    return DiffResponse.model_validate(result)
