"""Request and response bodies of serving/routers/resources.py."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class Resource(BaseModel):
    """One program, normalised (phone +1XXXXXXXXXX, lower-case email domain and URL host, county without 'County')."""

    local_resource_id: str
    name: str
    description: str | None = None
    resource_type: str
    county: str
    zip: str
    zip_coverage: list[str] = Field(default_factory=list, description="further ZIP codes the program serves")
    address: str | None = None
    contact_phone: str | None = None
    contact_email: str | None = None
    url: str | None = None
    eligibility: str | None = None
    hours: str | None = None
    verification_status: Literal["verified", "stale", "unverified"] = Field(
        description="verified: verified within the registry's freshness window; stale: longer ago; unverified: never"
    )
    last_verified_at: str | None = None
    age_days: int | None = Field(None, description="days since last_verified_at")
    verified_by: str | None = None
    deprecated_at: str | None = Field(None, description="a future end date (ended programs are never returned)")
    match: Literal["id", "zip", "county", "filter"] = Field(
        description="why the row is listed: zip (its ZIP or coverage includes the ZIP), county (the county's "
        "programs), id (asked for by id), filter (no place hint given)"
    )


class ResourcesResponse(BaseModel):
    index_version: str
    county: str | None = Field(None, description="the county searched: the one given, or the ZIP's")
    total: int = Field(description="rows matching, before `limit`")
    results: list[Resource]
