"""GET /versions and GET /versions/{a}/diff/{b}: the index's history as the caller's role may see it
(docs/versions.md). Versions are named by id, ``current``, an ISO date-time or a source commit. ``snapshot_for``:
the version a retrieval request (``version`` / ``as_of`` on POST /query) answers from."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query

from livemem.version.diff import diff_versions
from livemem.version.history import (
    BadVersionReference,
    VersionNotFound,
    disk_usage,
    list_versions,
    lookup,
    resolve,
)
from livemem.version.reader import Snapshot
from serving.deps import CallerRole, State
from serving.models import ErrorBody
from serving.models.versions import DiffResponse, VersionsResponse
from serving.state import Role, ServingState

router = APIRouter(tags=["versions"])
Ref = Annotated[str, Path(min_length=1, max_length=64, description="a version id, 'current', a date-time or a commit")]


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
    top: Annotated[int, Query(ge=1, le=100, description="attention movers listed")] = 10,
    limit: Annotated[int, Query(ge=1, le=1000, description="ids and files listed per kind")] = 50,
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


def snapshot_for(
    state: ServingState, role: Role, version: str | None, as_of: str | None, loaded: Snapshot | None = None
) -> tuple[Snapshot, dict | None]:
    """The snapshot a request answers from, and (when it named a version) which one and whether it is current.

    No ``version`` / ``as_of``: the version CURRENT names, as always, and None. Otherwise the named kept version:
    the loaded current snapshot (``loaded``, the request's ``CurrentSnapshot``) when it is that one, else one of the process' open older versions
    (``ServingState.older``, an LRU sharing segments with CURRENT). Unknown: 404; malformed: 422."""
    if version is None and as_of is None:
        return loaded or state.reader.snapshot(), None
    try:
        found = resolve(state.reader.home, version, as_of, role.access)
    except VersionNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except BadVersionReference as exc:
        raise HTTPException(422, str(exc)) from None
    current = loaded or state.reader.snapshot()
    snap = current if current.version_id == found.version_id else state.older.get(found.version_id)
    return snap, found.to_dict()  # current: whether CURRENT names it now (the resolution read CURRENT)


def readable_today(snap: Snapshot, current: Snapshot, role: Role) -> list[str]:
    """The collections of ``snap`` the role may read, by today's rules as well: a collection the current version
    holds at an access level the role may not read is not shown from an older version either."""
    return [c for c in snap.collections_for(role.access) if current.access_of.get(c, snap.access_of[c]) in role.access]


def narrowed_today(message: Any, snap: Snapshot, state: ServingState, role: Role, answered_from: dict | None) -> Any:
    """A /context or /chat message (``livemem.answer.routing.ContextRequest``) answered from an older version: its
    collections less those today's version hides from the role (``readable_today``); unchanged for CURRENT."""
    if answered_from is None:
        return message
    allowed = readable_today(snap, state.reader.snapshot(), role)
    chosen = tuple(c for c in (message.collections or allowed) if c in allowed)
    # () would mean "every collection the role may read" in that version: "" names none (no collection is "")
    return replace(message, collections=chosen or ("",))
