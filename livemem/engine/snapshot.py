"""Reading a published index version, read-only, for retrieval: the ``Snapshot`` and its loader.

A ``Snapshot`` is one complete version loaded for retrieval: the rows the version holds of each of its segments
(``livemem.version``: chunk rows, vectors, BM25 postings), in segment order, with the version's own attention from
its ``tables.duckdb`` (opened read-only). A request takes one snapshot and uses only it, so a response always
comes from one complete version. ``livemem.engine.versions.IndexReader.snapshot()`` checks ``CURRENT`` and loads a
newly published version while other requests keep using the one they hold; segments already loaded for the previous
version are reused (``SEGMENTS``, a ``SegmentCache``), so a switch costs what the new version adds. Chroma is never
opened.

Before a version is used its own files are checked against the sizes and SHA-256 sums its manifest records
(``verify_files``) and each segment against the hashes its name commits to, once, by the first worker that loads
it: that worker writes the segment's **serving copy** (``livemem.version.mapped``: plain arrays), which every worker
of the machine maps, so N workers share one copy of rows, vectors and postings in the page cache and a worker holds
no per-row objects (``Rows`` reads a row when a response needs it). The index's own files are never mapped, so a
file damaged on disk later cannot crash a worker: a damaged version is a 503 naming it, and a worker keeps the
version it already holds. Messages for callers name versions and files relative to the version, never server paths
(those are logged).

How a snapshot is read and searched is its ``EngineConfig`` (``livemem.settings``): the loader takes it from the home
(``IndexHome.engine``, which the entry point sets from ``EngineConfig.from_env()``) or as ``load_snapshot_at(engine=)``
(default: ``EngineConfig.defaults()``, never the environment), maps the segments' serving copies where it says and
hands it to the snapshot's ``DenseRows`` (``Snapshot.engine``). Two snapshots of one process may hold different ones.
"""

from __future__ import annotations

import hashlib
import json
import logging
import operator
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import duckdb
import numpy as np

from livemem.engine.segments import Segment, SegmentCache
from livemem.errors import LivingMemoryError
from livemem.geo.home import Home, home_of
from livemem.index import records
from livemem.index.dense import DenseRows
from livemem.index.postings import Postings, heading_text
from livemem.index.sparse import HEADINGS_WEIGHT, Pieces, SparseScorer
from livemem.settings import EngineConfig
from livemem.version import connect, mapped, parts_dir
from livemem.version.mapped import Table
from livemem.version.schema import LAYOUT_VERSION
from livemem.version.signals import MemorySignals, question_memory, read_signals
from livemem.version.store import CHROMA, MANIFEST, TABLES, IndexHome

log = logging.getLogger(__name__)

DOMAIN_FIELDS = ("county", "dataset", "worldview_id", "local_resource_id")
PARENT_FIELDS = (
    "parent_id", "source", "collection", "access", "path", "commit_sha", "timestamp", "created_at", "updated_at",
    "seal_state", "type", "size", "truncated", "chunk_count", "content",
)  # fmt: skip
MATERIALIZE_HINT = "run `make materialize` to build and publish a new version"
SEGMENTS = SegmentCache()  # shared by the readers of this process


class IndexUnavailable(LivingMemoryError):
    """No usable index version: nothing published yet, or the published version cannot be read."""


def parse_time(value: str | None) -> float:
    """Seconds since the epoch of an ISO 8601 time (NaN when missing or unreadable)."""
    if not value:
        return float("nan")
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return float("nan")
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return ts.timestamp()


def breath_number(phase: str | None) -> float:
    """The n of a breath phase ``Δn`` (NaN for none)."""
    if not phase:
        return float("nan")
    digits = "".join(ch for ch in phase if ch.isdigit())
    return float(digits) if digits else float("nan")


@dataclass(eq=False)
class Snapshot:
    """One published version, loaded for retrieval. Immutable once built; shared by concurrent requests."""

    version_id: str
    path: Path
    manifest: dict[str, Any]
    ids: Sequence[str]  # chunk id of each row (``ChunkIds``)
    dense: DenseRows
    sparse: SparseScorer | None
    rows: Rows
    columns: Mapping[str, np.ndarray]  # per row, by name (``Columns``)
    row_of: Mapping[str, int]  # chunk id -> row (``RowOf``)
    access_of: dict[str, str]
    # attention, last breath, related chunks and question memory, read with the version (livemem.version.signals)
    signals: MemorySignals = field(default_factory=MemorySignals.empty)
    loaded_at: float = field(default_factory=time.time)
    sparse_levels: dict[frozenset[str], LevelSparse] = field(default_factory=dict)
    segments: tuple[str, ...] = ()
    # a set of collections' mask and its rows (read-only; see retrieval.allowed_rows)
    collection_masks: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    _con: duckdb.DuckDBPyConnection | None = None
    _sparse_lock: threading.Lock = field(default_factory=threading.Lock)
    sparse_parts: list[tuple[Segment, np.ndarray]] = field(default_factory=list)  # segments, their version rows
    _headings: SparseScorer | None = None
    _headings_lock: threading.Lock = field(default_factory=threading.Lock)
    _parents: dict[str, tuple[Table, int]] | None = None  # parent_id -> its row in a segment's serving copy
    _parents_lock: threading.Lock = field(default_factory=threading.Lock)
    _parent_segments: list[Segment] = field(default_factory=list)  # segments ``_parents`` reads
    held_pairs: tuple[tuple[str | None, str | None], ...] = ()  # the distinct (collection, access) of its rows

    @property
    def size(self) -> int:
        return len(self.ids)

    @property
    def engine(self) -> EngineConfig:
        """The engine config this snapshot was loaded with (its ``DenseRows.config``): its scans' knobs and where its
        serving copies are."""
        return self.dense.config

    def with_engine(self, engine: EngineConfig) -> Snapshot:
        """The same loaded version (the same segments, columns and connection: close only one) searched under
        ``engine``'s dense knobs, for a benchmark comparing settings in one process; the serving copies stay those
        it was loaded from, so ``engine.serving_cache`` must be this snapshot's."""
        if engine.serving_cache != self.engine.serving_cache:
            raise ValueError("with_engine changes the search, not where the serving copies are: load it again")
        return replace(self, dense=self.dense.with_config(engine))

    def damaged_segments(self) -> list[Segment]:
        """The segments whose mapped serving copy is no longer the size it was verified at (``Segment.intact``:
        one ``fstat`` each); reading them could end the process with SIGBUS."""
        held = {id(s): s for s, _ in self.sparse_parts} | {id(s): s for s in self._parent_segments}
        return [s for s in held.values() if not s.intact()]

    @property
    def model_id(self) -> str:
        return self.manifest.get("model", {}).get("id", "")

    @property
    def breath_phase(self) -> str | None:
        return (self.manifest.get("breath_at_update") or {}).get("phase")

    @cached_property
    def home(self) -> Home:
        """The state(s) this version covers and its name (the manifest's ``home``; West Virginia for a version
        published before homes were recorded: ``livemem.geo.home``)."""
        return home_of(self.manifest.get("home"))

    def collections_for(self, access_levels: frozenset[str]) -> list[str]:
        """The collections of this version whose access level is one of ``access_levels``, sorted."""
        return sorted(c for c, a in self.access_of.items() if a in access_levels)

    @cached_property
    def access_levels(self) -> frozenset[str]:
        """The access levels of this version's chunks (from ``held_pairs``: no pass over every row)."""
        levels = frozenset(access for _, access in self.held_pairs) if self.size else frozenset()
        return cast(frozenset[str], levels)  # ``access`` is NOT NULL in the chunks table

    def sparse_for(self, levels: frozenset[str]) -> LevelSparse | None:
        """BM25 scored with the term statistics of exactly the chunks of access ``levels`` (so scores never depend
        on chunks of other levels)."""
        wanted = levels & self.access_levels
        if not wanted or self.sparse is None:
            return None
        found = self.sparse_levels.get(wanted)
        if found is None:
            with self._sparse_lock:
                found = self.sparse_levels.get(wanted)
                if found is None:
                    corpus = np.isin(self.columns["access"], np.array(sorted(wanted), dtype=object))
                    found = self.sparse_levels[wanted] = LevelSparse(self.sparse, corpus, self.headings)
        return found

    def headings(self) -> SparseScorer:
        """BM25 over the chunks' heading paths (``mode: sparse``'s second field), built at the first call from each
        segment's ``heading_postings``."""
        if self._headings is None:
            with self._headings_lock:  # not the sparse lock: hybrid queries never wait for this build
                if self._headings is None:
                    parts = [(heading_postings(segment), positions) for segment, positions in self.sparse_parts]
                    self._headings = SparseScorer(parts, self.size)
        return self._headings

    def record(self, row: int) -> dict[str, Any]:
        """The chunk record (``schemas/chunk.schema.json``) of the chunk at ``row``."""
        return records.row_to_record(
            self.rows[row],
            attention=float(self.signals.attention[row]),
            last_breath_seen=self.signals.last_breath[row],
        )

    def parents(self, parent_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Parent documents (whole files) by id: rows of the segments' serving copies (``Segment.parents``), found
        through the version's parent members (read once per snapshot, at the first call); from the version's
        tables when a segment has no such rows."""
        if not parent_ids or self._con is None:
            return {}
        located = self._parent_rows()
        if located is not None:
            found = {}
            for parent_id in parent_ids:
                hit = located.get(parent_id)
                if hit is not None:
                    row = hit[0].row(hit[1])
                    found[parent_id] = {name: row[name] for name in PARENT_FIELDS}
                    if row["truncated"] is not None:  # kept as 0 / 1 in the copy
                        found[parent_id]["truncated"] = bool(row["truncated"])
            return found
        placeholders = ", ".join("?" for _ in parent_ids)
        rows = self._fetch(
            f"SELECT {', '.join(PARENT_FIELDS)} FROM parents WHERE parent_id IN ({placeholders})", parent_ids
        )
        return {r[0]: dict(zip(PARENT_FIELDS, r, strict=True)) for r in rows}

    def _fetch(self, sql: str, parameters: list | None = None, columns: bool = False) -> Any:
        """The rows of ``sql`` on the version's tables (``columns``: as numpy columns), on a cursor of their own; a
        version whose file changed on disk since it was verified is an ``IndexUnavailable`` saying so."""
        cursor = cast(duckdb.DuckDBPyConnection, self._con).cursor()  # open until ``close``
        try:
            result = cursor.execute(sql, parameters)
            return result.fetchnumpy() if columns else result.fetchall()
        except duckdb.Error as exc:
            log.error("index version %s: tables.duckdb unreadable at %s: %s", self.version_id, self.path, exc)
            raise IndexUnavailable(
                f"index version {self.version_id} is damaged (tables.duckdb can no longer be read); "
                f"{MATERIALIZE_HINT}, or roll CURRENT back to an earlier version"
            ) from None
        finally:
            cursor.close()

    def _parent_rows(self) -> dict[str, tuple[Table, int]] | None:
        """parent_id -> (the parents table of its segment, its row), for the parents this version holds; None when
        a segment's serving copy has no parents (then ``parents`` reads the version's tables)."""
        if self._parents is not None:
            return self._parents or None
        with self._parents_lock:
            if self._parents is None:
                members = self._fetch("SELECT segment, seg_row FROM parent_members", columns=True)
                segments = np.asarray(members["segment"], dtype=object)
                rows = np.asarray(members["seg_row"], dtype=np.int64)
                located: dict[str, tuple[Table, int]] = {}
                for segment_id in dict.fromkeys(segments.tolist()):
                    segment = SEGMENTS.get(parts_dir(self.path), segment_id, self.engine.serving_cache)
                    self._parent_segments.append(segment)
                    table = segment.parents
                    if table is None:
                        located = {}  # an empty map: the tables are read instead
                        break
                    held = rows[segments == segment_id]
                    ids = table.column("parent_id")[held].tolist()
                    located.update(zip(ids, ((table, int(r)) for r in held.tolist()), strict=True))
                self._parents = located
        return self._parents or None

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


@dataclass
class LevelSparse:
    """BM25 over a snapshot with the statistics of the rows in ``corpus`` (one set of access levels). ``headings``
    gives the scorer of the heading-path field (built on first use; None: no field). The corpus's statistics and
    its terms' document frequencies are computed once and kept (the snapshot and the corpus never change)."""

    scorer: SparseScorer
    corpus: np.ndarray
    headings: Callable[[], SparseScorer] | None = None
    dfs: dict[str, int] = field(default_factory=dict)

    @cached_property
    def stats(self) -> tuple[int, float, bool]:
        return self.scorer.corpus_stats(self.corpus)

    def scores(self, query: str) -> np.ndarray:
        """BM25 of the chunk text (hybrid's BM25 side)."""
        return self.scorer.scores(query, self.corpus, self.dfs, self.stats)

    def ranked(self, query: str, allowed: np.ndarray | None, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Hybrid's BM25 list: the best ``k`` rows of ``allowed`` (None: every row) scoring above 0, best first,
        and every row's BM25 (``SparseScorer.ranked``)."""
        return self.scorer.ranked(query, self.corpus, allowed, k, self.dfs, self.stats)

    def split(self, query: str) -> Pieces:
        """Hybrid's BM25 in pieces that threads share (``SparseScorer.split``); ``Pieces.ranked`` is ``ranked``."""
        return self.scorer.split(query, self.corpus, self.dfs, self.stats)

    def field_scores(self, query: str) -> np.ndarray:
        """``mode: sparse``: BM25 of the chunk text plus ``HEADINGS_WEIGHT`` × BM25 of its heading path (float32;
        zero outside the corpus)."""
        body = self.scores(query)
        if self.headings is None:
            return body
        return body + np.float32(HEADINGS_WEIGHT) * self.headings().scores(query, self.corpus)


def heading_postings(segment: Segment) -> Postings:
    """The postings of a segment's heading-path field (``postings.heading_text`` of each row), derived from its rows
    once per segment (segments are immutable and shared by the versions that keep them)."""
    found = segment.derived.get("heading_postings")
    if found is None:
        # each distinct heading path tokenized once (a section's chunks share theirs), then gathered per row
        codes = np.asarray(segment.table.codes("heading_path"), dtype=np.int64)
        texts = [heading_text(json.loads(h)) if h else "" for h in segment.table.dictionary("heading_path")]
        stems, ids, counts = Postings.tokenize(texts)
        starts = np.concatenate([[0], np.cumsum(counts)])
        counts = counts[codes]  # codes -1 (NULL) read the last text: the empty one
        first = np.repeat(starts[codes] - (np.cumsum(counts) - counts), counts)
        found = segment.derived["heading_postings"] = Postings.merge(
            [(stems, ids[first + np.arange(first.size)], counts)]
        )
    return found


def load_snapshot(home: IndexHome, version_id: str) -> Snapshot:
    """Load a published version for retrieval under the home's engine config (``IndexHome.engine``); raises
    IndexUnavailable saying what is wrong and what to run."""
    return load_snapshot_at(home.version_dir(version_id), version_id, home.engine)


def load_snapshot_at(path: Path, version_id: str | None = None, engine: EngineConfig | None = None) -> Snapshot:
    """Load the version in directory ``path`` (published or staged) for retrieval, under ``engine`` (the caller's
    ``EngineConfig``; None: ``EngineConfig.defaults()``): its segments mapped from the serving copies there, its
    scans configured by it."""
    version_id = version_id or path.name
    engine = engine if engine is not None else EngineConfig.defaults()
    con = None
    try:
        manifest = _read_manifest(path, version_id)
        con = connect(path)
        loaded = _read_parts(path, manifest, con, engine)
    except IndexUnavailable:
        if con is not None:
            con.close()
        raise
    except Exception as exc:  # any unreadable part makes the whole version unusable
        if con is not None:
            con.close()
        log.error("index version %s at %s cannot be read: %r", version_id, path, exc)
        raise IndexUnavailable(
            f"index version {version_id} cannot be read ({type(exc).__name__}: {without_paths(str(exc), path)}); "
            f"{MATERIALIZE_HINT}, or roll CURRENT back to an earlier version"
        ) from exc
    snap = _snapshot(version_id, path, manifest, con, loaded)
    _HELD.add(snap)
    return snap


@dataclass
class _Parts:
    """What a version's segments and tables give its snapshot (``_read_parts``)."""

    order: list[str]  # the segments the manifest lists, in order
    segments: list[tuple[Segment, np.ndarray]]  # each segment holding rows of the version, with the rows it holds
    sparse_parts: list[tuple[Segment, np.ndarray]]  # each of those segments with where its rows go (-1: not held)
    ids: ChunkIds
    columns: Columns
    dense: DenseRows
    row_of: RowOf
    signals: MemorySignals
    held_pairs: list[tuple[str | None, str | None]]
    sparse: SparseScorer | None


def _read_manifest(path: Path, version_id: str) -> dict[str, Any]:
    """The manifest of the version in ``path``, after checking its layout and its files (``verify_files``)."""
    manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    if manifest.get("layout_version") != LAYOUT_VERSION:
        raise IndexUnavailable(
            f"index version {version_id} was written in an older layout "
            f"({manifest.get('layout_version')}, this release reads {LAYOUT_VERSION}); {MATERIALIZE_HINT}"
        )
    verify_files(path, manifest)
    return manifest


def _read_parts(path: Path, manifest: dict[str, Any], con: duckdb.DuckDBPyConnection, engine: EngineConfig) -> _Parts:
    """Load the segments the version holds (keeping only those the held snapshots use) and read its rows: chunk ids,
    columns, vectors, the id map, its signals and BM25."""
    parts = parts_dir(path)
    order = [e["id"] for e in manifest.get("segments") or []]
    segments, gone = _held_segments(con, parts, order, engine)
    SEGMENTS.retain(parts, set(order) | _still_held())
    _prune_copies(parts, engine.serving_cache)
    sparse_parts, size = _row_positions(segments)
    # a segment held whole is read as it is (``None``: every row, in order), else at the rows held
    whole = [(segment, None if seg_rows.size == segment.size else seg_rows) for segment, seg_rows in segments]
    ids = ChunkIds([(segment.chunk_ids, seg_rows) for segment, seg_rows in whole])
    columns = Columns([(_segment_columns(segment), seg_rows) for segment, seg_rows in whole], size)
    dense, dim = _dense_rows(manifest, segments, sparse_parts, engine)
    row_of = RowOf([(segment_rows(segment), positions) for segment, positions in sparse_parts], ids)
    twice = held_twice(sparse_parts, row_of)
    if twice:
        raise ValueError(f"the version holds {twice} chunk ids twice")
    signals = _version_signals(con, path, manifest, ids, row_of, columns, dim)
    held_pairs = _held_pairs([(segment, gone.get(segment.id)) for segment, _ in segments])
    sparse = SparseScorer([(s.postings, positions) for s, positions in sparse_parts], len(ids)) if ids else None
    return _Parts(order, segments, sparse_parts, ids, columns, dense, row_of, signals, held_pairs, sparse)


def _deleted_rows(con: duckdb.DuckDBPyConnection) -> dict[str, np.ndarray]:
    """Per segment, its rows the version has deleted (``chunk_deletes``), sorted."""
    deletes = con.execute("SELECT segment, seg_row FROM chunk_deletes ORDER BY segment, seg_row").fetchnumpy()
    deleted: dict[str, np.ndarray] = {}
    if len(deletes["seg_row"]):
        names, starts = np.unique(np.asarray(deletes["segment"], dtype=object), return_index=True)
        rows = np.asarray(deletes["seg_row"], dtype=np.int64)
        for name, a, b in zip(names.tolist(), starts.tolist(), [*starts[1:].tolist(), rows.size], strict=True):
            deleted[name] = rows[a:b]
    return deleted


def _held_segments(
    con: duckdb.DuckDBPyConnection, parts: Path, order: list[str], engine: EngineConfig
) -> tuple[list[tuple[Segment, np.ndarray]], dict[str, np.ndarray]]:
    """The segments of ``order`` that hold rows of the version, each loaded (``SEGMENTS``) with the rows it holds,
    and per segment its rows the version does not hold."""
    # the rows held of each segment: all of them but the deleted ones (``chunk_members``, computed from the
    # small membership tables rather than read back row by row: a worker switch at 1M rows)
    held = dict(con.execute("SELECT segment, chunks FROM held_segments").fetchall())
    unknown = set(held) - set(order)
    if unknown:
        raise ValueError(f"held_segments names segments the manifest does not list: {sorted(unknown)[:3]}")
    deleted = _deleted_rows(con)
    segments = []
    gone: dict[str, np.ndarray] = {}  # per segment, its rows the version does not hold
    for s in order:
        if s not in held:
            continue
        segment = SEGMENTS.get(parts, s, engine.serving_cache)
        if int(held[s]) != segment.size:
            raise ValueError(f"held_segments records {held[s]} rows of {s}, which has {segment.size}")
        kept = np.arange(segment.size, dtype=np.int64)
        if s in deleted:
            keep = np.ones(segment.size, dtype=bool)
            keep[deleted[s][(deleted[s] >= 0) & (deleted[s] < segment.size)]] = False
            kept, gone[s] = np.flatnonzero(keep), np.flatnonzero(~keep)
        if kept.size:  # a segment none of whose rows is held holds nothing of this version
            segments.append((segment, kept))
    return segments, gone


def _row_positions(segments: list[tuple[Segment, np.ndarray]]) -> tuple[list[tuple[Segment, np.ndarray]], int]:
    """Each segment with the snapshot row of each of its rows (-1: not held), in segment order, and the number of
    rows the snapshot holds."""
    sparse_parts = []
    offset = 0
    for segment, seg_rows in segments:
        if seg_rows.size and int(seg_rows[-1]) >= segment.size:
            raise ValueError(f"chunk_members names rows beyond the {segment.size} of {segment.id}")
        positions = np.full(segment.size, -1, dtype=np.int64)
        positions[seg_rows] = np.arange(offset, offset + seg_rows.size)
        sparse_parts.append((segment, positions))
        offset += seg_rows.size
    return sparse_parts, offset


def _dense_rows(
    manifest: dict[str, Any],
    segments: list[tuple[Segment, np.ndarray]],
    sparse_parts: list[tuple[Segment, np.ndarray]],
    engine: EngineConfig,
) -> tuple[DenseRows, int]:
    """The snapshot's vectors under ``engine`` (packed for the first stage now) and their dimension."""
    dim = int(manifest.get("model", {}).get("dim") or (segments[0][0].dense.shape[1] if segments else 384))
    dense = DenseRows(
        [(segment.dense, seg_rows) for segment, seg_rows in segments],
        dim,
        [s.sentences for s, _ in segments],
        [s.graph for s, _ in segments],
        # the first part starts at row 0: its segment rows' snapshot positions are their positions in the part
        {0: sparse_parts[0][1]} if sparse_parts else None,
        config=engine,
    )
    dense.prepare()  # new segments packed for the first stage (``livemem.index.scan``), now, not on a first query
    return dense, dim


def _version_signals(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    manifest: dict[str, Any],
    ids: ChunkIds,
    row_of: RowOf,
    columns: Columns,
    dim: int,
) -> MemorySignals:
    """The version's attention, last breath, related chunks and question memory (read at its first use), with the
    ``attention`` and ``breath`` columns added to ``columns``."""
    model_id = manifest.get("model", {}).get("id", "")
    signals = read_signals(  # the question memory: read at its first use, once
        con,
        ids,
        row_of,
        lambda: question_memory(path / TABLES, manifest, row_of, columns["parent_id"], dim, model_id),
    )
    columns["attention"] = signals.attention  # a filter column too (``min_attention``)
    columns["breath"] = np.full(len(ids), np.nan)  # parsed for the few rows with a last breath only
    for row in signals.breathed.tolist():
        columns["breath"][row] = breath_number(signals.last_breath[row])
    return signals


def _snapshot(
    version_id: str, path: Path, manifest: dict[str, Any], con: duckdb.DuckDBPyConnection, loaded: _Parts
) -> Snapshot:
    """The snapshot of what ``_read_parts`` read, holding ``con`` (the version's tables)."""
    access_of = {name: info.get("access", "public") for name, info in manifest.get("collections", {}).items()}
    for collection, access in loaded.held_pairs:
        access_of.setdefault(collection, access)
    return Snapshot(
        version_id=version_id,
        path=path,
        manifest=manifest,
        ids=loaded.ids,
        dense=loaded.dense,
        sparse=loaded.sparse,
        rows=Rows([(segment.table, seg_rows) for segment, seg_rows in loaded.segments]),
        columns=loaded.columns,
        row_of=loaded.row_of,
        access_of=access_of,
        signals=loaded.signals,
        segments=tuple(loaded.order),
        sparse_parts=loaded.sparse_parts,
        _con=con,
        held_pairs=tuple(loaded.held_pairs),
    )


class ChunkIds(Sequence[str]):
    """A snapshot's chunk ids in row order, read from its segments' ``chunk_ids`` at the rows it holds of each
    (``None``: all of them), not copied into a list per version (a worker switch at 1M rows); equal to a list of
    the same ids."""

    def __init__(self, parts: list[tuple[np.ndarray, np.ndarray | None]]) -> None:
        self.parts = parts
        sizes = [int(ids.size if rows is None else rows.size) for ids, rows in parts]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.size = int(self.offsets[-1])

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, row):  # type: ignore[override]
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(self.size))]
        row = operator.index(row)
        if row < 0:
            row += self.size
        if not 0 <= row < self.size:
            raise IndexError(f"row {row} of {self.size}")
        part = 0 if len(self.parts) == 1 else int(np.searchsorted(self.offsets, row, side="right")) - 1
        ids, rows = self.parts[part]
        local = row - int(self.offsets[part])
        return ids[local if rows is None else rows[local]]

    def __iter__(self) -> Iterator[str]:
        for ids, rows in self.parts:
            count = ids.size if rows is None else rows.size
            for start in range(0, count, 65536):  # a block of ids at a time, not a list of every one
                end = min(start + 65536, count)
                yield from (ids[start:end] if rows is None else ids[rows[start:end]]).tolist()

    def tolist(self) -> list[str]:
        return list(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ChunkIds | list | tuple):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ChunkIds({self.size} ids)"


class Columns(Mapping[str, np.ndarray]):
    """A snapshot's per-row columns by name (``_COLUMN_KINDS``, then the version's own: ``attention``,
    ``breath``), each gathered from its segments' columns (``_segment_columns``) at its first use and kept for
    the snapshot: a worker switch copies no column, and a request reads only those it filters or scores on. A
    snapshot holding one segment whole reads that segment's arrays themselves (shared, read-only)."""

    def __init__(self, parts: list[tuple[dict[str, np.ndarray], np.ndarray | None]], size: int) -> None:
        self.parts = parts  # (a segment's columns, the segment rows the snapshot holds, in order; None: all)
        self.size = size
        self._found: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def __setitem__(self, name: str, values: np.ndarray) -> None:
        """A column of the version's own (attention, breath), given whole."""
        self._found[name] = values

    def __getitem__(self, name: str) -> np.ndarray:
        found = self._found.get(name)
        if found is None:
            kind = _COLUMN_KINDS[name]  # KeyError: no such column
            with self._lock:
                found = self._found.get(name)
                if found is None:
                    found = self._found[name] = self._gather(name, kind)
        return found

    def _gather(self, name: str, kind: type) -> np.ndarray:
        if not self.parts:
            return np.zeros(0, dtype=kind)
        if len(self.parts) == 1 and self.parts[0][1] is None:
            return self.parts[0][0][name]
        out = np.empty(self.size, dtype=self.parts[0][0][name].dtype)
        offset = 0
        for columns, rows in self.parts:
            values = columns[name]
            count = values.size if rows is None else rows.size
            if rows is None:
                out[offset : offset + count] = values
            else:  # rows are within the segment (checked by load_snapshot_at): no bounds buffering
                np.take(values, rows, out=out[offset : offset + count], mode="clip")
            offset += count
        return out

    def __iter__(self) -> Iterator[str]:
        yield from _COLUMN_KINDS
        yield from (name for name in self._found if name not in _COLUMN_KINDS)

    def __len__(self) -> int:
        return len(_COLUMN_KINDS) + sum(name not in _COLUMN_KINDS for name in self._found)

    def __contains__(self, name: object) -> bool:
        return name in _COLUMN_KINDS or name in self._found


def _held_pairs(parts: list[tuple[Segment, np.ndarray | None]]) -> list[tuple[str | None, str | None]]:
    """The distinct (collection, access) of the rows a snapshot holds, from each segment's counts per pair (once
    per segment) less those of its rows not held (``None``: none), in code order."""
    found: dict[tuple[str | None, str | None], None] = {}
    for segment, gone in parts:
        pair, counts, collections, levels = _segment_pairs(segment)
        if gone is not None and gone.size:
            counts = counts - np.bincount(pair[gone], minlength=counts.size)
        width = levels.size  # codes are stored + 1: NULL (-1) is 0, read as the dictionaries' last value, None
        for code in np.flatnonzero(counts > 0).tolist():
            found.setdefault((collections[code // width - 1], levels[code % width - 1]), None)
    return list(found)


def _segment_pairs(segment: Segment) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row of a segment its (collection, access) pair's code, the rows per code, and the two dictionaries
    (``Table.dictionary``: values, then None); computed once per segment and process."""
    found = segment.derived.get("pairs")
    if found is None:
        collections, levels = segment.table.dictionary("collection"), segment.table.dictionary("access")
        pair = (np.asarray(segment.table.codes("collection"), dtype=np.int64) + 1) * levels.size + (
            np.asarray(segment.table.codes("access"), dtype=np.int64) + 1
        )
        counts = np.bincount(pair, minlength=collections.size * levels.size)
        found = segment.derived["pairs"] = (pair, counts, collections, levels)
    return found


def segment_rows(segment: Segment) -> dict[str, int]:
    """A segment's chunk id -> its row, built once per segment per process (segments are immutable and shared by
    the versions that hold them: a worker switching versions builds it only for the segments it adds)."""
    found = segment.derived.get("row_of")
    if found is None:
        found = {cid: i for i, cid in enumerate(segment.chunk_ids.tolist())}
        segment.derived["row_of"] = found
    return found


def shared_rows(a: Segment, b: Segment) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``a`` and of ``b`` that hold the same chunk ids (none in a sound home: a chunk id names one
    text of one file at one commit), found once per pair of segments and process (segments are immutable): the
    smaller one's ids are looked up in the larger one's map. Two 1M-row segments: ≈ 0.6 s, once."""
    small, large = sorted((a, b), key=lambda s: (s.size, s.id))
    cache = small.derived.setdefault("shared_rows", {})
    found = cache.get(large.id)
    if found is None:
        other = segment_rows(large)
        pairs = [(row, r) for cid, row in segment_rows(small).items() if (r := other.get(cid)) is not None]
        found = cache[large.id] = (
            np.array([p for p, _ in pairs], dtype=np.int64),
            np.array([q for _, q in pairs], dtype=np.int64),
        )
    return found if small is a else (found[1], found[0])


def held_twice(parts: list[tuple[Segment, np.ndarray]], row_of: RowOf) -> int:
    """How many chunk ids a snapshot holds more than once (0 for a sound version). ``parts``: each segment with
    where the snapshot puts its rows (-1: not held). Across segments from ``shared_rows`` (a switch looks up only the
    ids of the segments it adds: at 2M chunks in two segments, looking up one's ids in the other's map on every
    switch took 1.8 s); within a segment (its map smaller than its rows) by ``RowOf.repeated``."""
    if any(len(segment_rows(segment)) < positions.size for segment, positions in parts):
        return row_of.repeated()
    twice = 0
    for i, (a, held_a) in enumerate(parts):
        for b, held_b in parts[i + 1 :]:
            rows_a, rows_b = shared_rows(a, b)
            if rows_a.size:
                twice += int(np.count_nonzero((held_a[rows_a] >= 0) & (held_b[rows_b] >= 0)))
    return twice


class RowOf(Mapping[str, int]):
    """Chunk id -> snapshot row, read through the segments' own maps (``segment_rows``) and where the snapshot
    puts each segment row (``positions``: -1 for a row it does not hold): no map of every row per version."""

    def __init__(self, parts: list[tuple[dict[str, int], np.ndarray]], ids: Sequence[str]) -> None:
        self.parts = parts
        self.ids = ids

    def get(self, key: str, default: Any = None) -> Any:
        for rows, positions in self.parts:
            row = rows.get(key)
            if row is not None and positions[row] >= 0:
                return int(positions[row])
        return default

    def __getitem__(self, key: str) -> int:
        row = self.get(key)
        if row is None:
            raise KeyError(key)
        return row

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def repeated(self) -> int:
        """How many chunk ids the snapshot holds more than once (0 for a sound version): within a segment when its
        map is smaller than its rows, else across segments (looked up from all but the largest part)."""
        if any(len(rows) < positions.size for rows, positions in self.parts):
            return len(self.ids) - len(set(self.ids))
        held = [int(np.count_nonzero(positions >= 0)) for _, positions in self.parts]
        largest = int(np.argmax(held)) if held else 0
        twice = 0
        for p, (rows, positions) in enumerate(self.parts):
            if p == largest:
                continue
            for cid, row in rows.items():
                if positions[row] < 0:
                    continue
                for q, (other, where) in enumerate(self.parts):
                    if q != p and (q > p or q == largest) and (r := other.get(cid)) is not None and where[r] >= 0:
                        twice += 1
        return twice


_HELD: weakref.WeakSet[Snapshot] = weakref.WeakSet()  # snapshots alive in this process: their segments stay loaded


def _prune_copies(parts: Path, serving_cache: Path | None) -> None:
    """Remove serving copies of segments gone from ``parts`` (the build removes those in the home's own cache;
    this covers a cache elsewhere, ``LIVEMEM_SERVING_CACHE``)."""
    try:
        mapped.prune(mapped.cache_root(parts, serving_cache), parts)
    except OSError as exc:
        log.info("serving copies not pruned: %s", exc)


def _still_held() -> set[str]:
    return {s for snap in list(_HELD) for s in snap.segments}


class DamagedVersion(IndexUnavailable):
    """A version's files differ from the sizes and checksums its manifest records."""


def verify_files(path: Path, manifest: dict[str, Any]) -> None:
    """Check every file the manifest lists (except Chroma's, which serving never reads) against its recorded size
    and SHA-256; raises DamagedVersion naming the first files that differ. Versions written before manifests
    recorded files are not checked."""
    files = manifest.get("files")
    if not isinstance(files, dict):
        log.info("index version %s records no file checksums: not verified", manifest.get("version_id"))
        return
    damaged: list[str] = []
    for name, expected in sorted(files.items()):
        if name.split("/", 1)[0] == CHROMA:
            continue
        target = path / name
        try:
            size = target.stat().st_size
            if size != expected.get("size"):
                damaged.append(f"{name} has {size} bytes, the manifest records {expected.get('size')}")
            elif _sha256(target) != expected.get("sha256"):
                damaged.append(f"{name} does not match its recorded SHA-256")
        except FileNotFoundError:
            damaged.append(f"{name} is missing")
        if len(damaged) >= 3:
            break
    if damaged:
        version = manifest.get("version_id") or path.name
        log.error("index version %s at %s is damaged: %s", version, path, "; ".join(damaged))
        raise DamagedVersion(
            f"index version {path.name} is damaged ({'; '.join(damaged)}); {MATERIALIZE_HINT}, "
            "or roll CURRENT back to an earlier version"
        )


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/])/(?:[^\s'\"/:]+/)*[^\s'\"/:]+")


def without_paths(text: str, version_dir: Path | None = None) -> str:
    """``text`` with server paths removed: the version directory's prefix dropped (``retrieval/ids.json``) and any
    other absolute path replaced by its last part, so callers learn which file, never where it lives."""
    if version_dir is not None:
        text = text.replace(str(version_dir) + "/", "").replace(str(version_dir), "the version directory")
    return _ABSOLUTE_PATH.sub(lambda m: m.group(0).rsplit("/", 1)[-1], text)


_COLUMN_KINDS = {
    **{name: object for name in ("source", "collection", "access", "path", "type", "seal_state", "parent_id")},
    **{name: object for name in DOMAIN_FIELDS},
    "updated": np.float64,
    "document_date": np.float64,  # livemem.dates: the date the document carries (NaN: none)
}


def _segment_columns(segment: Segment) -> dict[str, np.ndarray]:
    """Columns of a segment's rows as numpy arrays that filters and scoring read (computed once per segment and
    process, shared by every snapshot holding the segment; each distinct value decoded or parsed once); attention is
    the version's, added per snapshot."""
    found = segment.derived.get("columns")
    if found is not None:
        return found
    table = segment.table
    columns: dict[str, np.ndarray] = {
        name: table.column(name)
        for name in ("source", "collection", "access", "path", "type", "seal_state", "parent_id")
    }
    domain_codes = np.asarray(table.codes("domain"))
    domains = [json.loads(d) if d else {} for d in table.dictionary("domain")]
    for name in DOMAIN_FIELDS:
        values = np.array([None if d.get(name) is None else str(d[name]) for d in domains], dtype=object)
        columns[name] = values[domain_codes]
    times = np.array([parse_time(v) for v in table.dictionary("updated_at")], dtype=np.float64)
    columns["updated"] = times[np.asarray(table.codes("updated_at"))]
    dated = np.array([parse_time(d.get("document_date")) for d in domains], dtype=np.float64)
    columns["document_date"] = dated[domain_codes]
    for values in columns.values():  # shared by every snapshot holding the segment (``Columns``)
        values.flags.writeable = False
    segment.derived["columns"] = columns
    return columns


class Rows(Sequence):
    """A snapshot's chunk rows (``rows[i]``: a dict of the ``chunks`` columns), read from the segments' tables when
    asked for: a worker holds no per-row objects, and the tables' pages are shared by the workers of a machine."""

    def __init__(self, parts: list[tuple[Table, np.ndarray]]) -> None:
        self.parts = parts  # (segment table, the segment rows the snapshot holds, in order)
        self.offsets = np.concatenate([[0], np.cumsum([int(rows.size) for _, rows in parts])]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, row):  # type: ignore[override]
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(len(self)))]
        row = int(row)
        if row < 0:
            row += len(self)
        if not 0 <= row < len(self):
            raise IndexError(f"row {row} of {len(self)}")
        part = int(np.searchsorted(self.offsets, row, side="right")) - 1
        table, held = self.parts[part]
        return table.row(int(held[row - self.offsets[part]]))
