"""A version's living memory as one object (``livemem.version.signals.MemorySignals``): attention, last breath and
related chunks per row of the snapshot, and the question memory read once, at first use, by the snapshot that
owns it (no process-wide cache keyed by ``id(snapshot)``)."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import numpy as np
import pytest

from livemem.query import signals as ranking
from livemem.version import schema
from livemem.version.signals import MemorySignals, QuestionMemory, question_memory, read_signals

pytestmark = pytest.mark.unit

IDS = ["c-a", "c-b", "c-c"]  # the snapshot's rows, in order
ROW_OF = {c: i for i, c in enumerate(IDS)}
PARENTS = np.array(["p-1", "p-1", "p-2"], dtype=object)
DIM = 4


def unit(*values: float) -> list[float]:
    vector = np.array(values, dtype=np.float32)
    return (vector / np.linalg.norm(vector)).tolist()


@pytest.fixture
def tables(tmp_path: Path) -> Path:
    """A version's tables.duckdb after a rollup: attention, related chunks and the questions chunks were confirmed
    for (one of a chunk this version no longer holds, one of another dimension: both ignored)."""
    path = tmp_path / "tables.duckdb"
    con = duckdb.connect(str(path))
    con.execute(schema.create_sql("attention", "related_chunks", "attention_questions"))
    con.executemany(
        "INSERT INTO attention VALUES (?, ?, ?)", [("c-a", 2.0, "Δ3"), ("c-c", 0.5, None), ("gone", 9.0, "Δ1")]
    )
    con.executemany(
        "INSERT INTO related_chunks VALUES (?, ?, ?)",
        [("c-a", "c-c", 0.25), ("c-a", "c-b", 0.75), ("c-b", "gone", 1.0)],
    )
    con.executemany(
        "INSERT INTO attention_questions VALUES (?, ?, ?, ?)",
        [
            ("c-a", "q1", unit(1, 0, 0, 0), 3.0),
            ("c-a", "q2", unit(0, 1, 0, 0), 1.0),
            ("c-c", "q3", unit(0, 0, 1, 0), 2.0),
            ("gone", "q4", unit(1, 1, 0, 0), 1.0),
            ("c-b", "q5", [1.0, 0.0], 1.0),  # another model's dimension
        ],
    )
    con.close()
    return path


def loaded(path: Path, model: str | None = "m") -> tuple[MemorySignals, list[int]]:
    """The signals a snapshot of ``IDS`` reads, and how often its question memory was read."""
    reads: list[int] = []
    manifest = {"attention": {"question_model": model}}

    def load() -> QuestionMemory:
        reads.append(1)
        return question_memory(path, manifest, ROW_OF, PARENTS, DIM, "m")

    con = duckdb.connect(str(path), read_only=True)
    try:
        return read_signals(con, IDS, ROW_OF, load), reads
    finally:
        con.close()


def test_attention_breath_and_related_are_read_per_row_with_the_version(tables: Path) -> None:
    signals, reads = loaded(tables)
    assert signals.attention.tolist() == [2.0, 0.0, 0.5]  # a chunk without an attention row has none
    assert signals.last_breath == ["Δ3", None, None]
    assert signals.related == {0: [(1, 0.75), (2, 0.25)]}  # strongest first; pairs with a chunk gone are dropped
    assert reads == []  # the question memory is not read until a ranking needs it


def test_the_question_memory_is_read_once_however_many_requests_ask_at_once(tables: Path) -> None:
    signals, reads = loaded(tables)
    barrier = threading.Barrier(8)
    seen: list[QuestionMemory] = []

    def ask() -> None:
        barrier.wait()
        seen.append(signals.questions)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert reads == [1] and all(memory is seen[0] for memory in seen)
    memory = signals.questions
    assert reads == [1]
    assert memory.rows.tolist() == [0, 0, 2]  # "gone" and the 2-dimensional vector left out
    assert memory.share.tolist() == [0.75, 0.25, 1.0]  # each question's weight over its chunk's summed weights
    assert memory.parent_of.tolist() == [0, 0, 1] and memory.parent_count == 2


def test_a_question_memory_of_another_model_is_empty(tables: Path) -> None:
    signals, _ = loaded(tables, model="another-model")
    assert signals.questions.size == 0
    assert MemorySignals.empty().questions.size == 0


def test_ranking_weighs_the_snapshots_own_signals(tables: Path) -> None:
    """Matched attention reads the snapshot's ``signals``: a chunk confirmed for this very question gains its
    attention, its parent's other chunk half of that, a chunk confirmed only for unlike questions nothing."""
    signals, _ = loaded(tables)

    class Snap:  # what ranking reads of a snapshot
        size = len(IDS)

    snap = Snap()
    snap.signals = signals  # type: ignore[attr-defined]
    matched = ranking.matched_attention(snap, np.array(unit(1, 0, 0, 0), dtype=np.float32))  # type: ignore[arg-type]
    assert matched.tolist() == pytest.approx([2.0 * 0.75, 0.5 * 2.0 * 0.75, 0.0])
    assert ranking.question_memory(snap) is signals.questions  # type: ignore[arg-type]
