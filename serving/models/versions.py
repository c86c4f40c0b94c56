"""The bodies of ``GET /versions`` and ``GET /versions/{a}/diff/{b}`` (docs/versions.md)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class SourceAt(BaseModel):
    commit: str | None = Field(description="the source's head commit this version was built from")
    collection: str | None = Field(None, description="the collection its chunks are filed under")
    access: str = Field("public", description="who may read it: `public` or `internal`")
    files: int | None = Field(None, description="files indexed from it in this version")
    chunks: int | None = Field(None, description="chunks indexed from it in this version")


class VersionCounts(BaseModel):
    chunks: int = Field(description="chunks of the sources the caller may read")
    files: int = Field(description="files of the sources the caller may read")
    sealed_chunks: int = Field(description="chunks of sealed (authoritative) files among them")
    gbim_entities: int | None = Field(None, description="spatial entities of the GBIM export (null: none exported)")
    gbim_relations: int | None = Field(None, description="relations (facts) of the GBIM export (null: none exported)")
    registry_rows: int | None = Field(None, description="published rows of the local_resources registry")


class VersionInfo(BaseModel):
    version_id: str = Field(description="the version's id (a UTC timestamp), usable as `version` on /query")
    current: bool = Field(description="whether CURRENT names it now")
    published_at: str = Field(description="when it was first published (UTC)")
    created_at: str | None = Field(None, description="when its build started (UTC)")
    base_version: str | None = Field(None, description="the version it was built incrementally on (null: from scratch)")
    sources: dict[str, SourceAt] = Field(description="only the sources the caller may read")
    counts: VersionCounts = Field(description="what it holds, counted over the sources the caller may read")
    version_size_mb: float | None = Field(None, description="its own directory; absent when a source is hidden")
    index_size_mb: float | None = Field(None, description="with its segments; absent when a source is hidden")


class DiskUse(BaseModel):
    versions: int = Field(description="kept version directories")
    versions_mb: float = Field(description="their size on disk, each file counted once (versions share hard links)")
    per_version_mb: dict[str, float] = Field(
        description="per version id, oldest first: its directory's files not already counted for an older version"
    )
    segments: int = Field(description="content-addressed segments under parts/ (shared between versions)")
    segments_mb: float = Field(description="their size on disk")
    serving_copies_mb: float = Field(description="the serving processes' memory-mappable copies (cache/serving)")
    current_mb: float = Field(description="what the current version alone needs (its directory and segments)")
    history_mb: float = Field(description="what keeping the other versions adds")
    history_pct: float | None = Field(None, description="history_mb as a share of current_mb, in %")


class VersionsResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "current": "20261122T003412518204Z",
                    "versions": [
                        {
                            "version_id": "20261122T003412518204Z",
                            "current": True,
                            "published_at": "2026-11-22T00:35:02.114870Z",
                            "created_at": "2026-11-22T00:34:12.518204Z",
                            "base_version": None,
                            "sources": {
                                "wv-benefits": {
                                    "commit": "31532096d92e8618a4b85fd500c1469d1add2fbb",
                                    "collection": "wv_benefits",
                                    "access": "public",
                                    "files": 9,
                                    "chunks": 61,
                                }
                            },
                            "counts": {
                                "chunks": 152,
                                "files": 31,
                                "sealed_chunks": 4,
                                "gbim_entities": 14,
                                "gbim_relations": 40,
                                "registry_rows": 19,
                            },
                            "version_size_mb": 3.2,
                            "index_size_mb": 4.1,
                        }
                    ],
                    "disk": None,
                }
            ]
        }
    )

    current: str | None = Field(description="the version CURRENT names (null: nothing published)")
    versions: list[VersionInfo] = Field(description="kept versions, oldest first")
    disk: DiskUse | None = Field(None, description="disk use; only for a role that may read every source")


class DiffSide(BaseModel):
    version_id: str = Field(description="the version this side resolved to")
    published_at: str = Field(description="when it was first published (UTC)")
    current: bool = Field(description="whether CURRENT names it now")
    asked: str = Field(description="how the request named it (id, 'current', a date-time or a commit)")


class DiffResponse(BaseModel):
    """What changed from one version to another, as the caller's role may see it."""

    from_: DiffSide = Field(alias="from", description="the older side")
    to: DiffSide = Field(description="the newer side")
    summary: str = Field(description="one line a person reads: files, chunks, registry rows, entities changed")
    sources: dict[str, dict[str, Any]] = Field(
        description="per source the caller may read: commit from/to, files and chunks added/removed/changed"
    )
    files: list[dict[str, Any]] = Field(description="changed files (at most listed_at_most)")
    files_total: int = Field(description="changed files in all (listed or not)")
    chunks: dict[str, Any] = Field(description="added / removed ids, changed pairs (from, to), and totals")
    registry: dict[str, Any] | None = Field(
        None, description="registry rows added / removed / changed (null: no registry in either version)"
    )
    gbim: dict[str, Any] | None = Field(
        None, description="GBIM entities and relations added / removed / changed (null: no export in either)"
    )
    attention: dict[str, Any] = Field(description="moved: how many chunks; top_movers: the largest changes")
    listed_at_most: int = Field(description="the most files, chunk ids and movers listed per kind")

    model_config = {"populate_by_name": True}
