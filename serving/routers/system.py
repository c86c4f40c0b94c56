"""GET /manifest, /healthz and /metrics."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, HTTPException, Response

from livemem.version.reader import parse_time
from serving.deps import CallerRole, CurrentSnapshot, State, visible_manifest
from serving.models import ErrorBody, Health

router = APIRouter(tags=["system"])


@router.get("/manifest", responses={503: {"model": ErrorBody}})
def manifest(role: CallerRole, snap: CurrentSnapshot) -> dict[str, Any]:
    """The served version's manifest (``schemas/manifest.schema.json``), without collections the caller
    may not read."""
    return visible_manifest(snap, role)


@router.get("/healthz", response_model=Health, responses={503: {"model": ErrorBody}})
def healthz(state: State, snap: CurrentSnapshot) -> Health:
    """The served index version and its age; 503 when nothing is published or the published version is damaged
    or unreadable (queries are then still answered from the last good version this process holds)."""
    problem = state.reader.problem()
    if problem is not None:
        raise HTTPException(503, f"{problem}; still answering from version {snap.version_id}")
    created = snap.manifest.get("created_at")
    created_ts = parse_time(created)
    age = None if created_ts != created_ts else round(time.time() - created_ts, 3)
    return Health(
        status="ok", index_version=snap.version_id, index_created_at=created, index_age_s=age, model=snap.model_id
    )


@router.get("/metrics", response_class=Response)
def metrics(state: State, role: CallerRole) -> Response:
    """Prometheus text format; counts of indexed data cover only what the caller's role may read."""
    return Response(state.metrics.render(role.access), media_type="text/plain; version=0.0.4; charset=utf-8")
