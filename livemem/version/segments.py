"""Segments: immutable, content-addressed parts holding chunk rows, parent files, vectors and BM25 postings.

``<home>/parts/seg-<hash>/``::

    chunks.parquet    the segment's chunk rows (``CHUNK_SCHEMA``) with ``_row``, their position in the segment
    parents.parquet   the segment's parent files (``PARENT_SCHEMA``) with ``_row``
    dense.npy         float32 vectors of the chunks, row ``i`` is chunk ``_row = i``
    postings.npz      BM25 postings of the chunks (``livemem.index.sparse.Postings``)
    sentences.npz     (when some chunk has sentences) their vectors as int8 codes with a scale each, and where each
                      chunk row's sentences start (``livemem.index.sentences.Sentences``)
    ann.usearch       (a segment of at least ``BuildSettings.ann_min_rows`` rows) the HNSW graph of its vectors for
                      the approximate first stage (``livemem.index.ann``), memory-mapped by every serving worker
    segment.json      counts and the size and SHA-256 of every file above; the segment id is
                      ``seg-`` + the first 32 hex digits of the SHA-256 of those hashes, the graph's excepted (it is
                      derived from the vectors: recorded under ``graph``, outside the id)

Files are written into a temporary directory, made read-only, and renamed into place: a segment directory that
exists is complete. Writing a segment whose content already exists reuses it.

Serving reads a segment through its serving copy (``livemem.version.mapped``: uncompressed arrays in
``<home>/cache/serving/<segment id>/``, written once from the verified files and mapped by every worker); removing a
segment (``gc_parts``) removes its copy.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import duckdb
import numpy as np
import pandas as pd

from livemem.duck import registered, sql_literals
from livemem.errors import LivingMemoryError
from livemem.index.ann import GRAPH_FILE, Graph, build_graph, open_recorded
from livemem.index.bounds import INT8_MAX_NORM, max_row_norm
from livemem.index.kernels import Int8Codes, quantize_int8
from livemem.index.scan import share_int8
from livemem.index.sentences import SENTENCES_FILE as SENTENCES
from livemem.index.sentences import Sentences
from livemem.index.sparse import Postings
from livemem.version import mapped
from livemem.version.mapped import Guard, Table
from livemem.version.schema import create_sql

log = logging.getLogger(__name__)

SEGMENT_FORMAT = 1
MAX_SEGMENTS = 8  # a version holding more is merged (the smallest together) when a build publishes
MIN_LIVE = 0.5  # a segment of which a version holds less than this fraction of rows is rewritten by the merge

CHUNK_SCHEMA = (
    ("chunk_id", "VARCHAR"), ("source", "VARCHAR"), ("collection", "VARCHAR"), ("access", "VARCHAR"),
    ("content", "VARCHAR"), ("content_hash", "VARCHAR"), ("embed_hash", "VARCHAR"), ("seal_state", "VARCHAR"),
    ("path", "VARCHAR"), ("commit_sha", "VARCHAR"), ("timestamp", "VARCHAR"), ("type", "VARCHAR"),
    ("size", "INTEGER"), ("created_at", "VARCHAR"), ("updated_at", "VARCHAR"), ("heading_path", "VARCHAR"),
    ("chunk_index", "INTEGER"), ("parent_id", "VARCHAR"), ("domain", "VARCHAR"),
)  # fmt: skip
PARENT_SCHEMA = (
    ("parent_id", "VARCHAR"), ("source", "VARCHAR"), ("collection", "VARCHAR"), ("access", "VARCHAR"),
    ("path", "VARCHAR"), ("blob_sha", "VARCHAR"), ("commit_sha", "VARCHAR"), ("timestamp", "VARCHAR"),
    ("created_at", "VARCHAR"), ("updated_at", "VARCHAR"), ("seal_state", "VARCHAR"), ("type", "VARCHAR"),
    ("size", "INTEGER"), ("truncated", "BOOLEAN"), ("chunk_count", "INTEGER"), ("content", "VARCHAR"),
)  # fmt: skip
CHUNK_COLUMNS = tuple(name for name, _ in CHUNK_SCHEMA)
PARENT_COLUMNS = tuple(name for name, _ in PARENT_SCHEMA)
FILES = ("chunks.parquet", "parents.parquet", "dense.npy", "postings.npz")
# Membership: the segments a version holds, and the rows of them it does not (deletion vectors, as Lucene's
# .liv files, Iceberg's / Delta's delete files). A build copies these small tables from its base and adds the rows
# of the files it rebuilt or dropped: a one-file change costs O(change + deleted rows), never O(corpus).
MEMBERS_SQL = create_sql("held_segments", "chunk_deletes", "parent_deletes")  # livemem.version.schema
_TABLES = {"chunk": ("chunks", CHUNK_SCHEMA), "parent": ("parents", PARENT_SCHEMA)}


class DamagedSegment(LivingMemoryError):
    """A segment's files differ from what its ``segment.json`` (and its name) record."""


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _typed(schema) -> str:
    return ", ".join(f'CAST("{name}" AS {kind}) AS "{name}"' for name, kind in schema)


def _write_rows(con: duckdb.DuckDBPyConnection, tmp: Path, chunks: pd.DataFrame, parents: pd.DataFrame) -> None:
    """Write a segment's chunk and parent rows into ``tmp`` as Parquet, typed by their schema, with ``_row``."""
    for frame, schema, name in ((chunks, CHUNK_SCHEMA, "chunks"), (parents, PARENT_SCHEMA, "parents")):
        data = frame.reset_index(drop=True).reindex(columns=[n for n, _ in schema])
        data.insert(0, "_row", np.arange(len(data), dtype=np.int32))
        target = str(tmp / f"{name}.parquet").replace("'", "''")
        with registered(con, data, f"segment_{name}") as view:
            con.execute(
                f"COPY (SELECT CAST(_row AS INTEGER) AS _row, {_typed(schema)} FROM {view} ORDER BY _row) "
                f"TO '{target}' (FORMAT parquet, COMPRESSION zstd)"
            )


def write_segment(
    con: duckdb.DuckDBPyConnection,
    parts: Path,
    chunks: pd.DataFrame,
    parents: pd.DataFrame,
    vectors: np.ndarray,
    texts: list[str],
    postings: Postings | None = None,
    sentences: Sentences | None = None,
    graph_min_rows: int = 0,
) -> str:
    """Write one segment (chunk rows in the order of ``vectors`` and ``texts``) and return its id. ``postings``: those
    of ``texts`` when the caller has them (a build merges the batches its worker processes tokenized);
    ``sentences``: the rows' sentence vectors (none: no row has any); ``graph_min_rows``: a segment of at least
    this many rows gets its approximate-search graph (``livemem.index.ann``; 0: never)."""
    if len(chunks) != len(vectors) or len(chunks) != len(texts):
        raise ValueError(f"{len(chunks)} chunk rows, {len(vectors)} vectors, {len(texts)} texts")
    if sentences is not None:
        sentences.check(len(chunks), np.asarray(vectors).reshape(len(chunks), -1).shape[1])
    if postings is not None and postings.size != len(chunks):
        raise ValueError(f"{len(chunks)} chunk rows, postings of {postings.size} texts")
    parts.mkdir(parents=True, exist_ok=True)
    tmp = parts / f".tmp-{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        _write_rows(con, tmp, chunks, parents)
        np.save(tmp / "dense.npy", np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(chunks), -1))
        (postings if postings is not None else Postings.build(texts)).save(tmp / "postings.npz")
        written: tuple[str, ...] = FILES
        if sentences is not None and sentences.count:
            sentences.save(tmp / SENTENCES)
            written = (*FILES, SENTENCES)
        files = {name: {"size": (tmp / name).stat().st_size, "sha256": _sha256(tmp / name)} for name in written}
        segment_id = "seg-" + hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:32]
        meta = {"id": segment_id, "format": SEGMENT_FORMAT, "chunks": len(chunks), "parents": len(parents),
                "files": files}  # fmt: skip
        if 0 < graph_min_rows <= len(chunks) and not (parts / segment_id).is_dir():
            started = time.perf_counter()
            meta["graph"] = build_graph(np.load(tmp / "dense.npy", mmap_mode="r"), tmp / GRAPH_FILE)
            log.info("graph of %s: %d rows in %.1f s", segment_id, len(chunks), time.perf_counter() - started)
        (tmp / "segment.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
        for f in tmp.iterdir():
            f.chmod(0o440)  # read-only, never readable by others (livemem.version.catalog.HOME_MODE)
        tmp.chmod(0o750)
        target_dir = parts / segment_id
        if target_dir.is_dir():
            shutil.rmtree(tmp)  # same content written before: shared
        else:
            os.replace(tmp, target_dir)
        return segment_id
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def segment_meta(parts: Path, segment_id: str) -> dict[str, Any]:
    try:
        return json.loads((parts / segment_id / "segment.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DamagedSegment(f"segment {segment_id} is missing or unreadable: {exc}") from exc


def create_views(con: duckdb.DuckDBPyConnection, segments: list[str], schema_name: str = "main") -> None:
    """(Re)define, over ``segments`` (those the version holds): ``chunk_parts`` / ``parent_parts`` (every row of
    them, with ``_seg`` and ``_row``), ``chunk_members`` / ``parent_members`` (segment, seg_row: the rows not
    deleted) and ``chunks`` / ``parents`` (the rows themselves)."""
    for kind, (table, schema) in _TABLES.items():
        if segments:
            union = " UNION ALL ".join(
                f"SELECT '{s}' AS _seg, * FROM read_parquet('{s}/{table}.parquet')" for s in segments
            )
        else:
            union = "SELECT NULL::VARCHAR AS _seg, NULL::INTEGER AS _row, " + ", ".join(
                f'NULL::{kind_} AS "{name}"' for name, kind_ in schema
            ) + " WHERE false"  # fmt: skip
        columns = ", ".join(f'p."{name}"' for name, _ in schema)
        live = f"{kind}_parts p ANTI JOIN {kind}_deletes d ON d.segment = p._seg AND d.seg_row = p._row"
        con.execute(f"CREATE OR REPLACE VIEW {schema_name}.{kind}_parts AS {union}")
        con.execute(
            f"CREATE OR REPLACE VIEW {schema_name}.{kind}_members AS SELECT p._seg AS segment, p._row AS seg_row FROM {live}"
        )
        con.execute(f"CREATE OR REPLACE VIEW {schema_name}.{table} AS SELECT {columns} FROM {live}")


def version_segments(con: duckdb.DuckDBPyConnection, catalog: str | None = None) -> list[str]:
    """The segments a version holds (``catalog``: an ATTACHed version), sorted by name."""
    prefix = f"{catalog}." if catalog else ""
    return [s for (s,) in con.execute(f"SELECT segment FROM {prefix}held_segments ORDER BY 1").fetchall()]


def hold_segment(con: duckdb.DuckDBPyConnection, segment: str, chunks: int, parents: int) -> None:
    """Name a segment (all ``chunks`` and ``parents`` rows of it) in the version being written. A segment written
    again with the same content (same id) is held once, all its rows live."""
    release_segments(con, [segment])
    con.execute("INSERT INTO held_segments VALUES (?, ?, ?)", [segment, chunks, parents])


def release_segments(con: duckdb.DuckDBPyConnection, segments: list[str]) -> None:
    """Stop holding ``segments`` (their deletion rows go with them)."""
    if segments:
        listed = sql_literals(segments)
        for table in ("held_segments", "chunk_deletes", "parent_deletes"):
            con.execute(f"DELETE FROM {table} WHERE segment IN ({listed})")


def live_rows(con: duckdb.DuckDBPyConnection) -> list[tuple[str, int, int]]:
    """(segment, chunk rows held, parent rows held) of each held segment, by name."""
    rows = con.execute(
        "SELECT h.segment, h.chunks - COALESCE(c.n, 0), h.parents - COALESCE(p.n, 0) FROM held_segments h "
        "LEFT JOIN (SELECT segment, COUNT(*) AS n FROM chunk_deletes GROUP BY 1) c USING (segment) "
        "LEFT JOIN (SELECT segment, COUNT(*) AS n FROM parent_deletes GROUP BY 1) p USING (segment) ORDER BY 1"
    ).fetchall()
    return [(s, int(c), int(p)) for s, c, p in rows]


def merge_plan(live: dict[str, int], sizes: dict[str, int], max_rows: int | None = None) -> list[str]:
    """The segments to rewrite as one: those of which too little is live, then the smallest while there are too
    many (``MAX_SEGMENTS``). ``live``/``sizes``: rows held by the version / written in the segment (chunks and
    parents together). Fewer than two segments to merge and none mostly deleted: nothing. ``max_rows`` (the build's
    ``segment_rows``): a segment holding at least half as many rows is full, as in Lucene's ``TieredMergePolicy``
    (``maxMergedSegmentMB``): never merged for being one too many, so a large memory is held as several segments of
    about ``max_rows`` rows instead of being merged back into one that no build could write in bounded memory."""
    chosen = [s for s, n in live.items() if sizes.get(s, 0) and n < MIN_LIVE * sizes[s]]
    rest = sorted((s for s in live if s not in chosen), key=lambda s: (live[s], s))
    if max_rows is not None:
        rest = [s for s in rest if live[s] < max_rows / 2]
    full = len(live) - len(chosen) - len(rest)
    while rest and full + len(rest) + (1 if chosen else 0) > MAX_SEGMENTS:
        chosen.append(rest.pop(0))
    if len(chosen) == 1 and live[chosen[0]] >= MIN_LIVE * sizes.get(chosen[0], 0):
        return []
    return chosen


# --- serving -------------------------------------------------------------------------------------------------


CHUNK_KINDS = {name: "int" if kind == "INTEGER" else "text" for name, kind in CHUNK_SCHEMA}
# The parent files too (``return: documents`` answers with them): a lookup in the Parquet file decodes its whole
# text column (13 ms per request on SciFact), a row of the serving copy a few µs. BOOLEAN is kept as 0 / 1.
PARENT_KINDS = {name: "int" if kind in ("INTEGER", "BOOLEAN") else "text" for name, kind in PARENT_SCHEMA}
POSTING_FIELDS = ("terms", "starts", "rows", "tf", "lengths")


@dataclass(eq=False)
class Segment:
    """One segment loaded for serving, verified once against its recorded hashes: its rows by column
    (``mapped.Table``), vectors and postings, mapped from the serving copy that every worker of the machine shares
    (``livemem.version.mapped``), or held in this process's memory when no copy can be written."""

    id: str
    chunk_ids: np.ndarray
    table: Table
    dense: np.ndarray
    postings: Postings
    mapped: bool = False
    parents: Table | None = None  # the segment's parent files by ``_row`` (``PARENT_KINDS``)
    sentences: Sentences | None = None  # the chunks' sentence vectors, when the segment has any
    derived: dict[str, Any] = field(default_factory=dict)  # what readers compute once per segment (columns)
    guard: Guard | None = None  # the mapped serving copy's file (None: held in this process's memory)
    graph: Graph | None = None  # the approximate-search graph of a large segment (``livemem.index.ann``), mapped

    @property
    def size(self) -> int:
        return len(self.table)

    def intact(self) -> bool:
        """Whether the memory this segment reads is still all there: a serving copy truncated under its mapping
        would end the process with SIGBUS at the next access past its new end (``mapped.Guard``)."""
        return self.guard is None or self.guard.intact()


def _read_verified(parts: Path, segment_id: str) -> tuple[int, dict[str, np.ndarray]]:
    """The arrays of a segment's serving copy, read from its files after checking them against its name."""
    directory = parts / segment_id
    meta = segment_meta(parts, segment_id)
    files = meta.get("files") or {}
    expected = "seg-" + hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:32]
    if meta.get("id") != segment_id or expected != segment_id:
        raise DamagedSegment(f"segment {segment_id}: segment.json does not match its name")
    for name in (*FILES, *([SENTENCES] if SENTENCES in files else [])):
        path = directory / name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise DamagedSegment(f"segment {segment_id}: {name} is missing") from None
        if size != files.get(name, {}).get("size") or _sha256(path) != files[name].get("sha256"):
            raise DamagedSegment(f"segment {segment_id}: {name} does not match its recorded size and SHA-256")
    con = duckdb.connect()
    try:
        target = str(directory / "chunks.parquet").replace("'", "''")
        frame = con.execute(f"SELECT {', '.join(CHUNK_COLUMNS)} FROM read_parquet('{target}') ORDER BY _row").df()
        target = str(directory / "parents.parquet").replace("'", "''")
        parents = con.execute(
            f"SELECT _row, {', '.join(PARENT_COLUMNS)} FROM read_parquet('{target}') ORDER BY _row"
        ).df()
    finally:
        con.close()
    if not np.array_equal(parents["_row"].to_numpy(), np.arange(len(parents))):
        raise DamagedSegment(f"segment {segment_id}: parents.parquet's rows are not numbered 0..{len(parents) - 1}")
    dense = np.ascontiguousarray(np.load(directory / "dense.npy"), dtype=np.float32)
    postings = Postings.load(directory / "postings.npz")
    if not (len(frame) == dense.shape[0] == postings.size == meta.get("chunks")):
        raise DamagedSegment(
            f"segment {segment_id}: {len(frame)} rows, {dense.shape[0]} vectors, {postings.size} BM25 documents"
        )
    arrays = mapped.encode_frame(frame, CHUNK_KINDS)
    arrays["dense"] = dense
    arrays.update({f"postings.{name}": getattr(postings, name) for name in POSTING_FIELDS})
    arrays.update({f"parents.{k}": v for k, v in mapped.encode_frame(parents, PARENT_KINDS).items()})
    if SENTENCES in files:
        sentences = Sentences.load(directory / SENTENCES)
        try:
            sentences.check(len(frame), dense.shape[1])
        except ValueError as exc:
            raise DamagedSegment(f"segment {segment_id}: {SENTENCES}: {exc}") from None
        arrays.update({f"sentences.{k}": getattr(sentences, k) for k in ("codes", "scales", "starts")})
    return len(frame), arrays


def _segment(segment_id: str, meta: dict[str, Any], arrays: dict[str, np.ndarray], is_mapped: bool) -> Segment:
    size = int(meta["chunks"])
    table = Table({k: v for k, v in arrays.items() if k.split(".", 1)[0] in CHUNK_KINDS}, CHUNK_KINDS, size)
    postings = Postings(**{name: arrays[f"postings.{name}"] for name in POSTING_FIELDS})
    dense = arrays["dense"]
    if not (dense.shape[0] == postings.size == size == table.codes("chunk_id").size):
        raise DamagedSegment(f"segment {segment_id}: {size} rows, {dense.shape[0]} vectors, {postings.size} postings")
    if "dense.i8" in arrays:  # the int8 codes every worker maps, for the int8 first stage
        codes = Int8Codes(arrays["dense.i8"], arrays["dense.i8scale"], float(meta["dense_i8_error"]),
                          float(meta["dense_i8_max_hat"]), arrays["dense.i8error"])  # fmt: skip
        share_int8(dense, codes, float(meta["dense_max_norm"]))
    held = {k.removeprefix("parents."): v for k, v in arrays.items() if k.startswith("parents.")}
    parents = Table(held, PARENT_KINDS, held["parent_id.codes"].size) if held else None
    sentences = None
    if "sentences.codes" in arrays:
        sentences = Sentences(arrays["sentences.codes"], arrays["sentences.scales"], arrays["sentences.starts"])
        try:
            sentences.check(size, dense.shape[1])
        except ValueError as exc:
            raise DamagedSegment(f"segment {segment_id}: sentences: {exc}") from None
    return Segment(
        segment_id, table.column("chunk_id"), table, dense, postings, is_mapped, parents=parents, sentences=sentences
    )


def load_segment(parts: Path, segment_id: str, serving_cache: Path | None = None) -> Segment:
    """A segment for serving: mapped from its serving copy (under ``serving_cache``, ``EngineConfig.serving_cache``:
    ``mapped.cache_root``), written first (from its verified files) if there is none yet; held in memory when no
    copy can be written."""
    root = mapped.cache_root(parts, serving_cache)
    found = mapped.open_copy(root, segment_id)
    verify = found is None  # the segment's files (and its graph) are checked when the machine's copy is written
    if found is None:
        size, arrays = _read_verified(parts, segment_id)
        if mapped.writable(root):
            try:
                max_norm = max_row_norm(arrays["dense"])
                extra: dict[str, np.ndarray] = {}
                meta: dict[str, Any] = {"chunks": size, "dense_max_norm": max_norm}
                if max_norm < INT8_MAX_NORM:  # finite: the int8 codes the first stage scans (livemem.index.scan)
                    codes = quantize_int8(arrays["dense"])
                    extra = {
                        "dense.i8": codes.codes,
                        "dense.i8scale": codes.scales,
                        "dense.i8error": cast(np.ndarray, codes.row_error),
                    }
                    meta.update(dense_i8_error=codes.error, dense_i8_max_hat=codes.max_hat)
                    del codes
                mapped.write_copy(root, segment_id, {**arrays, **extra}, meta)
                del extra
                found = mapped.open_copy(root, segment_id)
            except OSError as exc:
                log.warning("serving copy of %s not written (%s): held in this worker's memory", segment_id, exc)
        if found is None:
            segment = _segment(segment_id, {"chunks": size}, arrays, False)
            segment.graph = _graph(parts, segment_id, verify=True)
            return segment
    meta, arrays = found
    segment = _segment(segment_id, meta, arrays, True)
    segment.guard = meta["guard"]
    segment.graph = _graph(parts, segment_id, verify)
    return segment


def _graph(parts: Path, segment_id: str, verify: bool) -> Graph | None:
    """The segment's graph, mapped, when ``segment.json`` records one (``livemem.index.ann.open_recorded``;
    ``verify``: its SHA-256 checked too, as the segment's own files are when the machine's serving copy is written
    from them; later loads check its size and header)."""
    recorded = segment_meta(parts, segment_id).get("graph")
    if not recorded:
        return None
    return open_recorded(parts / segment_id / GRAPH_FILE, recorded, f"segment {segment_id}", verify)


class SegmentCache:
    """Segments loaded by this process, shared by the snapshots that use them: switching to a new version loads
    only the segments it adds. Keeps the segments of the last ``keep`` snapshots loaded. A segment is keyed by its
    serving-copy directory too (``serving_cache``): snapshots loaded under different engine configs map their own."""

    def __init__(self) -> None:
        self._loaded: OrderedDict[tuple[str, str, str], Segment] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, parts: Path, segment_id: str, serving_cache: Path | None = None) -> Segment:
        key = (str(parts), segment_id, str(serving_cache or ""))
        with self._lock:
            found = self._loaded.get(key)
            if found is not None:
                self._loaded.move_to_end(key)
                return found
        segment = load_segment(parts, segment_id, serving_cache)
        with self._lock:
            self._loaded[key] = segment
        return segment

    def discard(self, parts: Path, segments: list[Segment], serving_cache: Path | None = None) -> None:
        """Forget ``segments`` (their serving copies changed under them) and remove those copies, unless another
        worker has already written them again: the next ``get`` loads each from its verified files."""
        root = mapped.cache_root(parts, serving_cache)
        with self._lock:
            for segment in segments:
                key = (str(parts), segment.id, str(serving_cache or ""))
                if self._loaded.get(key) is segment:
                    del self._loaded[key]
        for segment in segments:
            if segment.guard is not None:
                mapped.discard(root, segment.id, segment.guard)

    def retain(self, parts: Path, wanted: set[str]) -> None:
        """Drop loaded segments of ``parts`` not in ``wanted`` (the segments of the snapshots still held)."""
        with self._lock:
            for key in [k for k in self._loaded if k[0] == str(parts) and k[1] not in wanted]:
                del self._loaded[key]


def gc_parts(home_root: Path, referenced: set[str], serving_cache: Path | None = None) -> list[str]:
    """Remove segments no version names, and their serving copies (under ``serving_cache``: ``IndexHome.engine``);
    the caller holds the home's write lock (no build is writing one)."""
    parts = Path(home_root) / "parts"
    if not parts.is_dir():
        return []
    removed = []
    for entry in parts.iterdir():  # read-only files in a writable directory can be removed as they are
        if entry.name.startswith(".tmp-") or (entry.name.startswith("seg-") and entry.name not in referenced):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    mapped.prune(mapped.cache_root(parts, serving_cache), parts)  # their serving copies go with them
    return removed


def append_rows(
    con: duckdb.DuckDBPyConnection,
    version_dir: Path,
    chunks: pd.DataFrame,
    parents: pd.DataFrame | None = None,
    vectors: np.ndarray | None = None,
    dim: int = 384,
) -> str:
    """Add rows to a version being written as one more segment, held, with views (for tools and tests that
    write a version by hand; builds write through ``livemem.ingest.segments_writer``). Missing vectors are zeros.
    The caller lists the returned segment in the version's manifest (``segments``) before publishing it."""
    from livemem.index import records
    from livemem.version import parts_dir

    parents = pd.DataFrame(columns=list(PARENT_COLUMNS)) if parents is None else parents
    if vectors is None:
        vectors = np.zeros((len(chunks), dim), dtype=np.float32)
    texts = [
        records.embed_text(c, json.loads(h)) for c, h in zip(chunks["content"], chunks["heading_path"], strict=True)
    ]
    segment = write_segment(con, parts_dir(version_dir), chunks, parents, vectors, texts)
    hold_segment(con, segment, len(chunks), len(parents))
    create_views(con, version_segments(con))
    return segment
