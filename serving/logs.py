"""Access logs: one JSON object per line for every HTTP request, at every door (the app, /metrics, streamed
``/v1/chat/completions``, the MCP server over HTTP), with the request's id and its usage trace.

``RequestLogMiddleware`` wraps an ASGI app outside everything else (``LoggedFastAPI``: outside Starlette's own
error middleware too, so a 500 carries the id). A request's ``X-Request-ID`` is kept when it is sane (printable
ASCII, at most ``MAX_REQUEST_ID`` characters), else replaced by a fresh ``uuid4().hex``, and echoed in the
response's ``X-Request-ID`` whatever the status. When the response is done (its last byte handed to the server)
one record goes to the ``livemem.access`` logger::

    {"method": "POST", "path": "/context", "status": 200, "duration_ms": 41.7, "request_id": "…",
     "trace_id": "<uuid>", "event": "request", "level": "info", "logger": "livemem.access",
     "timestamp": "2026-05-01T12:00:00.000000Z"}

``trace_id`` is there when the request emitted a usage trace (``livemem.usage.traces.REQUEST_TRACES``): the key
that names the trace in the trace and audit files (the uuid that begins the signed ``trace_id`` of the answer);
``trace_ids`` lists them when there were several. The query string is never logged (it can hold what someone
asked). Any other record logged while a request is answered carries its ``request_id`` too, when JSON-formatted.

The access logger writes JSON to stderr by itself (``install_access_log``), so ``uvicorn serving.app:app`` logs JSON
with no logging configuration; uvicorn's own plain access lines are switched off (``--no-access-log`` in ``make
serve`` and ``livemem serve``, and the app raises the ``uvicorn.access`` logger to WARNING), so a request is one
line. ``livemem --json-logs`` formats every other record with the same formatter (``json_formatter``).
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import MutableMapping
from contextvars import ContextVar
from typing import Any

from fastapi import FastAPI

from livemem.usage.traces import REQUEST_TRACES
from serving.asgi import ResponseWatch

log = logging.getLogger("livemem.access")

HEADER = b"x-request-id"
MAX_REQUEST_ID = 128
MAX_PATH_CHARS = 512
REQUEST_ID: ContextVar[str | None] = ContextVar("livemem_request_id", default=None)


def request_id(given: bytes | None) -> str:
    """``given`` when it is a sane id (printable ASCII, 1 to ``MAX_REQUEST_ID`` characters), else a fresh one."""
    if given:
        text = given.decode("latin-1").strip()
        if 0 < len(text) <= MAX_REQUEST_ID and text.isascii() and text.isprintable():
            return text
    return uuid.uuid4().hex


def _add_request_id(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    current = REQUEST_ID.get()
    if current is not None:
        event.setdefault("request_id", current)
    return event


def json_formatter() -> logging.Formatter:
    """One JSON object per record (structlog's stdlib integration): the message as ``event``, level, logger, UTC
    time, the fields given as ``extra``, the current request's id, the traceback when there is one."""
    import structlog

    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.stdlib.ExtraAdder(),
            _add_request_id,
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
    )


class _StderrHandler(logging.StreamHandler):
    """To whatever ``sys.stderr`` is when a record is written (like logging's last resort handler)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr


def install_access_log() -> None:
    """The access logger's own JSON handler on stderr (once per process), and uvicorn's plain access lines off."""
    if not any(isinstance(h, _StderrHandler) for h in log.handlers):
        handler = _StderrHandler()
        handler.setFormatter(json_formatter())
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False  # one line per request, whatever the root logger does
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)


class RequestLogMiddleware:
    """Pure ASGI: the request id in and out, and the access log line once the response is done."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id(next((v for k, v in scope.get("headers", ()) if k.lower() == HEADER), None))
        traces: list[str] = []
        tokens = REQUEST_ID.set(rid), REQUEST_TRACES.set(traces)
        watch = ResponseWatch(send, header=(HEADER, rid.encode("ascii")))
        try:
            await self.app(scope, receive, watch.send)
        finally:
            REQUEST_TRACES.reset(tokens[1])
            REQUEST_ID.reset(tokens[0])
            fields = {
                "method": scope.get("method"),
                "path": scope.get("path", "")[:MAX_PATH_CHARS],
                "status": watch.status,
                "duration_ms": round(watch.seconds * 1000, 3),
                "request_id": rid,
            }
            if traces:
                fields["trace_id"] = traces[0]
                if len(traces) > 1:
                    fields["trace_ids"] = list(traces)
            log.info("request", extra=fields)


class LoggedFastAPI(FastAPI):
    """FastAPI with ``RequestLogMiddleware`` outside its whole middleware stack (error responses included)."""

    def build_middleware_stack(self):
        return RequestLogMiddleware(super().build_middleware_stack())
