"""``/openapi.json`` as the app really behaves: the two ways to send an API key as security schemes (optional where
a request without a key is the public role, required on personal memory), routes that read no key marked open, and
the app's own 422 body instead of FastAPI's.

FastAPI writes the security schemes from ``serving.deps.caller_role``'s dependencies; this adds what it cannot know.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from serving.models import ErrorBody, InvalidRequest

# Routes (by tag) that answer 401 without a key: personal memory is kept per key (serving/routers/memory.py).
KEY_REQUIRED_TAGS = frozenset({"memory"})
KEY_SCHEMES = frozenset({"ApiKey", "Bearer"})
UNAUTHORIZED = {
    "description": "an unknown API key, or an Authorization header that is not `Bearer <API key>`",
    "headers": {
        "WWW-Authenticate": {
            "description": 'how to authenticate: Bearer realm="living-memory"',
            "schema": {"type": "string"},
        }
    },
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
}
METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` (and so ``/openapi.json``, ``/docs``) return the completed document."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = complete(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def complete(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with every operation's ``security`` saying what a request without a key gets, and the 422 body."""
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("ErrorBody", ErrorBody.model_json_schema())  # the body of the 401 each keyed route may answer
    for item in spec.get("paths", {}).values():
        for method, operation in item.items():
            if method in METHODS:
                _security(operation)
    if "HTTPValidationError" in schemas:  # the body serving.app's handler sends, not FastAPI's default
        body = InvalidRequest.model_json_schema(ref_template="#/components/schemas/{model}")
        problem = body.pop("$defs")["ValidationProblem"]
        body["properties"]["detail"]["items"] = {"$ref": "#/components/schemas/ValidationError"}
        schemas["HTTPValidationError"] = {**body, "title": "HTTPValidationError"}
        schemas["ValidationError"] = {**problem, "title": "ValidationError"}
    return spec


def _security(operation: dict[str, Any]) -> None:
    requirements = operation.get("security")
    if not requirements or not any(KEY_SCHEMES & set(r) for r in requirements):
        operation["security"] = []  # reads no key: open to every caller
        return
    if not KEY_REQUIRED_TAGS & set(operation.get("tags", ())):
        requirements.append({})  # no key at all is allowed: the public role
    responses = operation.setdefault("responses", {})
    responses.setdefault("401", UNAUTHORIZED)
