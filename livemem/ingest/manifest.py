"""A built version's manifest: its counts (per source, per collection, the change), model, chunking, the breath it
was built under (``read_breath``), attention statistics and the governance caps (the staging contract's
``livemem.version.staging.governance_status``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import duckdb

from livemem.dates import iso, utc_now
from livemem.errors import SourceError
from livemem.ingest.chroma_mirror import vector_store_mode
from livemem.ingest.documents import extractors
from livemem.ingest.plan import Base, source_fingerprint
from livemem.model.embedding import Embedder
from livemem.sources.breath import Breath, parse_breath
from livemem.sources.config import SourcesConfig
from livemem.sources.gitsource import GitSource
from livemem.sources.home import home_from_sources
from livemem.usage.attention import attention_stats
from livemem.version.schema import LAYOUT_VERSION
from livemem.version.staging import governance_status

HIGH_ATTENTION = 1.0


@dataclass
class SourceStats:
    """One source's part of a build: its commits, what changed, and why it failed if it did (the manifest's
    ``sources``; ``BuildResult.sources``)."""

    head_commit: str | None = None
    base_commit: str | None = None
    error: str | None = None
    files_new: int = 0
    files_changed: int = 0
    files_unchanged: int = 0
    files_deleted: int = 0
    chunks_new: int = 0
    chunks_changed: int = 0
    chunks_unchanged: int = 0
    chunks_deleted: int = 0
    truncated_files: int = 0
    skipped: Counter = field(default_factory=Counter)
    # the files this build read and could not index, with why: path, reason, extractor (documents), error
    skip_reports: list[dict[str, Any]] = field(default_factory=list)
    changed_paths: list[str] = field(default_factory=list)
    deleted_paths: list[str] = field(default_factory=list)


def count_chunks(con: duckdb.DuckDBPyConnection, stats: dict[str, SourceStats], base: Base) -> None:
    """Per source: chunks unchanged, deleted, changed (in changed files) and new, from the change alone (the temp
    tables ``removed`` and ``fresh_only``)."""
    deleted = dict(con.execute("SELECT source, COUNT(*) FROM removed GROUP BY 1").fetchall())
    added = dict(con.execute("SELECT source, list(path) FROM fresh_only GROUP BY 1").fetchall())
    base_sources = base.sources
    for source, st in stats.items():
        base_chunks = base_sources.get(source, {}).get("chunks", 0) if base.dir is not None else 0
        changed = set(st.changed_paths)
        paths = added.get(source) or []
        st.chunks_deleted = deleted.get(source, 0)
        st.chunks_unchanged = base_chunks - st.chunks_deleted
        st.chunks_changed = sum(1 for p in paths if p in changed)
        st.chunks_new = len(paths) - st.chunks_changed


def version_manifest(
    con: duckdb.DuckDBPyConnection,
    version_id: str,
    config: SourcesConfig,
    embedder: Embedder,
    base: Base,
    stats: dict[str, SourceStats],
    breath: Breath,
    computed: int,
    reused: int,
    failed: list[str],
) -> dict[str, Any]:
    """The manifest of the version staged on ``con`` (its size and governance are set once its files are written;
    ``failed``: the sources that could not be read, whose base entries are kept)."""
    now = iso(utc_now())
    # one scan of the chunk rows (and one of the files) for every count below
    per_source, collections = _chunk_counts(con)
    files = dict(con.execute("SELECT source, COUNT(*) FROM parents GROUP BY 1").fetchall())
    skipped: dict[str, dict[str, int]] = {}
    for source, reason, n in con.execute("SELECT source, reason, COUNT(*) FROM skipped_files GROUP BY 1, 2").fetchall():
        skipped.setdefault(source, {})[reason] = n
    total = sum(n for n, _ in per_source.values())
    sealed_total = sum(sealed for _, sealed in per_source.values())
    parents_total = sum(files.values())
    attention = attention_stats(con, HIGH_ATTENTION, total)
    sources = _source_entries(config, embedder, base, stats, failed, per_source, files, skipped)
    return {
        "version_id": version_id,
        "layout_version": LAYOUT_VERSION,
        "base_version": base.version,
        "created_at": now,
        "last_updated": now,
        "model": {"id": embedder.model_id, "dim": embedder.dim},
        "vector_store": vector_store_mode(config),
        "home": home_from_sources(config).to_manifest(),  # what serving answers for (livemem.geo.home)
        "chunking": config.chunking,
        "total_chunks": total,
        "total_parents": parents_total,
        "sealed_chunks": sealed_total,
        "index_size_mb": 0.0,
        "collections": collections,
        "sources": sources,
        "breath_at_update": {
            "phase": breath.phase,
            "tone": breath.tone,
            "source": breath.source,
            "path": breath.path,
        },
        "governance": governance_status(total, 0.0, config.governance),
        "attention_stats": attention,
        "changes": _changes(stats, computed, reused, failed),
    }


def _chunk_counts(
    con: duckdb.DuckDBPyConnection,
) -> tuple[dict[str, tuple[int, int]], dict[str, dict[str, Any]]]:
    """Per source its chunks and sealed chunks, and per collection its access and chunks (one scan of the rows)."""
    per_source: dict[str, tuple[int, int]] = {}
    collections: dict[str, dict[str, Any]] = {}
    for source, collection, access, n, sealed in con.execute(
        "SELECT source, collection, any_value(access), COUNT(*), COUNT(*) FILTER (WHERE seal_state = 'SEALED') "
        "FROM chunks GROUP BY 1, 2 ORDER BY 1, 2"
    ).fetchall():
        before = per_source.get(source, (0, 0))
        per_source[source] = (before[0] + n, before[1] + sealed)
        entry = collections.setdefault(collection, {"access": access, "chunks": 0})
        entry["chunks"] += n
    return per_source, collections


def _source_entries(
    config: SourcesConfig,
    embedder: Embedder,
    base: Base,
    stats: dict[str, SourceStats],
    failed: list[str],
    per_source: dict[str, tuple[int, int]],
    files: dict[str, int],
    skipped: dict[str, dict[str, int]],
) -> dict[str, dict[str, Any]]:
    """The manifest's ``sources``: each configured source's entry (a source that could not be read keeps its base
    entry, with its error; one new in this build is left out)."""
    base_sources = base.sources
    sources = {}
    for src in config.sources:
        st = stats[src.name]
        if src.name in failed:
            if src.name in base_sources:
                sources[src.name] = {**base_sources[src.name], "error": st.error}
            continue
        n, sealed = per_source.get(src.name, (0, 0))
        sources[src.name] = {
            "repo": str(src.repo), "ref": src.ref, "head_commit": st.head_commit, "collection": src.collection,
            "access": src.access, "files": files.get(src.name, 0), "chunks": n, "sealed_chunks": sealed,
            "skipped_files": skipped.get(src.name, {}),
            "config_fingerprint": source_fingerprint(config, src, embedder.model_id),
            "extractors": extractors(),
        }  # fmt: skip
    return sources


def _changes(stats: dict[str, SourceStats], computed: int, reused: int, failed: list[str]) -> dict[str, Any]:
    """The manifest's ``changes``: embeddings computed and reused, the unreadable sources and each source's stats."""
    return {
        "embeddings_computed": computed,
        "embeddings_reused": reused,
        "unreadable_sources": {name: stats[name].error for name in failed},
        "per_source": {
            name: {k: v for k, v in vars(st).items() if k not in ("changed_paths", "deleted_paths", "skipped")}
            for name, st in stats.items()
        },
    }


def read_breath(config: SourcesConfig, opened: dict[str, GitSource] | None = None) -> Breath:
    """The breath (Δ-phase and tone) from the breath file at the breath source's ref; defaults when absent.

    Without ``breath.source`` in the sources file, the first source holding the file wins.
    """
    names = [config.breath_source] if config.breath_source else config.names
    for name in names:
        src = config.source(name)
        repo = (opened or {}).get(name)
        close = repo is None
        try:
            repo = repo or GitSource(src.repo, name)
            path = f"{src.subdir}/{config.breath_path}" if src.subdir else config.breath_path
            raw = repo.read_file(repo.resolve(src.ref), path)
        except SourceError:
            continue
        finally:
            if close and repo is not None:
                repo.close()
        if raw is not None:
            return parse_breath(raw.decode("utf-8", errors="replace"), name, path)
    return Breath()
