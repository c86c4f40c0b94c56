"""Request bodies are bounded before they are read whole, and JSON bodies are strict before FastAPI parses them.

``RequestLimitsMiddleware`` (pure ASGI) answers 413 as soon as a declared ``Content-Length`` or the bytes of a
streamed (chunked) body pass ``max_body_bytes``; the rest is never read and the connection is closed. A JSON body
within the limit is then checked for what Python's ``json`` accepts but JSON does not (``NaN``, ``Infinity``,
``-Infinity``, numbers that overflow to infinity, lone UTF-16 surrogates such as ``"\\ud800"``) and for nesting too
deep to parse: a 422 naming the problem, never a 500 further down (traces, the cache and responses cannot
encode them).

The guard and FastAPI must agree on what the body is: a request with more than one ``Content-Type`` (or
``Content-Length``) header is refused with 400 before its body is read (the guard would judge one header and FastAPI
parse the other), and whether a body is JSON is decided the way FastAPI decides it (``email.message`` parsing of the
one ``Content-Type``).

A body must arrive whole within ``body_timeout_s`` of the request's headers (slowloris): a client that stalls
mid-body is answered 408 and its connection closed, so a stalled upload holds no task, buffer or socket past it.
"""

from __future__ import annotations

import asyncio
import email.message
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


COMMON_JSON_TYPES = frozenset({b"application/json", b"application/json; charset=utf-8"})  # no parsing needed


def _is_json(content_type: bytes | None) -> bool:
    """Whether FastAPI would parse a body with this ``Content-Type`` as JSON (``fastapi.routing``: an ``application``
    type whose subtype is ``json`` or ends in ``+json``); a body without one is checked as JSON too (stricter)."""
    if not content_type or content_type in COMMON_JSON_TYPES:
        return True
    message = email.message.Message()
    message["content-type"] = content_type.decode("latin-1")
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


SINGLETON_HEADERS = (b"content-type", b"content-length")


class _TooLarge(Exception):
    """The body passed ``max_body_bytes`` while it was read."""


class RequestLimitsMiddleware:
    """400 for repeated ``Content-Type`` / ``Content-Length`` headers, 413 for bodies over ``max_body_bytes``
    (declared or streamed), 408 for bodies not whole within ``body_timeout_s``, 422 for non-compliant JSON bodies."""

    def __init__(self, app, max_body_bytes: int, body_timeout_s: float = 10.0) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, list[bytes]] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.lower(), []).append(value)
        for name in SINGLETON_HEADERS:
            if len(headers.get(name, ())) > 1:
                shown = name.decode().title()
                detail = f"the request has {len(headers[name])} {shown} headers; send exactly one"
                await _answer(send, 400, {"detail": detail}, close=True)
                return
        declared = headers.get(b"content-length", [None])[0]
        if declared is not None:
            if not declared.strip().isdigit():
                await _answer(send, 400, {"detail": "Content-Length is not a number"})
                return
            if int(declared) > self.max_body_bytes:
                await self._too_large(send)
                return
        try:
            async with asyncio.timeout(self.body_timeout_s):  # one deadline for the whole body, not per chunk
                body = await self._read_body(receive)
        except TimeoutError:
            await self._too_slow(send)
            return
        except _TooLarge:
            await self._too_large(send)
            return
        if body is None:  # the client went away
            return
        if body and _is_json(headers.get(b"content-type", [None])[0]):
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

    async def _read_body(self, receive) -> bytes | None:
        """The whole body (None when the client disconnects); ``_TooLarge`` as soon as it passes the limit."""
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _TooLarge
            chunks.append(chunk)
            more = message.get("more_body", False)
        return b"".join(chunks)

    async def _too_large(self, send) -> None:
        detail = f"the request body is larger than {self.max_body_bytes} bytes, the most this server accepts"
        # Closing the connection is what lets the server skip the rest of the body instead of draining it.
        await _answer(send, 413, {"detail": detail}, close=True)

    async def _too_slow(self, send) -> None:
        detail = f"the request body did not arrive within {self.body_timeout_s:g} s; send the whole body promptly"
        await _answer(send, 408, {"detail": detail}, close=True)


async def _answer(send, status: int, content: dict[str, Any], close: bool = False) -> None:
    body = json.dumps(content).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
