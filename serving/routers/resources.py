"""GET /resources: programs of the local_resources registry for a ZIP, county, type or id.

Answers from the registry of the same index version as the rest of the request (the request's snapshot); each
version's registry is loaded into memory once (``livemem.registry.load_registry_index``). Registry data is public:
every role may read it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, Response

from livemem.registry import RESOURCE_TYPES, RegistryQueryError, load_registry_index, resolve
from serving.deps import CurrentSnapshot, KnownQuery
from serving.models import ErrorBody
from serving.models.examples import VERSION
from serving.models.resources import Resource, ResourcesResponse
from serving.services.paging import Cursor, cursor_query, encode, http_page, link_next, resources_filters

router = APIRouter(tags=["registry"])

if TYPE_CHECKING:  # the members are the registry schema's vocabulary, read at import: the checker cannot list them

    class ResourceType(StrEnum):
        pass

else:
    ResourceType = StrEnum("ResourceType", {t: t for t in RESOURCE_TYPES})


# The query parameters, as the OpenAPI document describes them.
Zip = Annotated[
    str | None,
    Query(
        pattern=r"^[0-9]{5}$",
        description="5-digit ZIP: programs covering it, then its county's",
        examples=["25901"],
    ),
]
County = Annotated[
    str | None, Query(min_length=2, max_length=64, description="county, e.g. Fayette", examples=["Fayette"])
]
TypeQuery = Annotated[ResourceType | None, Query(description="program type", examples=["snap"])]
ResourceId = Annotated[
    str | None, Query(min_length=1, max_length=128, description="one program", examples=["fay-dhhr-snap"])
]
Taxonomy = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=200,
        description="a taxonomy term of the source (AIRS/211, Open Eligibility): its code or a code prefix "
        "(`BD-1800` finds `BD-1800.2000`), or words of its name (`food pantries`, case-insensitive)",
        examples=["food pantries"],
    ),
]
IncludeStale = Annotated[bool, Query(description="also return stale and unverified rows", examples=[False])]
Limit = Annotated[int, Query(ge=1, le=500, description="at most this many rows", examples=[20])]
ResourcesCursor = Annotated[
    Cursor,
    cursor_query(
        encode("/resources", VERSION, 20, resources_filters(None, "Fayette", None, None, None, False)), "rows"
    ),
]


@router.get(
    "/resources",
    response_model=ResourcesResponse,
    responses={
        409: {"model": ErrorBody, "description": "`cursor` was issued for another index version: start again"},
        422: {"model": ErrorBody},
        503: {"model": ErrorBody},
    },
    dependencies=[KnownQuery],  # an unknown query parameter is a 422 naming it, never ignored
)
def resources(
    request: Request,
    response: Response,
    snap: CurrentSnapshot,
    zip: Zip = None,
    county: County = None,
    resource_type: TypeQuery = None,
    local_resource_id: ResourceId = None,
    taxonomy: Taxonomy = None,
    include_stale: IncludeStale = False,
    limit: Limit = 50,
    cursor: ResourcesCursor = None,
) -> ResourcesResponse:
    """Programs for a place, most specific first: those whose ZIP or coverage includes `zip`, then the rest of
    its county (or of `county`), then its state's statewide lines; `resource_type` matches any of a program's
    types, `taxonomy` its source's taxonomy terms. Verified rows only unless `include_stale` (undated rows are
    also shown, marked in `verification_note`, when the registry's `undated` policy is `unverified_shown`).

    At most `limit` rows; when more match, `next_cursor` (and a `Link: rel="next"` header) continues after them:
    pages in turn give every row once, in this order."""
    filters = resources_filters(zip, county, resource_type.value if resource_type else None, local_resource_id,
                                taxonomy, include_stale)  # fmt: skip
    return registry_page(request, response, snap, filters, limit, cursor)


def registry_page(
    request: Request, response: Response, snap: Any, filters: dict[str, Any], limit: int, cursor: str | None
) -> ResourcesResponse:
    """One page of the registry rows ``filters`` select in ``snap``'s version (its ``Link`` header set on
    ``response``): 503 without a registry, 422 for a query the registry refuses."""
    index = load_registry_index(snap.path)
    if index is None:
        raise HTTPException(
            503, f"index version {snap.version_id} holds no registry; materialize the verify_registry job"
        )
    page = http_page("/resources", snap.version_id, filters, cursor)
    try:
        found = resolve(index, **filters, limit=limit, offset=page.offset)
    except RegistryQueryError as exc:
        raise HTTPException(422, str(exc)) from exc
    next_cursor = page.next_cursor(len(found.rows), found.total)
    response.headers.update(link_next(request.url, next_cursor))
    return ResourcesResponse(
        index_version=snap.version_id,
        county=found.county,
        total=found.total,
        results=[Resource.model_validate(row) for row in found.rows],
        next_cursor=next_cursor,
    )
