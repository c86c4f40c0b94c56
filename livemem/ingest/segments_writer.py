"""The version's segments once a build's new ones are written (``livemem.ingest.flush``): segments no row of which is
held released, and segments merged when the version would hold too many or too little of one (``merge_plan``), into
segments of at most ``BuildSettings.segment_rows`` chunk rows."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from livemem.duck import sql_literals
from livemem.index import records
from livemem.index.sentences import SENTENCES_FILE, Sentences, concat
from livemem.version.segments import (
    MIN_LIVE,
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


def finish_segments(
    con: duckdb.DuckDBPyConnection,
    parts: Path,
    dim: int,
    timings: dict[str, float],
    graph_min_rows: int = 0,
    max_rows: int | None = None,
) -> list[dict[str, Any]]:
    """Once the build's new segments are written and held (``livemem.ingest.flush``): release the segments no row of
    which is held, merge segments when the version would hold too many or too little of one (``merge_plan``; merged
    segments of at most ``max_rows`` chunk rows each, ``dim``: the vectors'; its time is added to
    ``timings["merge_s"]``), and define the ``chunks`` / ``parents`` views. A segment merged with at least
    ``graph_min_rows`` rows gets its approximate-search graph (``livemem.index.ann``). Returns the version's segments
    with the rows it holds of each."""
    release_segments(con, [s for s, c, p in live_rows(con) if c == 0 and p == 0])  # nothing of it is held
    create_views(con, version_segments(con))
    held = live_rows(con)
    live = {s: c + p for s, c, p in held}
    sizes = {s: (m := segment_meta(parts, s))["chunks"] + m["parents"] for s in live}
    plan = merge_plan(live, sizes, max_rows)
    if plan:
        t = time.perf_counter()
        chunks = {s: c for s, c, _ in held}
        for group in merge_groups(plan, chunks, max_rows):
            if len(group) == 1 and live[group[0]] >= MIN_LIVE * sizes[group[0]]:
                continue  # chosen to be merged, but no other fits beside it: kept as it is
            merge_segments(con, parts, dim, group, graph_min_rows)
        timings["merge_s"] = round(timings.get("merge_s", 0.0) + time.perf_counter() - t, 3)
        create_views(con, version_segments(con))
    return [{"id": s, "chunks": n_chunks, "parents": n_parents} for s, n_chunks, n_parents in live_rows(con)]


def merge_groups(plan: list[str], chunks: dict[str, int], max_rows: int | None) -> list[list[str]]:
    """The ``plan`` segments in groups to merge, each holding at most ``max_rows`` live chunk rows (``chunks``) unless
    one segment alone holds more. ``max_rows`` None: one group."""
    if max_rows is None:
        return [plan]
    groups: list[list[str]] = []
    total = 0
    for segment in plan:
        if groups and total + chunks[segment] <= max_rows:
            groups[-1].append(segment)
            total += chunks[segment]
        else:
            groups.append([segment])
            total = chunks[segment]
    return groups


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
