"""Writing a build's rows into the version's segments (``livemem.version.segments``): the rebuilt chunks and files
as one new segment named in the membership, segments no row of which is held released, and segments merged when
the version would hold too many or too little of one (``merge_plan``)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from livemem.duck import sql_literals
from livemem.index import records
from livemem.index.sentences import SENTENCES_FILE, Sentences, concat
from livemem.index.sparse import Postings, TermIds
from livemem.version.segments import (
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

log = logging.getLogger(__name__)


def write_segments(
    con: duckdb.DuckDBPyConnection,
    parts: Path,
    dim: int,
    rows: list[dict[str, Any]],
    parents: list[dict[str, Any]],
    vectors: np.ndarray,
    texts: list[str],
    terms: list[TermIds],
    timings: dict[str, float],
    sentences: Sentences | None = None,
    graph_min_rows: int = 0,
) -> list[dict[str, Any]]:
    """Write the rebuilt chunks and files (``terms``: the BM25 tokens of ``rows``, batch by batch; ``sentences``:
    their sentence vectors) as one new segment under ``parts`` (``dim``: the vectors'), name its rows in the
    membership, merge segments when the version would hold too many or too little of one (``merge_plan``; its time
    is added to ``timings["merge_s"]``), and define the ``chunks`` / ``parents`` views. A segment written (new or
    merged) with at least ``graph_min_rows`` rows gets its approximate-search graph (``livemem.index.ann``). Returns
    the version's segments with the rows it holds of each."""
    if rows or parents:
        segment = write_segment(
            con, parts, pd.DataFrame(rows, columns=list(records.CHUNK_COLUMNS)),
            pd.DataFrame(parents, columns=list(PARENT_COLUMNS)), vectors, texts, Postings.merge(terms), sentences,
            graph_min_rows,
        )  # fmt: skip
        hold_segment(con, segment, len(rows), len(parents))
    release_segments(con, [s for s, c, p in live_rows(con) if c == 0 and p == 0])  # nothing of it is held
    create_views(con, version_segments(con))
    live = {s: c + p for s, c, p in live_rows(con)}
    sizes = {s: (m := segment_meta(parts, s))["chunks"] + m["parents"] for s in live}
    plan = merge_plan(live, sizes)
    if plan:
        t = time.perf_counter()
        merge_segments(con, parts, dim, plan, graph_min_rows)
        timings["merge_s"] = round(timings.get("merge_s", 0.0) + time.perf_counter() - t, 3)
        create_views(con, version_segments(con))
    return [{"id": s, "chunks": n_chunks, "parents": n_parents} for s, n_chunks, n_parents in live_rows(con)]


def merge_segments(
    con: duckdb.DuckDBPyConnection, parts: Path, dim: int, plan: list[str], graph_min_rows: int = 0
) -> None:
    """Rewrite the rows this version holds of the ``plan`` segments as one segment (``dim``: the vectors'), with its
    graph when it has at least ``graph_min_rows`` rows."""
    listed = sql_literals(plan)
    held = (
        "SELECT p.* FROM {kind}_parts p ANTI JOIN {kind}_deletes d ON d.segment = p._seg AND d.seg_row = p._row "
        f"WHERE p._seg IN ({listed}) ORDER BY p._seg, p._row"
    )
    chunks = con.execute(held.format(kind="chunk")).df()
    parents = con.execute(held.format(kind="parent")).df()
    release_segments(con, plan)
    vectors = np.zeros((len(chunks), dim), dtype=np.float32)
    pieces: list[Sentences] = []  # the merged rows' sentences, in their order
    for segment, group in chunks.groupby("_seg", sort=False):  # groups in row order: chunks are sorted by _seg
        dense = np.load(parts / str(segment) / "dense.npy", mmap_mode="r")
        seg_rows = group["_row"].to_numpy()
        vectors[group.index.to_numpy()] = dense[seg_rows]
        if SENTENCES_FILE in segment_meta(parts, str(segment)).get("files", {}):  # recorded: must be there
            pieces.append(Sentences.load(parts / str(segment) / SENTENCES_FILE).take(seg_rows))
        else:  # none of its rows has sentences
            pieces.append(Sentences.empty(seg_rows.size, dim))
    sentences = concat(pieces, dim)
    texts = [
        records.embed_text(c, json.loads(h)) for c, h in zip(chunks["content"], chunks["heading_path"], strict=True)
    ]
    segment = write_segment(
        con, parts, chunks.drop(columns=["_seg", "_row"]), parents.drop(columns=["_seg", "_row"]), vectors, texts,
        sentences=sentences, graph_min_rows=graph_min_rows,
    )  # fmt: skip
    hold_segment(con, segment, len(chunks), len(parents))
    log.info("merged %d segments into %s (%d chunks, %d files)", len(plan), segment, len(chunks), len(parents))
