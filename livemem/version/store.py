"""The index home: immutable versions, staging, the atomic switch of ``CURRENT``, retention.

Layout (see ``rag_index/README.md``)::

    <home>/CURRENT                     id of the published version (written to a temp file, then renamed)
    <home>/versions/<id>/              published versions, never modified
        manifest.json                  what is in the version (schemas/manifest.schema.json), its segments
        tables.duckdb                  small: membership (which rows of which segments), views ``chunks`` and
                                       ``parents`` over them, attention, lineage, skipped_files, other steps' tables
        chroma/                        only with ``index.vector_store: chroma``: persistent Chroma
    <home>/parts/seg-<hash>/           immutable segments shared by versions (``livemem.version``): chunk and
                                       parent rows, vectors, BM25 postings; removed when no kept version names them
    <home>/staging/<id>/               a version being built or checked; moved to versions/ when published
    <home>/staging/<id>.owner.json     who staged it (Dagster run, host, pid): never reclaimed while alive
    <home>/cache/embeddings.sqlite     embedding cache (content hash + model id; livemem.model.embed_cache)
    <home>/publish_log.jsonl           every switch of CURRENT (publish and rollback)

A version is built in ``staging/``, checked there, then renamed into ``versions/`` and named in ``CURRENT``
(both renames are atomic on one file system). Readers only ever open what ``CURRENT`` names, so a crash at any
point leaves the previous version serving.

``IndexHome`` is the one object callers hold; it hands each call to the part that owns it:

- the catalog (``livemem.version.catalog``): the layout, which versions exist, which is current, what the
  manifests and the publish log record;
- the publisher (``livemem.version.publisher``): the write lock, version ids and owners, staging (``derive_version``,
  ``write_manifest``), publishing (the atomic switch) and rollback;
- the janitor (``livemem.version.janitor``): retention (``kept_versions``) and the removal of what no version names
  any more (stale staging, segments, serving copies, Chroma server collections).

The layout's names and those parts' functions are importable from here too, as every caller does.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from filelock import FileLock

from livemem.settings import EngineConfig
from livemem.sources.config import Retention
from livemem.version.catalog import HOME_MODE, MANIFEST, NOT_SHARED, OWNER_SUFFIX, TABLES, VersionCatalog, id_time
from livemem.version.janitor import STALE_STAGING_S, HomeJanitor, kept_versions
from livemem.version.owners import Owner
from livemem.version.publisher import Publisher, dir_size_mb, file_sha256, private_tree, segments_mb, write_manifest
from livemem.version.vectors import CHROMA

__all__ = [
    "CHROMA",
    "HOME_MODE",
    "MANIFEST",
    "NOT_SHARED",
    "OWNER_SUFFIX",
    "STALE_STAGING_S",
    "TABLES",
    "IndexHome",
    "derive_version",
    "dir_size_mb",
    "file_sha256",
    "id_time",
    "kept_versions",
    "private_tree",
    "segments_mb",
    "write_manifest",
]


class IndexHome:
    """One index home directory (``RAG_INDEX_DIR``): its catalog, publisher and janitor behind one object."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        cache_dir: str | os.PathLike[str] | None = None,
        engine: EngineConfig | None = None,
    ) -> None:
        self.catalog = VersionCatalog(root, cache_dir)
        # How this process reads the home's versions (the entry point's ``EngineConfig``, ``EngineConfig.from_env()``;
        # None: the defaults): the dense scan's knobs and where serving copies live. ``load_snapshot``,
        # ``IndexReader`` and ``OpenVersions`` hand it to the snapshots they load; pruning removes the copies there.
        self.janitor = HomeJanitor(self.catalog, engine if engine is not None else EngineConfig.defaults())
        self.publisher = Publisher(self.catalog, self.janitor)
        catalog = self.catalog
        self.root = catalog.root
        self.versions = catalog.versions
        self.staging = catalog.staging
        self.cache_dir = catalog.cache_dir
        self.traces = catalog.traces
        self.current_file = catalog.current_file
        self.log_file = catalog.log_file

    # --- settings the entry point gives (read by the part that uses them) ------------------------------------
    @property
    def engine(self) -> EngineConfig:
        """How this process reads the home's versions (the janitor removes the serving copies it names)."""
        return self.janitor.engine

    @engine.setter
    def engine(self, engine: EngineConfig) -> None:
        self.janitor.engine = engine

    @property
    def owner(self) -> Owner | None:
        """Who stages through this object (the Dagster resource sets its run; default: this process)."""
        return self.publisher.owner

    @owner.setter
    def owner(self, owner: Owner | None) -> None:
        self.publisher.owner = owner

    @property
    def run_finished(self) -> Callable[[str], bool | None] | None:
        """How to ask whether another owner's run has finished (True / False; None when unknown, then its process
        decides)."""
        return self.janitor.run_finished

    @run_finished.setter
    def run_finished(self, run_finished: Callable[[str], bool | None] | None) -> None:
        self.janitor.run_finished = run_finished

    @property
    def chroma_server(self) -> tuple[str, int] | None:
        """The Chroma server (host, port) the entry point's ``ChromaSettings`` names (``CHROMA_HOST``): pruning
        deletes the server collections no kept version references. None: no server, nothing to delete there."""
        return self.janitor.chroma_server

    @chroma_server.setter
    def chroma_server(self, address: tuple[str, int] | None) -> None:
        self.janitor.chroma_server = address

    # --- reading: the catalog ------------------------------------------------------------------------------
    def ensure(self) -> IndexHome:
        self.catalog.ensure()
        return self

    def current(self) -> str | None:
        return self.catalog.current()

    def version_dir(self, version_id: str) -> Path:
        return self.catalog.version_dir(version_id)

    def staged_dir(self, version_id: str) -> Path:
        return self.catalog.staged_dir(version_id)

    def owner_file(self, version_id: str) -> Path:
        return self.catalog.owner_file(version_id)

    def locate(self, version_id: str) -> Path:
        """The directory of a version, published or staged."""
        return self.catalog.locate(version_id)

    def manifest(self, version_id: str) -> dict[str, Any]:
        return self.catalog.manifest(version_id)

    def current_manifest(self) -> dict[str, Any] | None:
        return self.catalog.current_manifest()

    def published_versions(self) -> list[str]:
        """Published version ids, oldest first (ids sort by creation time)."""
        return self.catalog.published_versions()

    def staging_owner(self, version_id: str) -> Owner | None:
        """Who staged ``version_id`` (None when not recorded or unreadable)."""
        return self.catalog.staging_owner(version_id)

    def publish_log(self) -> list[dict[str, str]]:
        """Every switch of ``CURRENT`` (``publish_log.jsonl``), oldest first."""
        return self.catalog.publish_log()

    def published_at(self, version_id: str, manifest: dict[str, Any] | None = None) -> datetime:
        """When ``version_id`` was first published (``VersionCatalog.published_at``)."""
        return self.catalog.published_at(version_id, manifest)

    def referenced_segments(self) -> set[str]:
        """Segments named by a published version or a complete staged one."""
        return self.catalog.referenced_segments()

    # --- writing: the publisher ----------------------------------------------------------------------------
    def write_lock(self, timeout: float = 600) -> FileLock:
        """Held while staging or publishing: one writer per index home (DuckDB files have one writer)."""
        return self.publisher.write_lock(timeout)

    def new_version_id(self) -> str:
        """A new version id, recorded as this writer's (``Publisher.new_version_id``)."""
        return self.publisher.new_version_id()

    def record_staged_by(self, version_id: str, run_id: str) -> None:
        """Write into a staged version's manifest which run staged it (``publish`` checks it)."""
        self.publisher.record_staged_by(version_id, run_id)

    def publish(
        self,
        version_id: str,
        expected_base: str | None,
        retention: int | Retention | dict[str, int],
        run_id: str | None = None,
        now: datetime | None = None,
    ) -> list[str]:
        """Move a staged version into ``versions/`` and switch ``CURRENT`` to it; returns the pruned versions
        (``Publisher.publish``: raises PublishConflict when another version was published since ``expected_base``)."""
        return self.publisher.publish(version_id, expected_base, retention, run_id, now)

    def rollback(self, version_id: str) -> None:
        """Point ``CURRENT`` back at an older published version."""
        self.publisher.rollback(version_id)

    # --- removing: the janitor -----------------------------------------------------------------------------
    def clear_staging(self, keep_latest: int = 0) -> list[str]:
        """Remove what no live writer owns from ``staging/`` (``HomeJanitor.clear_staging``); call with the write
        lock held."""
        return self.janitor.clear_staging(keep_latest)

    def _prune(self, retention: int | Retention | dict[str, int], now: datetime | None = None) -> list[str]:
        """Apply ``retention`` (``HomeJanitor.prune``); returns the removed versions."""
        return self.janitor.prune(retention, now)

    def _gc_vectors(self) -> None:
        """Delete what no version names: Chroma server collections, segments, serving copies."""
        self.janitor.gc_vectors()


def derive_version(home: IndexHome, link: tuple[str, ...] = ()) -> tuple[str, Path, str | None]:
    """Stage a new version as a copy of the current one, for a step that changes only its own part of it.

    Returns (new version id, its staging directory, base version id). The caller holds ``home.write_lock()``,
    changes its own tables / files in the copy, writes the manifest with ``write_manifest``, and publishes with
    ``home.publish(version_id, base, retention)``: the base check there refuses to publish a copy of a version
    that is no longer current (another step published meanwhile), so no step ever drops another step's work.

    Entries named in ``link`` (e.g. ``chroma``, ``retrieval``) are hard-linked instead of copied: instant and
    free of disk, for a caller that promises not to modify them (the base version's files are shared).
    """
    return home.publisher.derive(link)
