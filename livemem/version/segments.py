"""Segments: immutable, content-addressed parts holding chunk rows, parent files, vectors and BM25 postings.

``<home>/parts/seg-<hash>/``::

    chunks.parquet    the segment's chunk rows (``CHUNK_SCHEMA``) with ``_row``, their position in the segment
    parents.parquet   the segment's parent files (``PARENT_SCHEMA``) with ``_row``
    dense.npy         float32 vectors of the chunks, row ``i`` is chunk ``_row = i``
    postings.npz      BM25 postings of the chunks (``livemem.index.postings.Postings``)
    sentences.npz     (when some chunk has sentences) their vectors as int8 codes with a scale each, and where each
                      chunk row's sentences start (``livemem.index.sentences.Sentences``)
    ann.usearch       (a segment of at least ``BuildSettings.ann_min_rows`` rows) the HNSW graph of its vectors for
                      the approximate first stage (``livemem.index.ann``), memory-mapped by every serving worker
    segment.json      counts and the size and SHA-256 of every file above; the segment id is
                      ``seg-`` + the first 32 hex digits of the SHA-256 of those hashes, the graph's excepted (it is
                      derived from the vectors: recorded under ``graph``, outside the id)

Files are written into a temporary directory, made read-only, and renamed into place: a segment directory that
exists is complete. Writing a segment whose content already exists reuses it.

Serving (``livemem.engine.segments``) reads a segment through its serving copy (``livemem.version.mapped``:
uncompressed arrays in ``<home>/cache/serving/<segment id>/``, written once from the verified files and mapped by
every worker); removing a segment (``gc_parts``) removes its copy.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from livemem.duck import registered, sql_literals
from livemem.errors import LivingMemoryError
from livemem.index.ann import GRAPH_FILE, build_graph
from livemem.index.postings import Postings
from livemem.index.sentences import SENTENCES_FILE as SENTENCES
from livemem.index.sentences import Sentences
from livemem.version import mapped
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
