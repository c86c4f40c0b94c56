"""GET /manifest, /healthz and /metrics."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, HTTPException, Response

from livemem.engine.snapshot import parse_time
from serving.deps import CallerRole, CurrentSnapshot, State, visible_manifest
from serving.models import ErrorBody, Health
from serving.models.examples import COMMIT, VERSION

router = APIRouter(tags=["system"])

# examples for /openapi.json: a manifest cut to its main keys (the whole: schemas/manifest.schema.json), a scrape
MANIFEST_EXAMPLE = {
    "version_id": VERSION,
    "base_version": None,
    "created_at": "2026-11-22T00:34:12.518204Z",
    "model": "sentence-transformers/all-MiniLM-L6-v2",
    "total_chunks": 152,
    "collections": {"wv_benefits": {"chunks": 61}, "governance": {"chunks": 12}},
    "sources": {"wv-benefits": {"commit": COMMIT, "collection": "wv_benefits", "access": "public"}},
}
METRICS_EXAMPLE = (
    "# HELP livemem_http_requests_total HTTP requests answered\n# TYPE livemem_http_requests_total counter\n"
    'livemem_http_requests_total{route="/query",method="POST",status="200"} 42.0\n'
    f'livemem_index_info{{version="{VERSION}",model="sentence-transformers/all-MiniLM-L6-v2"}} 1.0\n'
)


@router.get(
    "/manifest",
    responses={200: {"content": {"application/json": {"example": MANIFEST_EXAMPLE}}}, 503: {"model": ErrorBody}},
)
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


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text exposition format 0.0.4",
            "content": {"text/plain": {"schema": {"type": "string"}, "example": METRICS_EXAMPLE}},
        }
    },
)
def metrics(state: State, role: CallerRole) -> Response:
    """Prometheus text format; counts of indexed data cover only what the caller's role may read."""
    return Response(state.metrics.render(role.access), media_type="text/plain; version=0.0.4; charset=utf-8")
