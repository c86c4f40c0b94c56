"""The one error a service raises for a request it cannot answer.

``ServiceError`` carries the HTTP status the request maps to and is FastAPI's ``HTTPException``, so an HTTP route
lets it through as it is (the app's handler answers it); the MCP tools turn it into a tool error carrying
``message`` and the CLI into its error line (``message``). ``detail`` is the HTTP body's ``detail`` when it says
more than ``message`` (a mapping naming the offending values)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import HTTPException

# RFC 9110 §11.6.1: a 401 names how to authenticate. Keys go in ``Authorization: Bearer`` (RFC 6750) or ``X-API-Key``.
CHALLENGE = 'Bearer realm="living-memory"'
UNAUTHORIZED_HEADERS = {"WWW-Authenticate": CHALLENGE}


class ServiceError(HTTPException):
    def __init__(self, status: int, message: str, detail: Any = None, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(status, message if detail is None else detail, headers)
        self.message = message

    @classmethod
    def of(cls, exc: HTTPException) -> ServiceError:
        """An ``HTTPException`` raised below a service (a shared dependency's), as a ``ServiceError``."""
        if isinstance(exc, ServiceError):
            return exc
        detail = exc.detail
        message = detail.get("message", str(detail)) if isinstance(detail, dict) else str(detail)
        return cls(exc.status_code, message, detail, exc.headers)
