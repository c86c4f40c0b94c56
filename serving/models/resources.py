"""Request and response bodies of serving/routers/resources.py."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Resource(BaseModel):
    """One program, normalised (phone +1XXXXXXXXXX, lower-case email domain and URL host, county without 'County')."""

    local_resource_id: str = Field(description="the program's registry id (stable; `?id=` asks for it)")
    name: str = Field(description="the program's name")
    description: str | None = Field(None, description="what it offers")
    resource_type: str = Field(description="its type: snap, medicaid, food_pantry, liheap, ...")
    county: str = Field(description="its county, without `County`")
    zip: str = Field(description="its own 5-digit ZIP code")
    zip_coverage: list[str] = Field(default_factory=list, description="further ZIP codes the program serves")
    address: str | None = Field(None, description="its street address")
    contact_phone: str | None = Field(None, description="its phone, +1XXXXXXXXXX")
    contact_email: str | None = Field(None, description="its email address (domain in lower case)")
    url: str | None = Field(None, description="its web page (host in lower case)")
    eligibility: str | None = Field(None, description="who may use it, as the registry words it")
    hours: str | None = Field(None, description="opening hours, as the registry words them")
    verification_status: Literal["verified", "stale", "unverified"] = Field(
        description="verified: verified within the registry's freshness window; stale: longer ago; unverified: never"
    )
    last_verified_at: str | None = Field(None, description="when it was last verified (ISO 8601, UTC)")
    age_days: int | None = Field(None, description="days since last_verified_at")
    verified_by: str | None = Field(None, description="who verified it last")
    deprecated_at: str | None = Field(None, description="a future end date (ended programs are never returned)")
    match: Literal["id", "zip", "county", "filter"] = Field(
        description="why the row is listed: zip (its ZIP or coverage includes the ZIP), county (the county's "
        "programs), id (asked for by id), filter (no place hint given)"
    )


class ResourcesResponse(BaseModel):
    """Registry programs matching the request, best match first."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "index_version": "20261122T003412518204Z",
                    "county": "Fayette",
                    "total": 1,
                    "results": [
                        {
                            "local_resource_id": "fay-dhhr-snap",
                            "name": "Fayette County DHHR Office – SNAP",
                            "description": "Applications, interviews and renewals for SNAP food benefits; help with "
                            "the PATH online portal.",
                            "resource_type": "snap",
                            "county": "Fayette",
                            "zip": "25901",
                            "zip_coverage": ["25840", "25136", "25880", "25812"],
                            "address": "100 Main Street, Oak Hill, WV 25901",
                            "contact_phone": "+13045550101",
                            "contact_email": "fayette.snap@example.org",
                            "url": "https://example.org/fayette/snap",
                            "eligibility": "Household gross income at or below 130% of the federal poverty level.",
                            "hours": "Mon-Fri 8:30-4:30",
                            "verification_status": "verified",
                            "last_verified_at": "2026-10-14T00:00:00Z",
                            "age_days": 43,
                            "verified_by": "R. Hall (DHHR liaison)",
                            "deprecated_at": None,
                            "match": "zip",
                        }
                    ],
                }
            ]
        }
    )

    index_version: str = Field(description="the published index version read")
    county: str | None = Field(None, description="the county searched: the one given, or the ZIP's")
    total: int = Field(description="rows matching, before `limit`")
    results: list[Resource] = Field(description="the programs, at most `limit`")
