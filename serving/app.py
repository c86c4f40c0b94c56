"""The serving app: ``create_app(settings)`` builds it; ``app`` is the one ``make serve`` runs (settings from env).

Building the app reads settings only: the index is opened on the first request (or at startup, to warm up),
and the embedding model is loaded once per process.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from livemem.embedding import Embedder
from livemem.errors import LivingMemoryError
from livemem.reader import IndexUnavailable
from serving.metrics import MetricsMiddleware
from serving.routers import chat, chunks, context, facts, gis, query, resources, system
from serving.settings import Settings
from serving.state import ServingState

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, embedder: Embedder | None = None) -> FastAPI:
    """The app for ``settings`` (default: from the environment); tests pass one shared ``embedder``."""
    settings = settings or Settings.from_env()
    state = ServingState.from_settings(settings, embedder)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        if settings.warm_up:
            state.retriever.encode("warm up")
            try:
                state.reader.snapshot()
            except IndexUnavailable as exc:
                log.warning("%s", exc)
        yield

    app = FastAPI(
        title="Living Memory",
        summary="Read-only retrieval over the published living-memory index",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.serving = state
    app.include_router(query.router)
    app.include_router(chunks.router)
    app.include_router(system.router)
    app.include_router(gis.router)
    app.include_router(facts.router)
    app.include_router(resources.router)
    app.include_router(context.router)
    app.include_router(chat.router)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)

    @app.exception_handler(IndexUnavailable)
    async def index_unavailable(_request: Request, exc: IndexUnavailable) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=503)

    @app.exception_handler(LivingMemoryError)
    async def living_memory_error(_request: Request, exc: LivingMemoryError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=503)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = jsonable_encoder([{k: v for k, v in e.items() if k not in ("ctx", "url")} for e in exc.errors()])
        message = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors)
        return JSONResponse({"detail": errors, "message": message}, status_code=422)

    return app


app = create_app()
