"""Cross-origin requests (CORS) for the linked-data routes: ``/facts`` (the SPARQL endpoint and RDF) and
``/gbim/`` (entity IRIs), so that a query editor served from another origin (YASGUI) can query from a browser.

Starlette's ``CORSMiddleware`` answers preflights and adds the headers; this wrapper only limits it to those paths:
the rest of the API (chat, personal memory, traces) is not opened to other origins. Credentials (cookies) are never
allowed: keys travel in ``X-API-Key``, which a page must send itself. Origins come from ``RAG_CORS_ORIGINS``
(docs/sparql.md); without any, the app adds no CORS at all.
"""

from __future__ import annotations

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

CORS_PATHS = ("/facts", "/gbim/")
ALLOWED_METHODS = ["GET", "HEAD", "POST", "OPTIONS"]
# Accept and Content-Type (application/sparql-query is not a "simple" type, so it is preflighted) and the key.
ALLOWED_HEADERS = ["Accept", "Content-Type", "X-API-Key", "X-Requested-With"]
EXPOSED_HEADERS = ["X-Index-Version", "X-Results-Truncated", "Retry-After", "Location"]
PREFLIGHT_MAX_AGE_S = 600


def _linked_data(scope: Scope) -> bool:
    path = scope["path"].removeprefix(scope.get("root_path", ""))
    return path == "/facts" or path.startswith(("/facts/", "/gbim/"))


class LinkedDataCORS:
    """CORS for ``CORS_PATHS`` from ``origins`` (``["*"]``: any origin, answered ``*``)."""

    def __init__(self, app: ASGIApp, origins: list[str]) -> None:
        self.app = app
        self.cors = CORSMiddleware(
            app,
            allow_origins=origins,
            allow_methods=ALLOWED_METHODS,
            allow_headers=ALLOWED_HEADERS,
            expose_headers=EXPOSED_HEADERS,
            allow_credentials=False,
            max_age=PREFLIGHT_MAX_AGE_S,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _linked_data(scope):
            await self.cors(scope, receive, send)
        else:
            await self.app(scope, receive, send)
