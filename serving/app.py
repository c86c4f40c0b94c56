"""The serving app: ``create_app(settings)`` builds it; ``app`` is the one ``make serve`` runs (settings from env).

Building the app reads settings only: the index is opened on the first request (or at startup, to warm up),
and the embedding model is loaded once per process. With ``warm_up`` (the default) every one-off setup happens in
the startup, before a worker takes a request: the query encoder, BM25 and the dense scan, every route's validators
(``build_routes``), the current version, all /context and /chat build once (``ContextService.prepare``), the
thread pool sync routes run in and the metrics' files, so a worker's first request costs what any does.
"""

from __future__ import annotations

import gc
import logging
import math
import sqlite3
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from livemem.engine.snapshot import IndexUnavailable
from livemem.errors import LivingMemoryError
from livemem.gbim.sparql_worker import SparqlLimits, SparqlPool
from livemem.index import dense, sparse
from livemem.model.embedding import Embedder
from livemem.usage.traces import SHUTDOWN_FLUSH_WAIT_S
from serving.cors import LinkedDataCORS
from serving.deps import without_server_paths
from serving.limits import RequestLimitsMiddleware
from serving.logs import LoggedFastAPI, install_access_log
from serving.metrics import MetricsMiddleware
from serving.openapi import install as complete_openapi
from serving.routers import chat, chunks, compat, context, facts, gis, glassbox, memory, query, resources, system
from serving.routers import versions as version_routes
from serving.services.context import context_service
from serving.services.errors import UNAUTHORIZED_HEADERS
from serving.settings import Settings
from serving.state import ServingState

log = logging.getLogger(__name__)


def _postgres_errors() -> tuple[type[Exception], ...]:
    """Postgres' "unreachable or timed out" error, when its driver is installed (the ``postgres`` extra)."""
    try:
        import psycopg
    except ImportError:
        return ()
    return (psycopg.OperationalError,)


MAX_ERRORS_SHOWN = 20
MAX_INPUT_CHARS = 200


def create_app(settings: Settings | None = None, embedder: Embedder | None = None) -> FastAPI:
    """The app for ``settings`` (default: from the environment); tests pass one shared ``embedder``."""
    settings = settings or Settings.from_env()
    state = ServingState.from_settings(settings, embedder)
    sparql_pool = SparqlPool(
        SparqlLimits(
            workers=settings.sparql_workers,
            timeout_s=settings.sparql_timeout_s,
            memory_mb=settings.sparql_memory_mb,
        ),
        gbim_iri=f"{settings.rdf_base_iri}gbim/",
    )
    install_access_log()  # one JSON line per request, with its X-Request-ID (serving/logs.py)
    app = LoggedFastAPI(
        title="Living Memory",
        summary="Read-only retrieval over the published living-memory index",
        version="0.1.0",
        lifespan=_lifespan(settings, state, sparql_pool),
    )
    app.state.serving = state
    app.state.sparql = sparql_pool
    _include_routers(app)
    complete_openapi(app)  # API keys as security schemes, open routes marked, the real 422 body (serving/openapi.py)
    app.add_middleware(
        RequestLimitsMiddleware, max_body_bytes=settings.max_body_bytes, body_timeout_s=settings.body_timeout_s
    )
    if settings.cors_origins:  # /facts and /gbim/ for query editors on other origins (serving/cors.py)
        app.add_middleware(LinkedDataCORS, origins=settings.cors_origins)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)  # outermost: it also counts the 413s
    _install_error_handlers(app)
    return app


def _lifespan(settings: Settings, state: ServingState, sparql_pool: SparqlPool) -> Callable[[FastAPI], Any]:
    """The app's lifespan: the warm-up (when ``settings.warm_up``) before the first request, the shutdown after
    the last."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        if settings.warm_up:
            await _warm_up(_app, state)
        try:
            yield
        finally:
            _shut_down(state, sparql_pool)

    return lifespan


async def _warm_up(app: FastAPI, state: ServingState) -> None:
    """Every one-off setup of a worker, in the startup: encoder, BM25, dense scan, routes, /context and /chat."""
    state.retriever.encode("warm up")
    sparse.warm_up()
    dense.warm_up()
    build_routes(app)  # each route's dependants and validators: FastAPI builds them on its first request
    try:
        snap = state.reader.snapshot()
    except IndexUnavailable as exc:
        log.warning("%s", exc)
    else:
        started = time.perf_counter()
        try:
            context_service(state).prepare(snap)  # /context's one-off setup: here, not in a first request
        except Exception as exc:  # best effort, like the warm-up: the request that needs it says what fails
            log.warning("preparing /context and /chat failed: %r", exc)
        log.info("/context and /chat prepared in %.1f s", time.perf_counter() - started)
    # the thread pool a sync route runs in: anyio's asyncio backend (imported on its first use) and a thread
    await run_in_threadpool(state.metrics.prepare)  # and the metrics' files (with several workers)
    # the tables startup built (places, ZIPs, the version's) are kept for the process' life: out of the
    # collector's way, so a first request does not pay a full collection over millions of startup objects
    gc.collect()
    gc.freeze()


def _shut_down(state: ServingState, sparql_pool: SparqlPool) -> None:
    """Stop the SPARQL workers, write what is queued, leave the shared metrics."""
    sparql_pool.close()
    # the traces of the last requests, queued (livemem.usage.traces), and any audit records queued behind a
    # locked audit file: on disk before exit, unless a file stays locked elsewhere (then not waited for)
    service = state.context_service
    for writer in (state.traces, *([service.audit] if service is not None else [])):
        if not writer.flush(wait_s=SHUTDOWN_FLUSH_WAIT_S):
            log.warning("queued traces not all written to %s at shutdown", writer.directory)
    state.metrics.close()  # with several workers: this one's live gauges leave the shared metrics files


def _include_routers(app: FastAPI) -> None:
    """Every router of the API, in the order of the OpenAPI document."""
    app.include_router(query.router)
    app.include_router(chunks.router)
    app.include_router(system.router)
    app.include_router(gis.router)
    app.include_router(facts.router)
    app.include_router(resources.router)
    app.include_router(context.router)
    app.include_router(chat.router)
    app.include_router(compat.router)
    app.include_router(glassbox.router)  # GET /glassbox: the explanation page (docs/glassbox.md)
    app.include_router(memory.router)  # /memory: per-user personal memory (docs/personal-memory.md)
    app.include_router(version_routes.router)  # /versions: the index's history and diffs (docs/versions.md)


def _install_error_handlers(app: FastAPI) -> None:
    """The app's answers to errors: 503 for an unavailable index or store, the 401/5xx rules, the 422 body."""
    # Starlette's stubs type every handler as taking any Exception, not the class it is registered for
    app.add_exception_handler(IndexUnavailable, _index_unavailable)  # type: ignore[arg-type]
    app.add_exception_handler(LivingMemoryError, _living_memory_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    # Postgres is optional (the ``postgres`` extra): its errors are handled when its driver is installed
    busy_errors: tuple[type[Exception], ...] = (sqlite3.OperationalError, *_postgres_errors())
    for busy in busy_errors:
        app.add_exception_handler(busy, _storage_busy)
    app.add_exception_handler(RequestValidationError, _invalid_request)  # type: ignore[arg-type]


async def _index_unavailable(_request: Request, exc: IndexUnavailable) -> JSONResponse:
    """No version published (or readable): 503, without server paths."""
    return JSONResponse({"detail": without_server_paths(str(exc))}, status_code=503)


async def _living_memory_error(_request: Request, exc: LivingMemoryError) -> JSONResponse:
    """Any other failure of the living memory: logged whole, 503 without server paths."""
    log.error("%s", exc)  # with server paths, for operators; the caller gets the message without them
    return JSONResponse({"detail": without_server_paths(str(exc))}, status_code=503)


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    """An HTTP error: a 401 says how to authenticate, /v1/* in OpenAI's shape, a 5xx without server paths."""
    if exc.status_code == 401 and "WWW-Authenticate" not in (exc.headers or {}):  # every 401 says how (RFC 9110)
        exc = StarletteHTTPException(401, exc.detail, {**(exc.headers or {}), **UNAUTHORIZED_HEADERS})
    if (openai := chat.openai_http_error(request, exc)) is not None:
        return openai  # /v1/*: OpenAI's error shape for unknown paths and wrong methods too
    # a 5xx says what failed on the server (a damaged version on /healthz, a store): never where it lives. 4xx
    # details are about the request (and may name routes such as /v1/models), so they are left as written.
    if exc.status_code >= 500:
        exc = StarletteHTTPException(exc.status_code, without_server_paths(exc.detail), exc.headers)
    return await http_exception_handler(request, exc)


async def _storage_busy(_request: Request, exc: Exception) -> JSONResponse:
    """A store locked or unreachable: 503 with Retry-After."""
    # a store of this service (personal memory, the answer cache's tier) locked or unreachable past its timeout
    # (SQLite's busy timeout, Postgres' statement_timeout / connect_timeout): transient, so 503, not a crash
    log.warning("storage busy or unreachable: %s", exc)
    return JSONResponse(
        {"detail": "storage is busy or unreachable; try again shortly"},
        status_code=503,
        headers={"Retry-After": "1"},
    )


async def _invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """A request failing validation: 422, each error with its input summarised, and one message."""
    found = exc.errors()
    errors = [_error_summary(e) for e in found[:MAX_ERRORS_SHOWN]]
    message = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors)
    if len(found) > MAX_ERRORS_SHOWN:
        message += f"; and {len(found) - MAX_ERRORS_SHOWN} more problems"
    return JSONResponse({"detail": errors, "message": message}, status_code=422)


def build_routes(app: FastAPI) -> int:
    """Build every route's request state now; the number of routes. FastAPI (0.16x) builds an included router's
    routes (their dependants, parameter and body validators, response fields: pydantic schemas) on the first request
    that reaches them: 0.1-0.2 s of a worker's first /context (issue 49), every router before /context's on the way.
    ``iter_route_contexts`` walks them all, as the OpenAPI document does; the low-priority routes too."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # an older FastAPI built every route when it was included
        return len(app.router.routes)
    count = sum(1 for _ in iter_route_contexts(app.router.routes))
    for route in app.router.routes:
        if callable(low_priority := getattr(route, "effective_low_priority_routes", None)):
            count += len(low_priority())
    return count


def _error_summary(error: dict) -> dict:
    """One validation error, safe to send back: the offending input summarised, never echoed whole."""
    summary: dict[str, object] = {
        "type": str(error.get("type", "")),
        "loc": [p if isinstance(p, int) else _short(str(p)) for p in error.get("loc", ())],
        "msg": _short(str(error.get("msg", ""))),
    }
    if "input" in error:
        summary["input"] = _input_summary(error["input"])
    return jsonable_encoder(summary)


def _input_summary(value: object) -> object:
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return _short(value)
    if isinstance(value, list | tuple | dict):
        return f"<{type(value).__name__} of {len(value)} items>"
    return f"<{type(value).__name__}>"


def _short(text: str) -> str:
    """At most MAX_INPUT_CHARS characters, and always encodable (a lone surrogate becomes "?")."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    if len(text) <= MAX_INPUT_CHARS:
        return text
    return f"{text[:MAX_INPUT_CHARS]}… ({len(text)} characters)"


app = create_app()
