"""Cursor paging of ``GET /resources`` and ``GET /facts`` (and the MCP ``resources`` tool): ``next_cursor``.

A list route answers at most ``limit`` rows and, when more match, an opaque ``next_cursor``; the client sends it back
as ``cursor`` with the same filters to get the next rows. Pages in turn yield every matching row exactly once, in
the order one page as large as all of them would have (each route's order is fixed for an index version: registry
tiers, then the registry's order; facts by subject entity, then relation). ``limit`` may change between pages.

A cursor is base64url JSON: the route it belongs to, the index version it was issued from, the position (rows
already returned) and a fingerprint of the filters. It is not a secret and not signed: one altered by hand is
either refused or names another position of the same list, which the caller may read anyway.

- A cursor that is not one of ours, belongs to the other route, or was issued for other filters: **422** (the app's
  validation body, ``loc`` ``["query", "cursor"]``), saying why.
- A cursor issued for an index version other than the one now served (a new version was published between two
  pages): **409 Conflict**, naming both versions. Positions of one version mean nothing in another, so the pages are
  never mixed silently; the client restarts paging without ``cursor`` (docs/serving.md, "Paging").
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Query
from fastapi.exceptions import RequestValidationError

from serving.services.errors import ServiceError

CURSOR_MAX_CHARS = 512
FORMAT = 1

# The ``cursor`` query parameter of a paged HTTP route (``GET /facts``, ``GET /resources``); the route adds what its
# pages hold and an example (``cursor_query``): ``cursor: Annotated[Cursor, cursor_query(...)] = None``.
Cursor = Annotated[str | None, Query(min_length=1, max_length=CURSOR_MAX_CHARS)]


def cursor_query(example: str, rows: str, also: str = "") -> Any:
    """The description and example of a route's ``Cursor``: its pages list ``rows``; ``also``: where else the
    previous page gave the next cursor."""
    return Query(
        examples=[example],
        description=f"the `next_cursor` of the previous page{also}, with the same filters: the {rows} after it "
        "(422 for a cursor of other filters; 409 for one of another index version)",
    )


class CursorError(ServiceError):
    """A cursor this request cannot continue from: 422 (not ours, another route or other filters) or 409 (issued
    for another index version)."""


def fingerprint(filters: dict[str, Any]) -> str:
    """A short digest of a list request's filters (``limit`` and ``cursor`` left out): a cursor is valid only
    for the filters it was issued for."""
    canonical = json.dumps(filters, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def encode(route: str, version_id: str, offset: int, filters: dict[str, Any]) -> str:
    body = {"f": FORMAT, "r": route, "v": version_id, "o": offset, "q": fingerprint(filters)}
    raw = json.dumps(body, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class Page:
    """Where a page starts (``offset``: rows before it) and how the next cursor is made."""

    route: str
    version_id: str
    filters: dict[str, Any]
    offset: int = 0

    def next_cursor(self, returned: int, total: int) -> str | None:
        """The cursor of the rows after this page's ``returned`` ones; None when they were the last."""
        end = self.offset + returned
        if returned == 0 or end >= total:
            return None
        return encode(self.route, self.version_id, end, self.filters)


def _invalid(why: str) -> CursorError:
    return CursorError(422, f"cursor: {why}; send back the next_cursor of the previous page unchanged, with the same "
                       "filters, or omit cursor to start from the first page")  # fmt: skip


def page(route: str, version_id: str, filters: dict[str, Any], cursor: str | None) -> Page:
    """The page a request asks for: the first without ``cursor``, else the one the cursor points at (CursorError
    when it cannot be continued from)."""
    if cursor is None:
        return Page(route, version_id, filters)
    if len(cursor) > CURSOR_MAX_CHARS:
        raise _invalid(f"longer than {CURSOR_MAX_CHARS} characters: not a cursor this API issued")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise _invalid("not a cursor this API issued (not base64url JSON)") from None
    if not (isinstance(body, dict) and body.get("f") == FORMAT and isinstance(body.get("r"), str)
            and isinstance(body.get("v"), str) and type(body.get("o")) is int and body["o"] >= 0
            and isinstance(body.get("q"), str)):  # fmt: skip
        raise _invalid("not a cursor this API issued")
    if body["r"] != route:
        raise _invalid(f"issued by {body['r']}, not {route}")
    if body["q"] != fingerprint(filters):
        raise _invalid("issued for other filters than this request's")
    if body["v"] != version_id:
        raise CursorError(
            409,
            f"cursor issued for index version {body['v']}, but version {version_id} is served now: the pages of two "
            "versions cannot be mixed; start again without cursor",
        )
    return Page(route, version_id, filters, body["o"])


def http_page(route: str, version_id: str, filters: dict[str, Any], cursor: str | None) -> Page:
    """``page`` for an HTTP route: an invalid cursor is the app's 422 validation body (``loc``: query, cursor); a
    cursor of another version a 409 (``ErrorBody``)."""
    try:
        return page(route, version_id, filters, cursor)
    except CursorError as exc:
        if exc.status_code != 422:
            raise
        short = cursor if cursor is None or len(cursor) <= 80 else f"{cursor[:80]}…"
        raise RequestValidationError(
            [{"type": "value_error", "loc": ("query", "cursor"), "msg": exc.message, "input": short}]
        ) from None


def link_next(url: Any, cursor: str | None) -> dict[str, str]:
    """The ``Link: <...>; rel="next"`` header (RFC 8288) of a page with a next one; ``url`` is the request's."""
    if cursor is None:
        return {}
    return {"Link": f'<{url.include_query_params(cursor=cursor)}>; rel="next"'}


def resources_filters(
    zip: str | None,
    county: str | None,
    resource_type: str | None,
    local_resource_id: str | None,
    taxonomy: str | None,
    include_stale: bool,
) -> dict[str, Any]:
    """A registry request's filters, as ``livemem.registry.resolve`` takes them and a cursor's fingerprint covers
    them: ``GET /resources`` and the MCP ``resources`` tool make the same, so each continues the other's cursors."""
    return {"zip": zip, "county": county, "resource_type": resource_type, "local_resource_id": local_resource_id,
            "taxonomy": taxonomy, "include_stale": include_stale}  # fmt: skip
