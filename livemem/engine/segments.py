"""Segments loaded for serving: the chunk rows, parent files, vectors, BM25 postings, sentence vectors and
approximate-search graph of one segment of a published version (``<home>/parts/seg-<hash>/``, in the format of
``livemem.version.segments``), verified once against their recorded hashes and mapped from the segment's serving
copy (``livemem.version.mapped``: ``<home>/cache/serving/<segment id>/``, written from the verified files by the
first worker that loads the segment and shared by every worker of the machine), or held in this process's memory
when no copy can be written. ``SegmentCache`` keeps the segments the snapshots of this process use
(``livemem.engine.snapshot``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import duckdb
import numpy as np

from livemem.index.ann import GRAPH_FILE, Graph, open_recorded
from livemem.index.bounds import INT8_MAX_NORM, max_row_norm
from livemem.index.kernels import Int8Codes, quantize_int8
from livemem.index.postings import Postings
from livemem.index.scan import share_int8
from livemem.index.sentences import SENTENCES_FILE as SENTENCES
from livemem.index.sentences import Sentences
from livemem.version import mapped
from livemem.version.mapped import Guard, Table
from livemem.version.publisher import file_sha256
from livemem.version.segments import (
    CHUNK_COLUMNS,
    CHUNK_SCHEMA,
    FILES,
    PARENT_COLUMNS,
    PARENT_SCHEMA,
    DamagedSegment,
    segment_meta,
)

log = logging.getLogger(__name__)

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
        if size != files.get(name, {}).get("size") or file_sha256(path) != files[name].get("sha256"):
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
