"""Building a new index version from the configured git sources, incrementally.

For each source the files at its HEAD commit are compared, by blob id, with the files the current version
indexed (``plan``): unchanged files are carried over (``carry``: the new version names their rows in the base's
segments, nothing is copied), new and changed files are re-chunked (``rechunk``) into new segments of at most
about ``BuildSettings.segment_rows`` chunks, each written as soon as it is full (``flush``, ``livemem.version``) with
their vectors and BM25 postings, so a build's memory is bounded by a segment's, not the corpus; only text never
embedded before is embedded, and chunks of deleted files are dropped from the membership. The Chroma mirror (``chroma_mirror``)
and the manifest (``manifest``) follow. When no source has a new commit and nothing in the configuration changed,
nothing is built.

The result is a complete version directory in ``staging/``; publishing it is a separate step (``store``) that
runs only after the checks (``checks``) pass.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import duckdb

from livemem.errors import SourceError
from livemem.index.sentences import sentence_texts
from livemem.ingest.carry import CarryOver, carry_other_parts, record_change
from livemem.ingest.chroma_mirror import flushed_rows, update_chroma
from livemem.ingest.flush import SegmentFlusher, tick
from livemem.ingest.manifest import SourceStats, count_chunks, read_breath, version_manifest
from livemem.ingest.plan import Base, FilePlan, already_indexed, plan_source, source_fingerprint
from livemem.ingest.read import ExtractionBudget
from livemem.ingest.rechunk import chunk_batches
from livemem.ingest.segments_writer import finish_segments
from livemem.model.embedding import Embedder
from livemem.settings import BuildSettings
from livemem.sources.config import SourcesConfig
from livemem.sources.gitsource import GitSource
from livemem.version import PARTS, connect, use_parts
from livemem.version.staging import CHUNK_SCHEMA_SQL, governance_status
from livemem.version.store import TABLES, IndexHome, dir_size_mb, segments_mb, write_manifest
from livemem.version.vectors import require_chroma

log = logging.getLogger(__name__)

MAX_SKIP_REPORTS = 200  # per source and build: the files it could not index, each with its error


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


def build_version(
    config: SourcesConfig,
    home: IndexHome,
    embedder: Embedder,
    *,
    force: bool = False,
    commits: dict[str, str] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    settings: BuildSettings | None = None,
) -> BuildResult:
    """Stage a new version from the sources; returns what was done (``version_id`` None when nothing changed).

    ``commits`` pins sources to given commits instead of their configured refs (``verify --rebuild`` rebuilds
    exactly the commits a published version indexed). ``progress(what, done, total)`` hears how embedding goes
    (``livemem.ingest.progress.Progress`` turns it into lines with rate and time left). ``settings``: the build
    section the entry point read (worker processes, document limits); None: its defaults.
    """
    require_chroma(config)  # Chroma asked for but not installed: refused before anything is written
    home.ensure()
    with home.write_lock():
        home.clear_staging()
        if config.encoder or config.precision:  # index.encoder, index.precision
            embedder = embedder.with_encoder(config.encoder, config.precision)
        builder = _Builder(config, home, embedder, commits)
        builder.progress = progress
        builder.settings = settings or BuildSettings.defaults()
        return builder.run(force)


class _Builder:
    def __init__(
        self, config: SourcesConfig, home: IndexHome, embedder: Embedder, commits: dict[str, str] | None = None
    ) -> None:
        self.config = config
        self.commits = commits or {}
        self.home = home
        self.embedder = embedder
        self.timings: dict[str, float] = {}
        self.base = Base.current(home)
        self.parts = home.root / PARTS
        self.progress: Callable[[str, int, int], None] | None = None
        self.settings = BuildSettings.defaults()

    def _tick(self, name: str, since: float) -> float:
        return tick(self.timings, name, since)

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
            for name, st in stats.items():
                st.base_commit = self.base.sources.get(name, {}).get("head_commit")
            heads = {name: st.head_commit for name, st in stats.items()}
            if (
                not force
                and not any(s.error for s in stats.values())
                and already_indexed(self.base, self.config, self.embedder.model_id, heads)
            ):
                return BuildResult(
                    None, self.base.version,
                    f"no new commits: version {self.base.version} already indexes every source's HEAD",
                    stats, timings={"total_s": round(time.perf_counter() - t0, 3)},
                )  # fmt: skip
            version_id = self.home.new_version_id()
            manifest = self._stage(version_id, stats, opened)
        finally:
            for repo, _ in opened.values():
                repo.close()
        self.timings["total_s"] = round(time.perf_counter() - t0, 3)
        result = BuildResult(version_id, self.base.version, "staged", stats, timings=self.timings, manifest=manifest)
        result.embeddings_computed = manifest["changes"]["embeddings_computed"]
        result.embeddings_reused = manifest["changes"]["embeddings_reused"]
        return result

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
            con.execute(CHUNK_SCHEMA_SQL)
            if self.base.dir is not None:
                con.execute(f"ATTACH '{self.base.dir / TABLES}' AS base (READ_ONLY)")
                carry_other_parts(con, self.base.dir, staged)
            carry = CarryOver()
            plans, failed = self._plan(con, stats, opened, carry)
            t = time.perf_counter()
            carry.members(con, self.base)  # before any new segment is held: it copies the base's membership
            t = self._tick("carry_over_s", t)
            flusher = SegmentFlusher(
                con, self.parts, self.embedder, self.home.cache_dir, self.settings.segment_rows,
                self.settings.ann_min_rows, self._sentences, self.timings, self.progress,
            )  # fmt: skip
            skips = self._chunk(plans, stats, flusher)
            t = time.perf_counter()
            segments = finish_segments(
                con, self.parts, self.embedder.dim, self.timings, self.settings.ann_min_rows,
                self.settings.segment_rows,
            )  # fmt: skip
            t = self._tick("segment_s", t)
            record_change(con, skips, flusher.fresh_table(), self.base)
            count_chunks(con, stats, self.base)
            t = self._tick("tables_s", t)
            if self.config.uses_chroma:
                new_rows, vectors = flushed_rows(con, self.parts, flusher.written)
                update_chroma(
                    con, staged, new_rows, vectors, embedder=self.embedder, cache_dir=self.home.cache_dir,
                    base_dir=self.base.dir, base_manifest=self.base.manifest, server=self.config.chroma_server,
                )  # fmt: skip
                del new_rows, vectors
                t = self._tick("chroma_s", t)
            breath = read_breath(self.config, {name: repo for name, (repo, _) in opened.items()})
            manifest = version_manifest(
                con, version_id, self.config, self.embedder, self.base, stats, breath, flusher.computed,
                flusher.reused, failed,
            )  # fmt: skip
            manifest["segments"] = segments
        finally:
            con.close()
        for key, value in (self.base.manifest or {}).items():
            manifest.setdefault(key, value)  # sections other steps own (registry, gbim, ...)
        # the size cap is checked on every file but the manifest itself (written once: it hashes every file)
        manifest["governance"] = governance_status(
            manifest["total_chunks"], dir_size_mb(staged) + segments_mb(self.parts, segments),
            self.config.governance,
        )  # fmt: skip
        write_manifest(staged, manifest)
        return manifest

    def _sentences(self, rows: list[dict[str, Any]]) -> list[list[str]]:
        """The sentence texts of each new chunk row (none when ``index.sentences`` is off)."""
        if not self.config.sentences:
            return [[] for _ in rows]
        return [sentence_texts(r["content"], json.loads(r["heading_path"]), r["type"]) for r in rows]

    def _plan(
        self, con: duckdb.DuckDBPyConnection, stats: dict[str, SourceStats], opened: dict, carry: CarryOver
    ) -> tuple[list[FilePlan], list[str]]:
        """Plan each readable source (``carry`` learns what each plan keeps of the base); returns the plans and the
        sources that could not be read."""
        plans: list[FilePlan] = []
        failed: list[str] = []
        for src in self.config.sources:
            st = stats[src.name]
            carry.sources.append(src.name)
            if src.name not in opened:
                failed.append(src.name)  # unreadable: every row of it in the base is kept
                continue
            repo, head = opened[src.name]
            t = time.perf_counter()
            fingerprint = source_fingerprint(self.config, src, self.embedder.model_id)
            plan = plan_source(con, self.base, src, repo, head, fingerprint)
            st.files_new = len(plan.new)
            st.files_changed = len(plan.rebuilt) - len(plan.new)
            st.files_unchanged = plan.unchanged
            st.files_deleted = len(plan.deleted)
            st.changed_paths = plan.changed_paths
            st.deleted_paths = plan.deleted
            self._tick("git_list_s", t)
            carry.add(plan)
            plans.append(plan)
        return plans, failed

    def _chunk(
        self, plans: list[FilePlan], stats: dict[str, SourceStats], flusher: SegmentFlusher
    ) -> list[dict[str, Any]]:
        """Re-chunk each plan's rebuilt files into ``flusher`` (which writes a segment whenever it holds enough rows,
        and the rest at the end); returns the skipped-file rows. Every source's documents share one extraction
        budget (``LIVEMEM_DOCUMENT_BUDGET_S``)."""
        skips: list[dict[str, Any]] = []
        budget = ExtractionBudget(self.settings.document_budget_s)
        for plan in plans:
            st = stats[plan.source.name]
            t, flushing = time.perf_counter(), flusher.busy_s
            for batch in chunk_batches(plan, self.config, self.embedder.model_id, self.settings, budget):
                for row in batch.skipped:
                    st.skipped[row["reason"]] += 1
                    if "error" in row and len(st.skip_reports) < MAX_SKIP_REPORTS:
                        st.skip_reports.append({k: row[k] for k in ("path", "reason", "extractor", "error")})
                st.truncated_files += len(batch.truncated)
                skips += batch.skipped
                flusher.add(batch.rows, batch.parents, batch.terms)
            # reading and chunking, less the segments flushed meanwhile (their time is in embed_s / segment_s)
            tick(self.timings, "read_chunk_s", t + flusher.busy_s - flushing)
        flusher.flush()
        return skips
