"""The bodies of ``GET /versions`` and ``GET /versions/{a}/diff/{b}`` (docs/versions.md)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class SourceAt(BaseModel):
    commit: str | None = Field(description="the source's head commit this version was built from")
    collection: str | None = None
    access: str = "public"
    files: int | None = None
    chunks: int | None = None


class VersionCounts(BaseModel):
    chunks: int = Field(description="chunks of the sources the caller may read")
    files: int
    sealed_chunks: int
    gbim_entities: int | None = None
    gbim_relations: int | None = None
    registry_rows: int | None = Field(None, description="published rows of the local_resources registry")


class VersionInfo(BaseModel):
    version_id: str
    current: bool = Field(description="whether CURRENT names it now")
    published_at: str = Field(description="when it was first published (UTC)")
    created_at: str | None = None
    base_version: str | None = None
    sources: dict[str, SourceAt] = Field(description="only the sources the caller may read")
    counts: VersionCounts
    version_size_mb: float | None = Field(None, description="its own directory; absent when a source is hidden")
    index_size_mb: float | None = Field(None, description="with its segments; absent when a source is hidden")


class DiskUse(BaseModel):
    versions: int
    versions_mb: float
    per_version_mb: dict[str, float]
    segments: int
    segments_mb: float
    serving_copies_mb: float
    current_mb: float = Field(description="what the current version alone needs (its directory and segments)")
    history_mb: float = Field(description="what keeping the other versions adds")
    history_pct: float | None = Field(None, description="history_mb as a share of current_mb, in %")


class VersionsResponse(BaseModel):
    current: str | None
    versions: list[VersionInfo] = Field(description="kept versions, oldest first")
    disk: DiskUse | None = Field(None, description="disk use; only for a role that may read every source")


class DiffSide(BaseModel):
    version_id: str
    published_at: str
    current: bool
    asked: str = Field(description="how the request named it (id, 'current', a date-time or a commit)")


class DiffResponse(BaseModel):
    """What changed from one version to another, as the caller's role may see it."""

    from_: DiffSide = Field(alias="from")
    to: DiffSide
    summary: str
    sources: dict[str, dict[str, Any]] = Field(
        description="per source the caller may read: commit from/to, files and chunks added/removed/changed"
    )
    files: list[dict[str, Any]] = Field(description="changed files (at most listed_at_most)")
    files_total: int
    chunks: dict[str, Any] = Field(description="added / removed ids, changed pairs (from, to), and totals")
    registry: dict[str, Any] | None = None
    gbim: dict[str, Any] | None = None
    attention: dict[str, Any] = Field(description="moved: how many chunks; top_movers: the largest changes")
    listed_at_most: int

    model_config = {"populate_by_name": True}
