"""Dependencies shared by the routers: the process state, the caller's role, the index snapshot."""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import replace
from pathlib import PurePosixPath
from typing import Annotated, Any, TypeVar

from fastapi import Depends, HTTPException, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.security import APIKeyHeader, HTTPBearer
from werkzeug.datastructures import MIMEAccept
from werkzeug.http import parse_accept_header

from livemem.answer.chat import PersonaError, persona_collections, resolve_persona
from livemem.answer.conversation import caller_scope
from livemem.answer.routing import ContextRequest as Message
from livemem.engine.snapshot import Snapshot
from serving.services.errors import UNAUTHORIZED_HEADERS, ServiceError
from serving.state import Role, ServingState

Sent = TypeVar("Sent", bound=str)  # what ``negotiate`` answers with: the type of its offers' values


# The dependencies that only read memory are coroutines: FastAPI runs a plain function in its thread pool, a
# hop (two context switches) per dependency per request.
async def get_state(request: Request) -> ServingState:
    return request.app.state.serving


State = Annotated[ServingState, Depends(get_state)]


# FastAPI's schemes with ``auto_error=False`` read an empty header, or an ``Authorization`` of another scheme, as no
# credentials at all; these two hand ``caller_role`` the header as sent, which refuses those (401), so a caller who
# meant to send a key never silently becomes the public role (nor, on /memory, a user every such caller shares).
class SentApiKey(APIKeyHeader):
    async def __call__(self, request: Request) -> str | None:  # type: ignore[override]
        return request.headers.get(self.model.name)


class SentBearer(HTTPBearer):
    async def __call__(self, request: Request) -> str | None:  # type: ignore[override]
        return request.headers.get("Authorization")


# The two ways to send a key, as OpenAPI security schemes (components.securitySchemes): Swagger's Authorize and
# generated clients send them. Either one; none is the public role (serving.openapi marks the key optional).
API_KEY = SentApiKey(
    name="X-API-Key",
    scheme_name="ApiKey",
    description="An API key from RAG_API_KEYS; it names the caller's role (and so the access levels it may read). "
    "Without a key, or with the key `public`, the caller is the public role; an unknown key is 401.",
    auto_error=False,
)
BEARER = SentBearer(
    scheme_name="Bearer",
    description="The same API keys as X-API-Key, as OpenAI clients send them (`Authorization: Bearer <key>`); "
    "X-API-Key wins when both are sent.",
    auto_error=False,
)


async def caller_role(
    state: State,
    x_api_key: Annotated[str | None, Security(API_KEY)] = None,
    authorization: Annotated[str | None, Security(BEARER)] = None,
) -> Role:
    """The role of the request's key: ``X-API-Key``, else ``Authorization: Bearer`` (what OpenAI clients send).
    No key is the public role; so is the key that is the public role's name (OpenAI clients must send some key)."""
    key = x_api_key
    if key is None and authorization is not None:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise HTTPException(401, "the Authorization header must be 'Bearer <API key>'", UNAUTHORIZED_HEADERS)
        key = token.strip()
    if key is None:
        return state.role(state.settings.public_role)
    for known, role in state.settings.api_keys.items():
        if secrets.compare_digest(known.encode(), key.encode()):
            return state.role(role)
    if secrets.compare_digest(key.encode(), state.settings.public_role.encode()):
        return state.role(state.settings.public_role)
    raise HTTPException(
        401, "unknown API key (X-API-Key or Authorization: Bearer); omit it, or send 'public', to query as the "
        "public role", {"WWW-Authenticate": f'{UNAUTHORIZED_HEADERS["WWW-Authenticate"]}, error="invalid_token"'},
    )  # fmt: skip


def thread_scope(request: Request) -> str:
    """Whose conversation threads and personal memory this request may read: its API key's (``caller_role`` has
    already accepted the key; only its hash is kept)."""
    key = request.headers.get("x-api-key")
    if key is None:
        scheme, _, token = (request.headers.get("authorization") or "").strip().partition(" ")
        key = token.strip() if scheme.lower() == "bearer" else None
    return caller_scope(key)


ThreadScope = Annotated[str, Depends(thread_scope)]


def current_snapshot(state: State) -> Snapshot:
    """The version to answer this request from (IndexUnavailable becomes a 503 in the app)."""
    return state.reader.snapshot()


CallerRole = Annotated[Role, Depends(caller_role)]
CurrentSnapshot = Annotated[Snapshot, Depends(current_snapshot)]


def with_persona(message: Message, persona: str | None, role: Role, state: ServingState, snap: Snapshot):
    """``message`` for the persona a request names (its ``role`` field), and the role it is answered as: the
    caller's role name with the persona's access. Unknown persona: 422; one needing more access than the key
    gives: 403 (a persona narrows, never widens)."""
    try:
        chosen = resolve_persona(persona, role.name, role.access, state.settings.roles, state.personas)
    except PersonaError as exc:
        raise ServiceError(exc.status, str(exc)) from None  # an HTTP status, or a tool error over MCP
    narrowed = Role(role.name, chosen.access)
    collections = persona_collections(chosen, snap.collections_for(chosen.access))
    named = None if persona is None else chosen.name
    return replace(message, persona=named, collections=collections, framing=chosen.framing), narrowed


def visible_manifest(snap: Snapshot, role: Role) -> dict:
    """The manifest without the collections (and their sources) the role may not read, and without server paths
    (a source's ``repo`` shows only its last part): no caller learns where the server keeps things."""
    return without_server_paths(_visible_sections(snap, role))


def without_server_paths(value: Any) -> Any:
    """``value`` with every absolute path and ``file://`` URL, anywhere inside its strings, replaced by its last part
    (``"csv file /srv/x/local_resources.csv"`` -> ``"csv file local_resources.csv"``); dicts and lists walked."""
    if isinstance(value, dict):
        return {k: without_server_paths(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_server_paths(v) for v in value]
    if isinstance(value, str) and "/" in value:
        return _SERVER_PATH.sub(_last_part, value)
    return value


# A file:// URL, or an absolute POSIX path: a "/" that starts a word (not inside "a/b", "../b", "http://h/b" or a
# later "//"), then its parts up to a space, quote, colon, comma or bracket. Relative paths and URLs of other schemes
# stay as they are.
_SERVER_PATH = re.compile(
    r"file://[^\s'\"<>()\[\]{},;]*"
    r"|(?<![\w.~/-])/(?:[^\s'\"/:<>()\[\]{},;]+/)*[^\s'\"/:<>()\[\]{},;]+/?"
)


def _last_part(match: re.Match[str]) -> str:
    path = match.group(0).removeprefix("file://").rstrip("/")
    return PurePosixPath(path).name or "/"


def _visible_sections(snap: Snapshot, role: Role) -> dict:
    manifest = dict(snap.manifest)
    gbim = manifest.get("gbim")
    if isinstance(gbim, dict):
        hidden_spatial = {n for n, s in gbim.get("sources", {}).items() if s.get("access", "public") not in role.access}
        if hidden_spatial:  # counts per dataset and county would include them: only the visible sources' own stay
            manifest["gbim"] = {
                **{
                    k: v
                    for k, v in gbim.items()
                    if k not in ("per_dataset", "per_dataset_county", "entities", "relations")
                },
                "sources": {n: v for n, v in gbim["sources"].items() if n not in hidden_spatial},
                "quarantined": [q for q in gbim.get("quarantined", []) if q.get("source") not in hidden_spatial],
                "quarantined_count": None,
            }
    hidden = {c for c, access in snap.access_of.items() if access not in role.access}
    if not hidden:
        return manifest
    hidden_sources = {name for name, s in manifest.get("sources", {}).items() if s.get("collection") in hidden}
    manifest["collections"] = {c: v for c, v in manifest.get("collections", {}).items() if c not in hidden}
    manifest["sources"] = {n: v for n, v in manifest.get("sources", {}).items() if n not in hidden_sources}
    visible_total = sum(v.get("chunks", 0) for v in manifest["collections"].values())
    manifest["total_chunks"] = visible_total
    # Sizes of the version's files (per-level indexes, tables) would count hidden chunks too.
    for key in (
        "total_parents", "sealed_chunks", "index_size_mb", "version_size_mb", "attention_stats", "governance", "files",
        "segments",
    ):  # fmt: skip
        manifest.pop(key, None)
    changes = dict(manifest.get("changes", {}))
    for part in ("per_source", "unreadable_sources"):
        if isinstance(changes.get(part), dict):
            changes[part] = {n: v for n, v in changes[part].items() if n not in hidden_sources}
    changes.pop("embeddings_computed", None)
    changes.pop("embeddings_reused", None)
    manifest["changes"] = changes
    breath = manifest.get("breath_at_update")
    if isinstance(breath, dict) and breath.get("source") in hidden_sources:
        manifest["breath_at_update"] = {**breath, "source": None, "path": None}
    return manifest


_QUERY_NAMES: dict[int, frozenset[str]] = {}  # route -> the query parameters it declares (its dependencies' too)


def _query_names(dependant: Any) -> frozenset[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return frozenset(names)


async def refuse_unknown_query(request: Request) -> None:
    """A route's dependency: a query parameter it does not declare is a 422 naming it (``?zipcode=`` for ``?zip=``
    would otherwise answer as if no filter were given), in the app's 422 body like a JSON body's unknown field."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    known = _QUERY_NAMES.get(id(route))
    if known is None:
        known = _QUERY_NAMES[id(route)] = _query_names(dependant)
    unknown = [name for name in dict.fromkeys(request.query_params.keys()) if name not in known]
    if unknown:
        allowed = ", ".join(sorted(known))
        raise RequestValidationError(
            [
                {"type": "extra_forbidden", "loc": ("query", name), "input": request.query_params.get(name),
                 "msg": f"is not a parameter of {request.url.path} (its parameters: {allowed})"}
                for name in unknown
            ]
        )  # fmt: skip


KnownQuery = Depends(refuse_unknown_query)


def negotiate(accept: str | None, offers: Mapping[str, Sent]) -> Sent | None:
    """The media type to answer in, of ``offers`` (a media type a client may ask for -> the one sent, best first:
    on a tie, such as ``*/*``, the first wins), or None when ``accept`` allows none (the route's 406)."""
    chosen = parse_accept_header(accept or "*/*", MIMEAccept).best_match(list(offers))
    return None if chosen is None else offers[chosen]
