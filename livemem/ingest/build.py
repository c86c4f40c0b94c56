"""Building a new index version from the configured git sources, incrementally.

For each source the files at its HEAD commit are compared, by blob id, with the files the current version
indexed: unchanged files are carried over (the new version names their rows in the base's segments: nothing is
copied), new and changed files are re-chunked into one new segment (``livemem.version``) with their vectors and
BM25 postings, only text never embedded before is embedded, and chunks of deleted files are dropped from the
membership. When no source has a new commit and nothing in the configuration changed, nothing is built.

The result is a complete version directory in ``staging/``; publishing it is a separate step (``store``) that
runs only after the checks (``checks``) pass.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from livemem.duck import registered, sql_literal, sql_literals
from livemem.errors import LivingMemoryError, SourceError
from livemem.ingest import records
from livemem.ingest.breath import Breath, parse_breath
from livemem.ingest.embed_cache import EmbeddingCache
from livemem.ingest.embedding import Embedder
from livemem.ingest.read import FileTask, ReadJob, read_and_chunk
from livemem.ingest.vectors import delete, open_vectors, server_address, upsert
from livemem.query.sparse import Postings, TermIds
from livemem.sources.config import Governance, SourceConfig, SourcesConfig
from livemem.sources.gitsource import GitSource, TreeEntry
from livemem.usage.attention import attention_stats
from livemem.version import PARTS, connect, use_parts
from livemem.version.segments import (
    MEMBERS_SQL,
    PARENT_COLUMNS,
    create_views,
    hold_segment,
    live_rows,
    merge_plan,
    release_segments,
    segment_meta,
    version_segments,
    write_segment,
)
from livemem.version.store import (
    CHROMA,
    MANIFEST,
    TABLES,
    IndexHome,
    dir_size_mb,
    iso,
    segments_mb,
    utc_now,
    write_manifest,
)

log = logging.getLogger(__name__)

# No PRIMARY KEY on the per-version tables: an ART index over 123k chunk ids is 11 MB of a version's 15 MB own
# files, copied by every build and attention publish. The ids are unique by construction (one row per chunk of the
# ``chunks`` view); ``check_index_complete`` checks it.
SCHEMA_SQL = (
    """
CREATE TABLE skipped_files (
    source VARCHAR NOT NULL, path VARCHAR NOT NULL, blob_sha VARCHAR NOT NULL, size BIGINT NOT NULL,
    reason VARCHAR NOT NULL
);
CREATE TABLE attention (
    chunk_id VARCHAR NOT NULL, attention_score DOUBLE NOT NULL DEFAULT 0, last_breath_seen VARCHAR
);
CREATE TABLE chunk_lineage (chunk_id VARCHAR NOT NULL, predecessors VARCHAR[] NOT NULL);
"""
    + MEMBERS_SQL
)
LAYOUT_VERSION = 3  # bump when a version's files change shape; older versions are then rebuilt, not reused
CHUNK_TABLES = (
    "chunks", "parents", "chunk_parts", "parent_parts", "chunk_members", "parent_members", "held_segments",
    "chunk_deletes", "parent_deletes", "skipped_files", "attention", "chunk_lineage",
)  # fmt: skip
SKIP_COLUMNS = ("source", "path", "blob_sha", "size", "reason")
HIGH_ATTENTION = 1.0
QUICK_PLAN_MAX_PATHS = 2000  # more paths touched since the base: list the whole tree instead (one git call)


def init_chunk_tables(con: duckdb.DuckDBPyConnection) -> None:
    """The chunk step's tables and views, empty: a version staged by another step on an empty index is complete."""
    con.execute(SCHEMA_SQL)
    create_views(con, [])


@dataclass
class SourceStats:
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
    changed_paths: list[str] = field(default_factory=list)
    deleted_paths: list[str] = field(default_factory=list)


@dataclass
class BuildResult:
    version_id: str | None
    base_version: str | None
    reason: str
    sources: dict[str, SourceStats] = field(default_factory=dict)
    embeddings_computed: int = 0
    embeddings_reused: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    manifest: dict[str, Any] | None = None

    @property
    def staged(self) -> bool:
        return self.version_id is not None


@dataclass
class _FilePlan:
    """What happens to each file of one source in this build."""

    source: SourceConfig
    git: GitSource
    head: str
    fingerprint: str
    base_commit: str | None
    tree: dict[str, TreeEntry]
    carried: list[str]
    rebuilt: list[str]
    new: set[str]
    deleted: list[str]
    base_created: dict[str, str | None] = field(default_factory=dict)
    # set when only the paths commits since the base touched were looked at: every other file of the source in the
    # base is carried (``carried`` then lists none of them)
    carry_all_but: list[str] | None = None


def build_version(
    config: SourcesConfig,
    home: IndexHome,
    embedder: Embedder,
    *,
    force: bool = False,
    commits: dict[str, str] | None = None,
) -> BuildResult:
    """Stage a new version from the sources; returns what was done (``version_id`` None when nothing changed).

    ``commits`` pins sources to given commits instead of their configured refs (``verify --rebuild`` rebuilds
    exactly the commits a published version indexed).
    """
    home.ensure()
    with home.write_lock():
        home.clear_staging()
        embedder = embedder.with_encoder(config.encoder) if config.encoder else embedder  # index.encoder
        return _Builder(config, home, embedder, commits).run(force)


class _Builder:
    def __init__(
        self, config: SourcesConfig, home: IndexHome, embedder: Embedder, commits: dict[str, str] | None = None
    ) -> None:
        self.config = config
        self.commits = commits or {}
        self.home = home
        self.embedder = embedder
        self.timings: dict[str, float] = {}
        self.base = home.current()
        self.base_manifest = home.manifest(self.base) if self.base else None
        self.base_dir = home.version_dir(self.base) if self.base else None
        # a base of an older layout has no segments to share: every file is rebuilt (vectors come from the cache)
        self.base_segmented = bool(self.base_manifest and self.base_manifest.get("layout_version") == LAYOUT_VERSION)
        self.parts = home.root / PARTS
        # What the base's rows become (``_carry_members``): sources whose rows are looked at (others are dropped),
        # (source, path) pairs dropped, and per source rebuilt from a full comparison, the paths kept.
        self.carry_sources: list[str] = []
        self.drop_paths: list[tuple[str, str]] = []
        self.keep_only: list[tuple[str, str]] = []
        self.keep_only_sources: list[str] = []
        self.term_batches: list[TermIds] = []  # BM25 tokens of the new rows, batch by batch, in their order

    def _tick(self, name: str, since: float) -> float:
        now = time.perf_counter()
        self.timings[name] = round(self.timings.get(name, 0.0) + now - since, 3)
        return now

    def run(self, force: bool) -> BuildResult:
        t0 = time.perf_counter()
        stats: dict[str, SourceStats] = {}
        opened: dict[str, tuple[GitSource, str]] = {}
        for src in self.config.sources:
            st = stats[src.name] = SourceStats()
            try:
                repo = GitSource(src.repo, src.name)
                st.head_commit = repo.resolve(self.commits.get(src.name, src.ref))
                opened[src.name] = (repo, st.head_commit)
            except SourceError as exc:
                st.error = str(exc)
                log.error("%s", exc)
        try:
            if not opened:
                raise SourceError("no source could be read:\n  " + "\n  ".join(s.error or "" for s in stats.values()))
            base_sources = (self.base_manifest or {}).get("sources", {})
            for name, st in stats.items():
                st.base_commit = base_sources.get(name, {}).get("head_commit")
            if not force and self._unchanged(stats):
                return BuildResult(
                    None, self.base, f"no new commits: version {self.base} already indexes every source's HEAD",
                    stats, timings={"total_s": round(time.perf_counter() - t0, 3)},
                )  # fmt: skip
            version_id = self.home.new_version_id()
            manifest = self._stage(version_id, stats, opened)
        finally:
            for repo, _ in opened.values():
                repo.close()
        self.timings["total_s"] = round(time.perf_counter() - t0, 3)
        result = BuildResult(version_id, self.base, "staged", stats, timings=self.timings, manifest=manifest)
        result.embeddings_computed = manifest["changes"]["embeddings_computed"]
        result.embeddings_reused = manifest["changes"]["embeddings_reused"]
        return result

    def _unchanged(self, stats: dict[str, SourceStats]) -> bool:
        if self.base_manifest is None or any(s.error for s in stats.values()):
            return False
        base = self.base_manifest
        if base.get("model", {}).get("id") != self.embedder.model_id or set(base["sources"]) != set(stats):
            return False
        if base.get("layout_version") != LAYOUT_VERSION:
            return False  # built by an older layout (or damaged): rebuild it, carrying over what still holds
        if base.get("vector_store", "chroma") != vector_store_mode(self.config):
            return False  # the vector store was switched on or off: write (or drop) it
        for src in self.config.sources:
            entry = base["sources"][src.name]
            if entry["head_commit"] != stats[src.name].head_commit:
                return False
            if entry.get("config_fingerprint") != self._fingerprint(src):
                return False
        return True

    def _fingerprint(self, src: SourceConfig) -> str:
        return src.fingerprint({**self.config.chunking, "model": self.embedder.model_id})

    # --- staging ------------------------------------------------------------------------------------------
    def _stage(self, version_id: str, stats: dict[str, SourceStats], opened: dict) -> dict[str, Any]:
        staged = self.home.staged_dir(version_id)
        staged.mkdir(parents=True)
        con = connect(staged, read_only=False)
        use_parts(con, staged)
        try:
            # One checkpoint, when the file is closed: automatic checkpoints between the build's inserts rewrite
            # row groups and leave the old blocks free in the file (DuckDB never shrinks it): at 25k chunks a
            # one-file change wrote a 150 MB file holding 74 MB of data.
            con.execute("SET wal_autocheckpoint = '1TB'")
            con.execute(SCHEMA_SQL)
            if self.base_dir is not None:
                con.execute(f"ATTACH '{self.base_dir / TABLES}' AS base (READ_ONLY)")
                self._carry_other_parts(con, staged)
            new_rows, new_parents, skips, failed = self._collect(con, stats, opened)
            t = time.perf_counter()
            self._carry_members(con)
            t = self._tick("carry_over_s", t)
            texts = [r.pop("_embed_text") for r in new_rows]
            vectors, computed, reused = self._embed(texts)
            t = self._tick("embed_s", t)
            segments = self._write_segments(con, new_rows, new_parents, vectors, texts)
            t = self._tick("segment_s", t)
            self._write(con, skips, new_rows)
            self._count_chunks(con, stats)
            t = self._tick("tables_s", t)
            if self.config.uses_chroma:
                self._update_chroma(con, staged, new_rows, vectors)
                t = self._tick("chroma_s", t)
            breath = self._breath(opened)
            manifest = self._manifest(con, version_id, staged, stats, breath, computed, reused, failed)
            manifest["segments"] = segments
        finally:
            con.close()
        for key, value in (self.base_manifest or {}).items():
            manifest.setdefault(key, value)  # sections other steps own (registry, gbim, ...)
        # the size cap is checked on every file but the manifest itself (written once: it hashes every file)
        manifest["governance"] = governance_status(
            manifest["total_chunks"], dir_size_mb(staged) + segments_mb(self.parts, segments),
            self.config.governance,
        )  # fmt: skip
        write_manifest(staged, manifest)
        return manifest

    def _carry_other_parts(self, con: duckdb.DuckDBPyConnection, staged) -> None:
        """Copy what other steps own (registry, spatial entities, ... tables and directories) unchanged."""
        tables = con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = 'base' AND table_schema = 'main' "
            "AND table_type = 'BASE TABLE'"
        ).fetchall()
        for (table,) in tables:
            if table not in CHUNK_TABLES:  # views are the chunk step's (information_schema lists them too)
                con.execute(f'CREATE TABLE "{table}" AS SELECT * FROM base."{table}"')
        for entry in self.base_dir.iterdir():
            if entry.name not in (TABLES, CHROMA, "retrieval", MANIFEST) and not entry.name.startswith(TABLES):
                copy = shutil.copytree if entry.is_dir() else shutil.copy2
                copy(entry, staged / entry.name)

    def _base_files(
        self, con: duckdb.DuckDBPyConnection, source: str, only: list[str] | None = None
    ) -> dict[str, tuple[str, str]]:
        """path -> (blob sha, created_at) of the files the base version indexed or skipped for a source (of the
        paths in ``only`` when given)."""
        if self.base_dir is None or not self.base_segmented:
            return {}
        if only is None:
            where = f"source = {sql_literal(source)}"
        elif not only:
            return {}
        else:  # a literal list: Parquet row groups are pruned by their statistics
            where = f"source = {sql_literal(source)} AND path IN ({sql_literals(only)})"
        rows = con.execute(
            f"SELECT p.path, p.blob_sha, p.created_at FROM base.parent_parts p "
            f"ANTI JOIN base.parent_deletes x ON p._seg = x.segment AND p._row = x.seg_row WHERE {where} "
            f"UNION ALL SELECT path, blob_sha, NULL FROM base.skipped_files WHERE {where}"
        ).fetchall()
        return {p: (sha, created) for p, sha, created in rows}

    def _collect(self, con, stats, opened):
        new_rows: list[dict[str, Any]] = []
        new_parents: list[dict[str, Any]] = []
        skips: list[dict[str, Any]] = []
        failed: list[str] = []
        for src in self.config.sources:
            st = stats[src.name]
            self.carry_sources.append(src.name)
            if src.name not in opened:
                failed.append(src.name)  # unreadable: every row of it in the base is kept
                continue
            repo, head = opened[src.name]
            t = time.perf_counter()
            plan = self._plan(con, src, repo, head, st)
            t = self._tick("git_list_s", t)
            if plan.carry_all_but is not None:
                self.drop_paths += [(src.name, p) for p in plan.carry_all_but]
            else:
                self.keep_only_sources.append(src.name)
                self.keep_only += [(src.name, p) for p in plan.carried]
            rows, parents, skipped = self._chunk_files(con, plan, st)
            self._tick("read_chunk_s", t)
            new_rows += rows
            new_parents += parents
            skips += skipped
        return new_rows, new_parents, skips, failed

    def _plan(self, con, src: SourceConfig, repo: GitSource, head: str, st: SourceStats) -> _FilePlan:
        base_entry = (self.base_manifest or {}).get("sources", {}).get(src.name)
        fingerprint = self._fingerprint(src)
        quick = self._plan_changes(con, src, repo, head, st, base_entry, fingerprint)
        if quick is not None:
            return quick
        tree = {e.path: e for e in repo.list_files(head) if src.selects(e.path)}
        base_files = self._base_files(con, src.name)
        same_config = base_entry is not None and base_entry.get("config_fingerprint") == fingerprint
        base_commit = base_entry.get("head_commit") if base_entry else None
        # A file whose blob is the same as in the base may still have been changed and changed back since: its
        # provenance (the last commit that changed it) moved, so it is rebuilt too. Without a usable range
        # (history rewritten, base commit gone) nothing can be carried.
        touched = repo.touched_since(base_commit, head) if base_files else set()
        carried, rebuilt, new = [], [], set()
        for path, entry in tree.items():
            before = base_files.get(path)
            if before is None:
                new.add(path)
                rebuilt.append(path)
            elif before[0] == entry.blob_sha and same_config and touched is not None and path not in touched:
                carried.append(path)
            else:
                rebuilt.append(path)
        deleted = sorted(set(base_files) - set(tree))
        st.files_new = len(new)
        st.files_changed = len(rebuilt) - len(new)
        st.files_unchanged = len(carried)
        st.files_deleted = len(deleted)
        st.changed_paths = sorted(set(rebuilt) - new)
        st.deleted_paths = deleted
        base_created = {p: created for p, (_, created) in base_files.items()}
        return _FilePlan(
            src, repo, head, fingerprint, base_commit, tree, carried, rebuilt, new, deleted, base_created
        )  # fmt: skip

    def _plan_changes(
        self, con, src: SourceConfig, repo: GitSource, head: str, st: SourceStats, base_entry, fingerprint: str
    ) -> _FilePlan | None:
        """The plan from the commits since the base alone, O(change): with the same configuration and the base
        commit an ancestor of ``head``, a file no commit since touched is unchanged (same blob, same provenance),
        so only the touched paths are looked up in the tree and in the base. None when that does not hold (or so
        many paths were touched that listing the whole tree is cheaper): ``_plan`` compares everything."""
        if not (self.base_segmented and base_entry and base_entry.get("config_fingerprint") == fingerprint):
            return None
        base_commit = base_entry.get("head_commit")
        touched = repo.touched_since(base_commit, head)
        if touched is None or len(touched) > QUICK_PLAN_MAX_PATHS:
            return None
        paths = sorted(p for p in touched if src.selects(p))
        tree = {e.path: e for e in repo.entries(head, paths)} if paths else {}
        base_files = self._base_files(con, src.name, paths)
        new = {p for p in tree if p not in base_files}
        rebuilt = sorted(tree)
        deleted = sorted(set(base_files) - set(tree))
        base_count = base_entry.get("files", 0) + sum(base_entry.get("skipped_files", {}).values())
        st.files_new = len(new)
        st.files_changed = len(rebuilt) - len(new)
        st.files_unchanged = base_count - len(base_files)
        st.files_deleted = len(deleted)
        st.changed_paths = sorted(set(rebuilt) - new)
        st.deleted_paths = deleted
        base_created = {p: created for p, (_, created) in base_files.items()}
        return _FilePlan(
            src, repo, head, fingerprint, base_commit, tree, [], rebuilt, new, deleted, base_created,
            carry_all_but=sorted(base_files),
        )  # fmt: skip

    def _carry_members(self, con: duckdb.DuckDBPyConnection) -> None:
        """Keep the base's rows of unchanged files: name their (segment, row) in this version's membership and copy
        their skipped-file rows. ``dropped_chunks`` (temp) lists the base's chunks that are not kept, for attention
        and counts. With the quick plan this costs a lookup of the touched paths (Parquet statistics skip the rest)
        and a copy of the base's membership (integers); nothing per chunk in Python."""
        empty = (
            "CREATE TEMP TABLE dropped_chunks AS SELECT NULL::VARCHAR AS _seg, NULL::INTEGER AS _row, "
            "NULL::VARCHAR AS chunk_id, NULL::VARCHAR AS source, NULL::VARCHAR AS path, NULL::VARCHAR AS heading_path "
            "WHERE false"
        )
        if self.base_dir is None:
            con.execute(empty)
            return
        if not self.base_segmented:  # an older layout: nothing is shared, every base chunk is replaced
            con.execute(
                "CREATE TEMP TABLE dropped_chunks AS SELECT NULL::VARCHAR AS _seg, NULL::INTEGER AS _row, "
                "chunk_id, source, path, heading_path FROM base.chunks"
            )
            return
        # which base rows go: sources no longer configured; the touched paths of a quick plan; every path but the
        # carried ones of a full comparison. Literal lists, so DuckDB prunes Parquet row groups by their statistics.
        conditions = [f"p.source NOT IN ({sql_literals(self.carry_sources)})"] if self.carry_sources else ["true"]
        by_source: dict[str, list[str]] = {}
        for source, path in self.drop_paths:
            by_source.setdefault(source, []).append(path)
        conditions += [
            f"(p.source = {sql_literal(s)} AND p.path IN ({sql_literals(ps)}))" for s, ps in by_source.items()
        ]
        keep = {s: [] for s in self.keep_only_sources}
        for source, path in self.keep_only:
            keep[source].append(path)
        with registered(con, pd.DataFrame(self.keep_only, columns=["source", "path"], dtype=object), "keep") as kept:
            for source in keep:
                conditions.append(
                    f"(p.source = {sql_literal(source)} AND p.path NOT IN "
                    f"(SELECT path FROM {kept} WHERE source = {sql_literal(source)}))"
                )
            con.execute("INSERT INTO held_segments SELECT * FROM base.held_segments")
            for kind in ("chunk", "parent"):
                extra = ", p.chunk_id, p.source, p.path, p.heading_path" if kind == "chunk" else ""
                selects = " UNION ALL ".join(
                    f"SELECT p._seg, p._row{extra} FROM base.{kind}_parts p WHERE {c}" for c in conditions
                )
                con.execute(
                    f"CREATE TEMP TABLE dropped_{kind}s AS SELECT DISTINCT d.* FROM ({selects}) d "
                    f"ANTI JOIN base.{kind}_deletes x ON d._seg = x.segment AND d._row = x.seg_row"
                )
                con.execute(
                    f"INSERT INTO {kind}_deletes SELECT segment, seg_row FROM base.{kind}_deletes "
                    f"UNION ALL SELECT _seg, _row FROM dropped_{kind}s"
                )
            gone = " OR ".join(conditions)
            con.execute(f"INSERT INTO skipped_files SELECT * FROM base.skipped_files p WHERE NOT ({gone})")

    def _chunk_files(self, con, plan: _FilePlan, st: SourceStats):
        """Rows, parent rows and skipped-file rows of the rebuilt files, in path order: read and chunked in batches,
        by worker processes when there are many files (``read_and_chunk``)."""
        history = self._history(plan)
        job = ReadJob(
            plan.source, str(plan.git.path), self.embedder.model_id, self.config.max_file_bytes,
            self.config.max_chunk_chars, self.config.chunk_tokens,
        )  # fmt: skip
        created = {p: None if p in plan.new else plan.base_created.get(p) for p in plan.rebuilt}
        tasks = [FileTask(p, plan.tree[p], history[p], created[p]) for p in sorted(plan.rebuilt)]
        rows: list[dict[str, Any]] = []
        parents: list[dict[str, Any]] = []
        skipped: list[dict[str, Any]] = []
        for batch in read_and_chunk(job, tasks, plan.git):
            self.term_batches.append(batch.terms)
            rows += batch.rows
            parents += batch.parents
            skipped += batch.skipped
            for row in batch.skipped:
                st.skipped[row["reason"]] += 1
            for path, size in batch.truncated:
                st.truncated_files += 1
                log.warning("source %s: %s is %d bytes; indexed its first %d", job.source.name, path, size,
                            job.max_file_bytes)  # fmt: skip
        return rows, parents, skipped

    def _history(self, plan: _FilePlan) -> dict:
        """Provenance of every rebuilt file, as a from-scratch build computes it (one walk of the whole history).

        A file the base indexed with a known ``created_at`` only needs its last change, which lies in the commits
        since the base when it was touched there; a file new to the source (added, moved in from another source,
        selected by a changed glob, or skipped before) needs its first add, which may lie before the base.
        """
        wanted = set(plan.rebuilt)
        ranged = {p for p in wanted if p not in plan.new and plan.base_created.get(p)}
        found: dict = {}
        if ranged and plan.base_commit and plan.git.is_ancestor(plan.base_commit, plan.head):
            found = plan.git.history(plan.head, ranged, since=plan.base_commit)
        missing = wanted - set(found)
        if missing:
            found.update(plan.git.history(plan.head, missing))
        still = wanted - set(found)
        if still:
            raise LivingMemoryError(
                f"source {plan.source.name!r}: no commit in the history of {plan.head} touches {sorted(still)[:5]}"
            )
        return found

    def _embed(self, texts: list[str]):
        total = len(texts)

        def progress(done: int, todo: int) -> None:
            log.info("embedded %d/%d new texts (%d chunks to store)", done, todo, total)

        with EmbeddingCache(self.home.cache_dir, self.embedder.dim) as cache:
            return cache.embed(texts, self.embedder, progress)

    def _write_segments(self, con, rows, parents, vectors, texts) -> list[dict[str, Any]]:
        """Write the rebuilt chunks and files as one new segment, name its rows in the membership, merge segments
        when the version would hold too many or too little of one (``merge_plan``), and define the ``chunks`` /
        ``parents`` views. Returns the version's segments with the rows it holds of each."""
        if rows or parents:
            segment = write_segment(
                con, self.parts, pd.DataFrame(rows, columns=list(records.CHUNK_COLUMNS)),
                pd.DataFrame(parents, columns=list(PARENT_COLUMNS)), vectors, texts,
                Postings.merge(self.term_batches),
            )  # fmt: skip
            hold_segment(con, segment, len(rows), len(parents))
        release_segments(con, [s for s, c, p in live_rows(con) if c == 0 and p == 0])  # nothing of it is held
        create_views(con, version_segments(con))
        live = self._live_counts(con)
        sizes = {s: (m := segment_meta(self.parts, s))["chunks"] + m["parents"] for s in live}
        plan = merge_plan(live, sizes)
        if plan:
            self._merge(con, plan)
            create_views(con, version_segments(con))
            live = self._live_counts(con)
        return [{"id": s, "chunks": n_chunks, "parents": n_parents} for s, (n_chunks, n_parents) in self._held(con)]

    def _live_counts(self, con) -> dict[str, int]:
        return {s: c + p for s, (c, p) in self._held(con)}

    def _held(self, con) -> list[tuple[str, tuple[int, int]]]:
        return [(s, (c, p)) for s, c, p in live_rows(con)]

    def _merge(self, con, plan: list[str]) -> None:
        """Rewrite the rows this version holds of the ``plan`` segments as one segment."""
        t = time.perf_counter()
        listed = sql_literals(plan)
        held = (
            "SELECT p.* FROM {kind}_parts p ANTI JOIN {kind}_deletes d ON d.segment = p._seg AND d.seg_row = p._row "
            f"WHERE p._seg IN ({listed}) ORDER BY p._seg, p._row"
        )
        chunks = con.execute(held.format(kind="chunk")).df()
        parents = con.execute(held.format(kind="parent")).df()
        release_segments(con, plan)
        vectors = np.zeros((len(chunks), self.embedder.dim), dtype=np.float32)
        for segment, group in chunks.groupby("_seg", sort=False):
            dense = np.load(self.parts / str(segment) / "dense.npy", mmap_mode="r")
            vectors[group.index.to_numpy()] = dense[group["_row"].to_numpy()]
        texts = [
            records.embed_text(c, json.loads(h)) for c, h in zip(chunks["content"], chunks["heading_path"], strict=True)
        ]
        segment = write_segment(
            con, self.parts, chunks.drop(columns=["_seg", "_row"]), parents.drop(columns=["_seg", "_row"]), vectors,
            texts,
        )  # fmt: skip
        hold_segment(con, segment, len(chunks), len(parents))
        self._tick("merge_s", t)
        log.info("merged %d segments into %s (%d chunks, %d files)", len(plan), segment, len(chunks), len(parents))

    def _write(self, con, skips, new_rows: list[dict[str, Any]]) -> None:
        if skips:
            with registered(con, pd.DataFrame(skips, columns=list(SKIP_COLUMNS)), "skipped_files") as frame:
                con.execute(f"INSERT INTO skipped_files SELECT * FROM {frame}")
        fresh = pd.DataFrame(
            [(r["chunk_id"], r["source"], r["path"], r["heading_path"]) for r in new_rows],
            columns=["chunk_id", "source", "path", "heading_path"], dtype=object,
        )  # fmt: skip
        with registered(con, fresh, "fresh") as frame:
            # removed: base chunks gone from this version; fresh_only: chunks the base did not hold. Rebuilt paths'
            # rows are all dropped and carried rows are never rebuilt, so both come from the change alone.
            con.execute(
                "CREATE TEMP TABLE removed AS SELECT chunk_id, source, path, heading_path FROM dropped_chunks "
                f"WHERE chunk_id NOT IN (SELECT chunk_id FROM {frame})"
            )
            con.execute(
                f"CREATE TEMP TABLE fresh_only AS SELECT * FROM {frame} "
                "WHERE chunk_id NOT IN (SELECT chunk_id FROM dropped_chunks)"
            )
        if self.base_dir is not None:
            self._inherit(con)

    def _inherit(self, con: duckdb.DuckDBPyConnection) -> None:
        """Attention of the new version: kept chunks keep theirs; an edited chunk inherits from the chunk it replaced.

        A chunk id that is new in this version, in a file that had a chunk (now gone) under the same heading path,
        inherits that chunk's attention and last_breath_seen (the one with the most attention when several share
        the heading). ``chunk_lineage`` records the replaced ids, most recent first, so the nightly rollup can
        continue the day-by-day attention of an edited chunk from its predecessor.

        ``attention`` holds only chunks with some (a score or a breath seen); a chunk without a row has score 0.
        Everything here is O(change + chunks with attention): the base's rows are copied minus the removed ones.
        """
        base_has_lineage = con.execute(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_catalog = 'base' AND table_name = 'chunk_lineage'"
        ).fetchone()[0]
        base_lineage = (
            "base.chunk_lineage"
            if base_has_lineage
            else "(SELECT NULL::VARCHAR AS chunk_id, NULL::VARCHAR[] AS predecessors WHERE false)"
        )
        con.execute(
            """
            CREATE TEMP TABLE heirs AS
            WITH r AS (
                SELECT r.chunk_id, r.source, r.path, r.heading_path, COALESCE(a.attention_score, 0) AS score
                FROM removed r LEFT JOIN base.attention a USING (chunk_id)
            )
            SELECT f.chunk_id, arg_max(r.chunk_id, (r.score, r.chunk_id)) AS predecessor
            FROM fresh_only f JOIN r USING (source, path, heading_path)
            GROUP BY f.chunk_id
            """
        )
        # An heir matters only when its predecessor has usage state to pass on (attention, remembered questions,
        # related chunks) or a lineage of its own: otherwise re-chunking a corpus would record (and copy at every
        # later build) a lineage row for every chunk.
        stateful = [base_lineage] + [
            f"base.{table}"
            for table in ("attention", "attention_questions", "related_chunks")
            if con.execute(
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_catalog = 'base' AND table_name = ?",
                [table],
            ).fetchone()[0]
        ]
        con.execute(
            "DELETE FROM heirs WHERE predecessor NOT IN ("
            + " UNION ALL ".join(f"SELECT chunk_id FROM {t}" for t in stateful)
            + ")"
        )
        used = "(a.attention_score <> 0 OR a.last_breath_seen IS NOT NULL)"
        con.execute(
            f"""
            INSERT INTO attention
            SELECT a.chunk_id, a.attention_score, a.last_breath_seen FROM base.attention a
            WHERE {used} AND a.chunk_id NOT IN (SELECT chunk_id FROM removed)
            UNION ALL
            SELECT h.chunk_id, a.attention_score, a.last_breath_seen
            FROM heirs h JOIN base.attention a ON a.chunk_id = h.predecessor WHERE {used}
            """
        )
        con.execute(
            f"""
            INSERT INTO chunk_lineage
            SELECT l.chunk_id, l.predecessors FROM {base_lineage} l
            WHERE l.chunk_id NOT IN (SELECT chunk_id FROM removed)
            UNION ALL
            SELECT h.chunk_id, list_prepend(h.predecessor, COALESCE(pl.predecessors, []::VARCHAR[]))[1:10]
            FROM heirs h LEFT JOIN {base_lineage} pl ON pl.chunk_id = h.predecessor
            """
        )

    def _count_chunks(self, con, stats: dict[str, SourceStats]) -> None:
        """Per source: chunks unchanged, deleted, changed (in changed files) and new, from the change alone."""
        deleted = dict(con.execute("SELECT source, COUNT(*) FROM removed GROUP BY 1").fetchall())
        added = dict(con.execute("SELECT source, list(path) FROM fresh_only GROUP BY 1").fetchall())
        base_sources = (self.base_manifest or {}).get("sources", {})
        for source, st in stats.items():
            base_chunks = base_sources.get(source, {}).get("chunks", 0) if self.base_dir is not None else 0
            changed = set(st.changed_paths)
            paths = added.get(source) or []
            st.chunks_deleted = deleted.get(source, 0)
            st.chunks_unchanged = base_chunks - st.chunks_deleted
            st.chunks_changed = sum(1 for p in paths if p in changed)
            st.chunks_new = len(paths) - st.chunks_changed

    def _update_chroma(self, con, staged, rows, vectors) -> None:
        """Start from the base version's vector store, then upsert rebuilt chunks and delete the gone ones."""
        same_model = (self.base_manifest or {}).get("model", {}).get("id") == self.embedder.model_id
        client = open_vectors(staged, self.base_dir if same_model else None)
        if client.carried:
            gone = con.execute(
                "SELECT b.collection, b.chunk_id FROM base.chunks b LEFT JOIN chunks n "
                "ON n.chunk_id = b.chunk_id AND n.collection = b.collection WHERE n.chunk_id IS NULL"
            ).fetchall()
            carried_all = False
        else:
            gone = []
            carried_all = True
        try:
            wanted = {c for (c,) in con.execute("SELECT DISTINCT collection FROM chunks").fetchall()}
            existing = {c.name for c in client.list_collections()}
            chunk_collections = set((self.base_manifest or {}).get("collections", {}))
            for name in (existing & chunk_collections) - wanted:  # other steps' collections are theirs
                client.delete_collection(name)
            by_collection: dict[str, list[str]] = {}
            for collection, cid in gone:
                if collection in wanted:
                    by_collection.setdefault(collection, []).append(cid)
            for collection, ids in by_collection.items():
                delete(client.get_collection(collection), ids)
            if carried_all:
                rows, vectors = self._all_rows_with_vectors(con, rows, vectors)
            groups: dict[str, list[int]] = {}
            for i, row in enumerate(rows):
                groups.setdefault(row["collection"], []).append(i)
            for collection in wanted:
                col = client.get_or_create_collection(
                    collection, metadata={"hnsw:space": "cosine"}, embedding_function=None
                )
                idx = groups.get(collection, [])
                upsert(
                    col,
                    ids=[rows[j]["chunk_id"] for j in idx],
                    vectors=vectors[idx],
                    documents=[rows[j]["content"] for j in idx],
                    metadatas=[chroma_metadata(rows[j]) for j in idx],
                )
        finally:
            client.close()

    def _all_rows_with_vectors(self, con, rows, vectors):
        """Every chunk of the version with its vector (vector store rebuilt from scratch, via the cache)."""
        fresh = {r["chunk_id"] for r in rows}
        carried = [
            dict(zip(records.CHUNK_COLUMNS, r, strict=True))
            for r in con.execute(f"SELECT {', '.join(records.CHUNK_COLUMNS)} FROM chunks").fetchall()
            if r[0] not in fresh
        ]
        if not carried:
            return rows, vectors
        extra = self._vectors_for([(r["content"], r["heading_path"], r["embed_hash"]) for r in carried])
        return rows + carried, (np.concatenate([vectors, extra]) if len(rows) else extra)

    def _vectors_for(self, items: list[tuple[str, str, str]]) -> np.ndarray:
        """Vectors of (content, heading path JSON, embed hash) items: from the cache, computing any missing."""
        with EmbeddingCache(self.home.cache_dir, self.embedder.dim) as cache:
            found = cache.get_many([h for _, _, h in items])
            missing = {h: records.embed_text(c, json.loads(p)) for c, p, h in items if h not in found}
            if missing:
                log.warning("embedding cache lacks %d vectors of carried-over chunks; recomputing", len(missing))
                computed = dict(zip(missing, self.embedder.encode(list(missing.values())), strict=True))
                cache.put_many(computed)
                found.update(computed)
        if not items:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        return np.stack([found[h] for _, _, h in items])

    def _breath(self, opened: dict) -> Breath:
        return read_breath(self.config, {name: repo for name, (repo, _) in opened.items()})

    def _manifest(self, con, version_id, staged, stats, breath: Breath, computed, reused, failed) -> dict:
        now = iso(utc_now())
        # one scan of the chunk rows (and one of the files) for every count below
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
        files = dict(con.execute("SELECT source, COUNT(*) FROM parents GROUP BY 1").fetchall())
        skipped: dict[str, dict[str, int]] = {}
        for source, reason, n in con.execute(
            "SELECT source, reason, COUNT(*) FROM skipped_files GROUP BY 1, 2"
        ).fetchall():
            skipped.setdefault(source, {})[reason] = n
        total = sum(n for n, _ in per_source.values())
        sealed_total = sum(sealed for _, sealed in per_source.values())
        parents_total = sum(files.values())
        attention = attention_stats(con, HIGH_ATTENTION, total)
        base_sources = (self.base_manifest or {}).get("sources", {})
        sources = {}
        for src in self.config.sources:
            st = stats[src.name]
            if src.name in failed:
                if src.name in base_sources:
                    sources[src.name] = {**base_sources[src.name], "error": st.error}
                continue
            n, sealed = per_source.get(src.name, (0, 0))
            sources[src.name] = {
                "repo": str(src.repo), "ref": src.ref, "head_commit": st.head_commit, "collection": src.collection,
                "access": src.access, "files": files.get(src.name, 0), "chunks": n, "sealed_chunks": sealed,
                "skipped_files": skipped.get(src.name, {}), "config_fingerprint": self._fingerprint(src),
            }  # fmt: skip
        return {
            "version_id": version_id,
            "layout_version": LAYOUT_VERSION,
            "base_version": self.base,
            "created_at": now,
            "last_updated": now,
            "model": {"id": self.embedder.model_id, "dim": self.embedder.dim},
            "vector_store": vector_store_mode(self.config),
            "chunking": self.config.chunking,
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
            "governance": governance_status(total, 0.0, self.config.governance),
            "attention_stats": attention,
            "changes": {
                "embeddings_computed": computed,
                "embeddings_reused": reused,
                "unreadable_sources": {name: stats[name].error for name in failed},
                "per_source": {
                    name: {k: v for k, v in vars(st).items() if k not in ("changed_paths", "deleted_paths", "skipped")}
                    for name, st in stats.items()
                },
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


def vector_store_mode(config: SourcesConfig) -> str:
    """``none`` (vectors only in the retrieval snapshot), ``chroma`` (a persistent Chroma store in the version) or
    ``chroma-server`` (collections on the Chroma server named by ``CHROMA_HOST``)."""
    if not config.uses_chroma:
        return "none"
    return "chroma-server" if server_address() else "chroma"


def governance_status(total_chunks: int, size_mb: float, gov: Governance) -> dict[str, Any]:
    """The governance caps and whether a version respects them."""
    violations = []
    if total_chunks > gov.max_chunks:
        violations.append(f"{total_chunks} chunks exceed the cap of {gov.max_chunks}")
    if size_mb > gov.max_size_mb:
        violations.append(f"{size_mb} MB exceed the cap of {gov.max_size_mb} MB")
    return {
        "max_chunks": gov.max_chunks,
        "max_size_mb": gov.max_size_mb,
        "status": "exceeded" if violations else "ok",
        "violations": violations,
    }


def chroma_metadata(row: dict[str, Any]) -> dict[str, Any]:
    """The scalar metadata stored beside a vector (Chroma accepts str, int, float and bool, not None)."""
    meta: dict[str, Any] = {
        "source": row["source"],
        "collection": row["collection"],
        "access": row["access"],
        "path": row["path"],
        "seal_state": row["seal_state"],
        "type": row["type"],
        "parent_id": row["parent_id"],
        "commit": row["commit_sha"],
        "updated_at": row["updated_at"],
        "created_at": row["created_at"],
        "chunk_index": row["chunk_index"],
        "heading": " > ".join(json.loads(row["heading_path"])),
    }
    if row.get("domain"):
        meta.update({k: v for k, v in json.loads(row["domain"]).items() if v is not None})
    return meta
