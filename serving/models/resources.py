"""Request and response bodies of serving/routers/resources.py."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Phone(BaseModel):
    """One of a program's phone numbers."""

    number: str = Field(description="+1XXXXXXXXXX, or an N11 line's three digits (211, 311) or 988")
    extension: str | None = Field(None, description="its extension (digits)")
    type: str | None = Field(None, description="voice, fax, textphone, text, ... as the source says")
    note: str | None = Field(None, description="'24 hours', 'toll-free', 'option 2', ... as the source says")


class TaxonomyTerm(BaseModel):
    """A taxonomy term the source gives the program (AIRS/211, Open Eligibility, ...)."""

    code: str | None = Field(None, description="the term's code, e.g. BD-1800.2000")
    name: str = Field(description="the term's name, e.g. Food Pantries")
    taxonomy: str | None = Field(None, description="the taxonomy, e.g. AIRS")


class Schedule(BaseModel):
    """Opening hours on some days."""

    days: list[str] = Field(default_factory=list, description="MO, TU, WE, TH, FR, SA, SU")
    opens_at: str | None = Field(None, description="HH:MM")
    closes_at: str | None = Field(None, description="HH:MM")
    description: str | None = Field(None, description="as the source words it")


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
    organization: str | None = Field(None, description="the provider (answers say 'organization — name')")
    resource_types: list[str] = Field(
        default_factory=list, description="every type the program serves (resource_type, the primary, first)"
    )
    taxonomy_terms: list[TaxonomyTerm] = Field(default_factory=list, description="the source's taxonomy terms")
    phones: list[Phone] = Field(default_factory=list, description="every number (contact_phone is the primary)")
    languages: list[str] = Field(default_factory=list, description="languages served")
    accessibility: str | None = Field(None, description="accessibility, as the source words it")
    fees: str | None = Field(None, description="fees, as the source words them")
    service_area: str | None = Field(None, description="the area served, as the source words it")
    state: str | None = Field(None, description="two-letter state of the program")
    listed_at: str | None = Field(None, description="when the source last listed or updated the row (ISO 8601, UTC)")
    source_id: str | None = Field(None, description="the row's id in its source (an HSDS service id)")
    schedules: list[Schedule] = Field(default_factory=list, description="structured opening hours")
    flagged_fields: list[str] = Field(
        default_factory=list,
        description="fields that failed verification and are left out (null here; registry_issues says why)",
    )
    verification_note: str | None = Field(
        None,
        description="set when the status does not rest on a verification: 'listed 2019-08-19, not verified since' "
        "(the registry's undated policy) or 'not verified (...)'",
    )
    match: Literal["id", "zip", "county", "state", "filter"] = Field(
        description="why the row is listed: zip (its ZIP or coverage includes the ZIP), county (the county's "
        "programs), state (a statewide line of the place's state), id (asked for by id), filter (no place hint)"
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
                    "next_cursor": None,
                }
            ]
        }
    )

    index_version: str = Field(description="the published index version read")
    county: str | None = Field(None, description="the county searched: the one given, or the ZIP's")
    total: int = Field(description="rows matching, before `limit` (on every page: all of them, not this page's)")
    results: list[Resource] = Field(description="the programs, at most `limit`")
    next_cursor: str | None = Field(
        None,
        description="more rows match: send this back as `cursor` (same filters) for the next page; null on the last "
        'page (docs/serving.md, "Paging")',
    )
