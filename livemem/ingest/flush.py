"""A build's new rows written as segments of about ``BuildSettings.segment_rows`` chunk rows each, while the files are
still being read and chunked, as Lucene's ``IndexWriter`` flushes a segment when its RAM buffer fills
(``IndexWriterConfig.setRAMBufferSizeMB``).

A build holds one segment's rows, texts, vectors, sentence codes and tokens at a time, whatever the size of the
corpus: at 1.5M chunks written as one segment a build needed ≈ 20 GB, and 2M did not fit 24 GB. A segment is flushed
at the first batch of files (``livemem.ingest.read.CHUNK_BATCH_FILES``) that reaches the limit, so a file's chunks
never straddle two segments. Segments are immutable and content-addressed: one written by a build that fails later
is held by no version and removed by ``gc``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from livemem.duck import sql_literal
from livemem.index import records
from livemem.index.postings import Postings, TermIds
from livemem.ingest.rechunk import embed_new, embed_sentences
from livemem.model.embedding import Embedder
from livemem.version.segments import PARENT_COLUMNS, hold_segment, write_segment

log = logging.getLogger(__name__)


def tick(timings: dict[str, float], name: str, since: float) -> float:
    """Add the seconds since ``since`` to ``timings[name]`` (a build's ``BuildResult.timings``); returns now."""
    now = time.perf_counter()
    timings[name] = round(timings.get(name, 0.0) + now - since, 3)
    return now


@dataclass
class SegmentFlusher:
    """Gathers a build's new chunk and file rows (``add``, in path order) and writes them as segments of about
    ``max_rows`` chunk rows (``flush``): embedded (only text never embedded before; the rest from the cache), written
    with their postings, sentences and, from ``graph_min_rows`` rows, their graph, and held by the version being
    written. ``sentence_texts``: the sentence texts of each row; ``timings`` gets ``embed_s`` and ``segment_s``."""

    con: duckdb.DuckDBPyConnection
    parts: Path
    embedder: Embedder
    cache_dir: Path
    max_rows: int
    graph_min_rows: int
    sentence_texts: Callable[[list[dict[str, Any]]], list[list[str]]]
    timings: dict[str, float]
    progress: Callable[[str, int, int], None] | None = None
    written: list[str] = field(default_factory=list)  # the segments flushed, in order
    computed: int = 0  # texts embedded (chunks and sentences)
    reused: int = 0  # texts whose vectors came from the cache
    busy_s: float = 0.0  # seconds spent flushing
    _rows: list[dict[str, Any]] = field(default_factory=list)
    _parents: list[dict[str, Any]] = field(default_factory=list)
    _terms: list[TermIds] = field(default_factory=list)

    def add(self, rows: list[dict[str, Any]], parents: list[dict[str, Any]], terms: list[TermIds]) -> None:
        """One batch of files' rows (``terms``: the BM25 tokens of ``rows``, in batches); flushed when ``max_rows``
        is reached."""
        self._rows += rows
        self._parents += parents
        self._terms += terms
        if len(self._rows) >= self.max_rows:
            self.flush()

    def flush(self) -> None:
        """Write the rows gathered so far as one segment (nothing gathered: nothing written)."""
        if not self._rows and not self._parents:
            return
        start = t = time.perf_counter()
        rows, parents, terms = self._rows, self._parents, self._terms
        self._rows, self._parents, self._terms = [], [], []
        texts = [r.pop("_embed_text") for r in rows]
        vectors, computed, reused = embed_new(texts, self.cache_dir, self.embedder, self.progress)
        sentences, more, again = embed_sentences(
            self.sentence_texts(rows), self.cache_dir, self.embedder, self.progress
        )
        self.computed += computed + more
        self.reused += reused + again
        t = self._tick("embed_s", t)
        chunks = pd.DataFrame(rows, columns=list(records.CHUNK_COLUMNS))
        del rows  # the frame holds them now
        segment = write_segment(
            self.con, self.parts, chunks, pd.DataFrame(parents, columns=list(PARENT_COLUMNS)), vectors, texts,
            Postings.merge(terms), sentences, self.graph_min_rows,
        )  # fmt: skip
        hold_segment(self.con, segment, len(chunks), len(parents))
        self.written.append(segment)
        self._tick("segment_s", t)
        self.busy_s += time.perf_counter() - start
        log.info("flushed segment %s: %d chunks, %d files", segment, len(chunks), len(parents))

    def _tick(self, name: str, since: float) -> float:
        return tick(self.timings, name, since)

    def fresh_table(self, name: str = "fresh_rows") -> str:
        """A temp table of the flushed chunk rows' (chunk_id, source, path, heading_path), read back from the segments
        written (nothing kept in Python per row); returns its name."""
        files = [str(self.parts / s / "chunks.parquet") for s in self.written]
        select = (
            f"SELECT chunk_id, source, path, heading_path FROM read_parquet([{', '.join(map(sql_literal, files))}])"
            if files
            else "SELECT NULL::VARCHAR AS chunk_id, NULL::VARCHAR AS source, NULL::VARCHAR AS path, "
            "NULL::VARCHAR AS heading_path WHERE false"
        )
        self.con.execute(f"CREATE TEMP TABLE {name} AS {select}")
        return name
