"""Request bodies are bounded before they are read whole, and JSON bodies are strict before FastAPI parses them.

``RequestLimitsMiddleware`` (pure ASGI) answers 413 as soon as a declared ``Content-Length`` or the bytes of a
streamed (chunked) body pass ``max_body_bytes``; the rest is never read and the connection is closed. A JSON body
within the limit is then checked for what Python's ``json`` accepts but JSON does not (``NaN``, ``Infinity``,
``-Infinity``, numbers that overflow to infinity, lone UTF-16 surrogates such as ``"\\ud800"``) and for nesting too
deep to parse: a 422 naming the problem, never a 500 further down (traces, the cache and responses cannot
encode them).
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_NUMBER_DIGITS = 100


class BadJson(ValueError):
    """Valid to Python's ``json`` module, but not a JSON body this service accepts."""


def _reject_constant(name: str) -> float:
    raise BadJson(f"{name} is not a JSON number; send a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadJson(f"the number {text[:40]} is out of range (it would be infinite)")
    return value


def _bounded_int(text: str) -> int:
    if len(text) > MAX_NUMBER_DIGITS:
        raise BadJson(f"a number with {len(text)} digits is out of range")
    return int(text)


def _check_text(value: Any) -> None:
    """Every string and key must be encodable as UTF-8 (no lone surrogates)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    raise BadJson(
                        "a string holds a lone UTF-16 surrogate (such as \\ud800), which is not valid Unicode"
                    ) from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def json_problem(body: bytes) -> str | None:
    """Why ``body`` is not acceptable JSON, or None (also for bodies that are not JSON at all: FastAPI says so)."""
    try:
        parsed = json.loads(body, parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_bounded_int)
    except BadJson as exc:
        return str(exc)
    except RecursionError:
        return "the JSON body is nested too deeply"
    except ValueError:  # not JSON (or not UTF-8): FastAPI's own 422 describes it
        return None
    try:
        _check_text(parsed)
    except BadJson as exc:
        return str(exc)
    return None


def _is_json(headers: dict[bytes, bytes]) -> bool:
    """Whether FastAPI would parse this body as JSON (it also does when there is no content type)."""
    content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    return not content_type or content_type == b"application/json" or content_type.endswith(b"+json")


class RequestLimitsMiddleware:
    """413 for bodies over ``max_body_bytes`` (declared or streamed), 422 for non-compliant JSON bodies."""

    def __init__(self, app, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                await _answer(send, 400, {"detail": "Content-Length is not a number"})
                return
            if int(declared) > self.max_body_bytes:
                await self._too_large(send)
                return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._too_large(send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body and _is_json(headers):
            problem = json_problem(body)
            if problem:
                error = {"type": "json_invalid", "loc": ["body"], "msg": problem}
                await _answer(send, 422, {"detail": [error], "message": f"body: {problem}"})
                return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, send) -> None:
        detail = f"the request body is larger than {self.max_body_bytes} bytes, the most this server accepts"
        # Closing the connection is what lets the server skip the rest of the body instead of draining it.
        await _answer(send, 413, {"detail": detail}, close=True)


async def _answer(send, status: int, content: dict[str, Any], close: bool = False) -> None:
    body = json.dumps(content).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
