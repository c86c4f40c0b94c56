"""The living-memory signals of a version, read with it as one object (``MemorySignals``, ``Snapshot.signals``).

The nightly rollup (``livemem.usage.attention``) writes three tables into a version's ``tables.duckdb``:
``attention`` (a score and the last Δ-phase seen, per chunk), ``related_chunks`` (chunks retrieved together) and
``attention_questions`` (the questions a chunk was confirmed useful for, with their vectors). Serving reads them
here, for the rows of one snapshot: attention and last breath and the related chunks when the snapshot is loaded
(``read_signals``), the question memory at its first use and then never again for that snapshot (it is the one
large table, and a version asked nothing that weighs attention never needs it). How ranking weighs them is
``livemem.query.signals`` (docs/attention.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd

Related = dict[int, list[tuple[int, float]]]  # row -> (related row, weight), strongest first
FEW_ATTENDED = 8  # fewer chunks with attention than 1/8 of a snapshot's rows: looked up one by one (read_signals)


@dataclass(frozen=True)
class QuestionMemory:
    """The questions chunks were confirmed useful for (``attention_questions``, written by the nightly rollup)."""

    rows: np.ndarray  # per remembered question: the row of its chunk
    vectors: np.ndarray  # per remembered question: its embedding (the index's model), float32
    share: np.ndarray  # per remembered question: its weight / the summed weights of its chunk's questions
    parent_of: np.ndarray  # per snapshot row: its parent document's number
    parent_count: int

    @property
    def size(self) -> int:
        return int(self.rows.size)

    @classmethod
    def empty(cls) -> QuestionMemory:
        return cls(np.zeros(0, np.int64), np.zeros((0, 1), np.float32), np.zeros(0), np.zeros(0, np.int64), 0)


class MemorySignals:
    """A snapshot's living memory, per row: ``attention`` (score), ``last_breath`` (the last Δ-phase seen, or None),
    ``related`` (chunks often retrieved with it) and ``questions`` (``QuestionMemory``: read once, at first use,
    by ``load_questions``; safe to share between threads)."""

    def __init__(
        self,
        attention: np.ndarray,
        last_breath: list[str | None],
        related: Related,
        load_questions: Callable[[], QuestionMemory],
        breathed: np.ndarray | None = None,
    ) -> None:
        self.attention = attention
        self.last_breath = last_breath
        # the rows whose last breath is set, ascending (None: not known, found from ``last_breath`` when asked)
        self._breathed = breathed
        self.related = related
        self._load_questions = load_questions
        self._questions: QuestionMemory | None = None
        self._lock = threading.Lock()

    @property
    def breathed(self) -> np.ndarray:
        """The rows that have a last breath, ascending (what ``read_signals`` found; a scan of ``last_breath`` for
        signals made without it)."""
        if self._breathed is None:
            self._breathed = np.array([r for r, b in enumerate(self.last_breath) if b], dtype=np.int64)
        return self._breathed

    @property
    def questions(self) -> QuestionMemory:
        found = self._questions
        if found is None:
            with self._lock:  # concurrent first requests read the table once
                if self._questions is None:
                    self._questions = self._load_questions()
                found = self._questions
        return found

    @classmethod
    def empty(cls) -> MemorySignals:
        return cls(np.zeros(0), [], {}, QuestionMemory.empty)


def read_signals(
    con: duckdb.DuckDBPyConnection,
    ids: Sequence[str],
    row_of: Mapping[str, int],
    questions: Callable[[], QuestionMemory],
) -> MemorySignals:
    """Attention, last breath and related chunks of the rows ``ids`` (the version's own tables, not the segments');
    ``questions`` reads the question memory when it is first needed (``question_memory``)."""
    frame = con.execute("SELECT chunk_id, attention_score, last_breath_seen FROM attention").df()
    frame = frame.drop_duplicates("chunk_id", keep="last")  # one row per chunk (as a dict of them kept the last)
    size = len(ids)
    if len(frame) * FEW_ATTENDED < size:
        # few chunks with attention (a version's usual case): each is looked up in ``row_of``, not every row of the
        # version in them (a worker switch at 1M rows); a snapshot holds each chunk id once
        found = np.fromiter((row_of.get(c, -1) for c in frame["chunk_id"].tolist()), np.int64, count=len(frame))
        own = np.flatnonzero(found >= 0)
        where = np.full(size, -1, dtype=np.int64)
        where[found[own]] = own
        held = np.sort(found[own])
    else:  # every row of the version looked up among them (a hash join in C)
        where = pd.Index(frame["chunk_id"]).get_indexer(list(ids)) if len(frame) else np.full(size, -1)
        held = np.flatnonzero(where >= 0)
    attention = np.zeros(size, dtype=np.float64)
    attention[held] = frame["attention_score"].to_numpy(dtype=np.float64)[where[held]]
    last_breath: list[str | None] = [None] * size
    seen = frame["last_breath_seen"].to_numpy(dtype=object)
    breathed = []
    for row in held.tolist():
        breath = seen[where[row]]
        if isinstance(breath, str):
            last_breath[row] = breath
            if breath:
                breathed.append(row)
    return MemorySignals(attention, last_breath, _related(con, row_of), questions, np.array(breathed, dtype=np.int64))


def _related(con: duckdb.DuckDBPyConnection, row_of: Mapping[str, int]) -> Related:
    """Chunks retrieved together (from the nightly rollup's ``related_chunks``), by row, strongest first."""
    if not _has_table(con, "related_chunks"):
        return {}
    related: Related = {}
    for cid, rid, weight in con.execute(
        "SELECT chunk_id, related_id, weight FROM related_chunks ORDER BY chunk_id, weight DESC"
    ).fetchall():
        if cid in row_of and rid in row_of:
            related.setdefault(row_of[cid], []).append((row_of[rid], float(weight)))
    return related


def _has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    found = con.execute("SELECT COUNT(*) FROM information_schema.tables WHERE table_name = ?", [name]).fetchone()
    return bool(found and found[0])


def question_memory(
    tables: Path, manifest: dict[str, Any], row_of: Mapping[str, int], parent_ids: np.ndarray, dim: int, model_id: str
) -> QuestionMemory:
    """The question memory of the version whose tables are ``tables`` (``tables.duckdb``), for the snapshot rows
    ``row_of`` (with their ``parent_ids``): empty for a version without one, or whose questions were embedded by
    another model than the index's (``manifest.attention.question_model``) or at another dimension."""
    empty = QuestionMemory.empty()
    size = len(row_of)
    if not size or not tables.is_file():
        return empty
    # its own read-only connection: read at first use, possibly after the snapshot's own was closed
    con = duckdb.connect(str(tables), read_only=True)
    try:
        if not _has_table(con, "attention_questions"):
            return empty
        table = con.execute("SELECT chunk_id, vector, weight FROM attention_questions ORDER BY chunk_id").fetchnumpy()
    finally:
        con.close()
    model = (manifest.get("attention") or {}).get("question_model")
    keep = [
        i for i, (c, v) in enumerate(zip(table["chunk_id"], table["vector"], strict=True))
        if c in row_of and len(v) == dim
    ]  # fmt: skip
    if not keep or (model and model != model_id):
        return empty
    index = np.array([row_of[table["chunk_id"][i]] for i in keep], dtype=np.int64)
    weight = np.asarray(table["weight"], dtype=np.float64)[keep]
    total = np.bincount(index, weights=weight, minlength=size)
    _, parent_of = np.unique(np.asarray(parent_ids).astype(str), return_inverse=True)
    return QuestionMemory(
        rows=index,
        vectors=np.stack([table["vector"][i] for i in keep]).astype(np.float32),
        share=weight / total[index],
        parent_of=parent_of.astype(np.int64),
        parent_count=int(parent_of.max()) + 1,
    )
